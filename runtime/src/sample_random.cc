#include "aryl/sample_random.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace aryl {
namespace {

// splitmix64's finalizer: a bijection on 64 bits that mixes every input bit.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t SampleKey(uint64_t seed, int64_t epoch, int64_t sample) {
  return Mix(Mix(Mix(seed) ^ uint64_t(epoch)) ^ uint64_t(sample));
}

at::Tensor SampleDropoutMask(std::span<const uint64_t> keys, int64_t row_numel, double p, uint64_t salt) {
  if (!(p >= 0.0 && p < 1.0)) throw std::invalid_argument("SampleDropoutMask: p=" + std::to_string(p) + ", want [0, 1)");
  if (row_numel < 0) throw std::invalid_argument("SampleDropoutMask: row_numel=" + std::to_string(row_numel));
  auto mask = torch::empty({int64_t(keys.size()), row_numel}, torch::kFloat32);
  float* out = mask.data_ptr<float>();
  const float keep = float(1.0 / (1.0 - p));
  // Dropped when the element's hash, as a fraction of 2^32, is below p.
  const uint64_t threshold = uint64_t(p * 4294967296.0);
  const uint64_t salted = Mix(salt ^ 0xD1B54A32D192ED03ull);
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t row = Mix(keys[i] ^ salted);
    for (int64_t j = 0; j < row_numel; ++j) {
      out[int64_t(i) * row_numel + j] = (Mix(row + uint64_t(j)) >> 32) < threshold ? 0.f : keep;
    }
  }
  return mask;
}

at::Tensor SampleDropout(const at::Tensor& x, std::span<const uint64_t> keys, double p, uint64_t salt,
                         bool training) {
  if (!training || p == 0.0) return x;
  if (x.dim() < 1 || x.size(0) != int64_t(keys.size())) {
    throw std::invalid_argument("SampleDropout: x has " + std::to_string(x.dim() < 1 ? 0 : x.size(0)) + " rows, " +
                                std::to_string(keys.size()) + " keys");
  }
  auto mask = SampleDropoutMask(keys, keys.empty() ? 0 : x.numel() / x.size(0), p, salt);
  return x * mask.view(x.sizes()).to(x.options());
}

}  // namespace aryl
