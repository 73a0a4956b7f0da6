// Random numbers per sample, the same at every world size.
//
// A resize changes which rank trains on a sample and where in its rank's local
// batch the sample sits. A dropout layer that draws its mask from the rank's
// generator (torch::nn::Dropout, torch.nn.Dropout) therefore gives a sample a
// different mask after a resize, and a resized run drifts away from a
// fixed-size one. Here a sample's random numbers are a pure function of
//   (sampler seed, epoch, sample index, salt)
// and of nothing a resize changes (rank, world size, local position, what the
// rank drew before):
//  1. ElasticSampler::Batch::random_keys[i] = SampleKey(seed, epoch,
//     indices[i]). A sample is visited once per epoch, so the key names one
//     visit; the step is not needed (it is a function of the epoch and the
//     cursor, and under BatchPolicy::kLinearScaling it changes with the world
//     while the visit does not). A step replayed after a fault gets the same
//     keys, hence the same masks.
//  2. Element j of sample i's mask is a counter-based hash of (key_i, salt,
//     j): no generator state at all, so nothing to transfer or checkpoint, and
//     the masks of a local batch are the rows of the global batch's masks.
//  3. `salt` tells apart the random layers of one model (give each its own,
//     the same on every worker).
// Augmentation written with torch's random ops can seed a generator per
// sample from the key (torch::make_generator<at::CPUGeneratorImpl>(key)).
// What is not per sample (the CPU default generator) is tracked instead:
// ElasticState::TrackRandomState().
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

namespace at {
class Tensor;
}

namespace aryl {

// The key of one visit of `sample` in `epoch` of a sampler seeded with `seed`.
uint64_t SampleKey(uint64_t seed, int64_t epoch, int64_t sample);

// A float32 tensor [keys.size(), row_numel]: row i holds, per element, 0 with
// probability p and 1 / (1 - p) otherwise, drawn from (keys[i], salt) alone.
// std::invalid_argument when p is outside [0, 1) or row_numel < 0.
at::Tensor SampleDropoutMask(std::span<const uint64_t> keys, int64_t row_numel, double p, uint64_t salt);

// Inverted dropout of `x` (first dimension: one row per key) with the masks
// of SampleDropoutMask; `x` itself when !training or p == 0. Differentiable
// (the mask is a constant). std::invalid_argument when x.size(0) != keys.size().
at::Tensor SampleDropout(const at::Tensor& x, std::span<const uint64_t> keys, double p, uint64_t salt,
                         bool training = true);

}  // namespace aryl
