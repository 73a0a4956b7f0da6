#!/usr/bin/env bash
# GPU checks for the runtime, in one go, on a machine with NVIDIA GPUs:
#   1. builds Aryl against a CUDA libtorch (the one inside a PyTorch install,
#      or TORCH_CMAKE_PREFIX=<dir with TorchConfig.cmake>) with NCCL forced on;
#   2. runs gpu_check (NCCL all-reduce/broadcast, ncclCommShrink, timeout);
#   3. runs elastic_mlp on the NCCL backend at world 1 under aryl-rt-launch.
# Writes a summary to $OUT/gpu-check.txt when OUT is set, else to stdout.
# Not runnable on the CPU-only development machines (no GPU).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
if [[ -z "${TORCH_CMAKE_PREFIX:-}" ]]; then
  TORCH_CMAKE_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
fi
REPORT=${OUT:+$OUT/gpu-check.txt}
REPORT=${REPORT:-/dev/stdout}
{
  echo "== gpu-check $(date -u +%FT%TZ) on $(hostname)"
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
  echo "torch: $TORCH_CMAKE_PREFIX"
} >>"$REPORT"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_CMAKE_PREFIX" -DARYL_WITH_TORCH=ON -DARYL_WITH_CUDA=ON -DARYL_WITH_NCCL=ON >/dev/null
cmake --build "$BUILD" --target gpu_check elastic_mlp aryl-rt-launch runtime_unit_test -j"$(nproc)"
"$BUILD"/bench/runtime/gpu_check | tee -a "$REPORT"
"$BUILD"/tests/runtime/runtime_unit_test --gtest_brief=1 2>&1 | tail -3 | tee -a "$REPORT"
"$BUILD"/runtime/aryl-rt-launch --workers 1 --backend nccl -- "$BUILD"/examples/elastic_mlp --device cuda --steps 50 --log-every 25 \
  2>&1 | grep -E "^step=|^done|exited" | tee -a "$REPORT"
