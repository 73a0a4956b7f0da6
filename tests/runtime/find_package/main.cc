// Trains a linear model for a few steps through an installed Aryl runtime,
// with the umbrella header and a plain module tracked by reference.
#include <aryl/aryl.h>
#include <torch/torch.h>

#include <cstdio>

struct Net : torch::nn::Module {
  Net() { fc = register_module("fc", torch::nn::Linear(4, 1)); }
  torch::nn::Linear fc{nullptr};
};

int main() {
  Net model;
  torch::optim::SGD optimizer(model.parameters(), 0.1);
  aryl::ElasticSampler sampler(64, 8, 1);
  aryl::ElasticState state;
  state.Track(model);
  state.Track(optimizer);
  state.Track(sampler);
  auto x = torch::randn({64, 4});
  auto y = x.sum(1, true);
  auto rt = aryl::Runtime::FromEnv();
  while (rt.Step(state) && state.step() < 20) {
    auto batch = sampler.Local(rt.Rank(), rt.WorldSize());
    auto idx = torch::tensor(batch.indices, torch::kInt64);
    optimizer.zero_grad();
    torch::mse_loss(model.fc(x.index_select(0, idx)), y.index_select(0, idx)).backward();
    if (!rt.AllReduceGradients(model, batch.weight)) continue;
    optimizer.step();
  }
  std::printf("consumer: %lld steps at world %d (C++ %ld)\n", (long long)state.step(), rt.WorldSize(), __cplusplus);
  return rt.ExitCode();
}
