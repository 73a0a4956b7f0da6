// Builds the precompiled <torch/torch.h> that the programs including libtorch
// reuse (aryl_reuse_torch_pch in cmake/ArylOptions.cmake); it is never run.
int main() { return 0; }
