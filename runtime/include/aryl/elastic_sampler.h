// ElasticSampler: which samples each rank trains on, such that every sample of
// an epoch is visited exactly once across any sequence of world-size changes.
//
// The position is global: (epoch, cursor) into a permutation of
// [0, dataset_size) that depends only on (seed, epoch). A step consumes the
// next global batch [cursor, cursor + GlobalBatch(world)); rank r takes a
// contiguous slice of it (sizes differ by at most one: the remainder is spread
// over the first ranks). The last batch of an epoch is shorter when
// dataset_size is not a multiple of the global batch. Because the cursor moves
// only when the runtime commits a step, a step abandoned after a fault is
// replayed with the same samples by the survivors.
//
// Batch policies:
//  - kFixedGlobal (default): the global batch is the same at every world size;
//    local batch = global / world; the learning rate is unchanged. Training is
//    then (up to float summation order) independent of the world size.
//  - kLinearScaling (opt-in): the local batch is fixed, the global batch is
//    local * world and LearningRateScale(world) = world / reference_world.
//
// Order: a seeded permutation per epoch (default); with
// SamplerOptions::shuffle = false, the dataset order 0, 1, 2, ... every epoch;
// or the caller's own order per epoch (SamplerOptions::order, e.g. the order
// torch's DistributedSampler gives at a fixed world size: see the Python
// ElasticSampler.like_distributed_sampler). An order must be a permutation of
// [0, dataset_size) and a function of the epoch only (a restored position
// must find the same samples); Local throws std::invalid_argument naming the
// epoch and the first bad entry otherwise.
// Batch::last_in_epoch marks the step that finishes an epoch (evaluate, save,
// adjust the learning rate there); Batch::As<T>() gives the indices in the
// type a dataset takes (size_t for torch::data datasets); Batch::random_keys
// give each sample random numbers that a resize does not change.
//
// Thread safety: not thread-safe; owned by the training loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace aryl {

enum class BatchPolicy { kFixedGlobal, kLinearScaling };

struct SamplerOptions {
  bool shuffle = true;  // false: sequential order
  BatchPolicy policy = BatchPolicy::kFixedGlobal;
  int reference_world = 1;  // kLinearScaling: the world the learning rate was tuned at
  // The order of an epoch's samples (set: shuffle is ignored). Called once
  // per epoch the sampler reaches, on the thread that calls Local.
  std::function<std::vector<int64_t>(int64_t epoch)> order;
};

class ElasticSampler {
 public:
  struct Batch {
    std::vector<int64_t> indices;  // this rank's samples, in order
    // This rank's share of the global batch: indices.size() / global size.
    // Scale a mean loss (or the gradients) by it, then sum across ranks: the
    // result is the mean over the global batch whatever the world size.
    double weight = 0.0;
    int64_t epoch = 0;
    int64_t global_size = 0;  // size of this step's global batch
    bool last_in_epoch = false;  // committing this step finishes the epoch
    // One key per index: SampleKey(seed, epoch, indices[i]) (aryl/sample_random.h).
    // Random numbers drawn from it (SampleDropout) do not depend on the rank
    // or the world size, so a resized run with dropout matches a fixed one.
    std::vector<uint64_t> random_keys;

    // The indices converted to the type a dataset takes.
    template <typename T = std::size_t>
    std::vector<T> As() const {
      return std::vector<T>(indices.begin(), indices.end());
    }
  };

  // kFixedGlobal: `batch` is the global batch. kLinearScaling: `batch` is the
  // local batch and `reference_world` the world at which the learning rate was tuned.
  ElasticSampler(int64_t dataset_size, int64_t batch, uint64_t seed,
                 BatchPolicy policy = BatchPolicy::kFixedGlobal, int reference_world = 1);
  ElasticSampler(int64_t dataset_size, int64_t batch, uint64_t seed, SamplerOptions options);

  // The current step's slice for `rank` of `world`. Does not move the cursor.
  Batch Local(int rank, int world) const;
  // The global batch at `world` (before clipping at the end of an epoch).
  int64_t GlobalBatch(int world) const;
  double LearningRateScale(int world) const;

  // Moves past the current global batch (the runtime calls this on commit).
  void Advance(int world);
  void SetPosition(int64_t epoch, int64_t cursor);
  int64_t epoch() const { return epoch_; }
  int64_t cursor() const { return cursor_; }
  int64_t dataset_size() const { return dataset_size_; }
  const SamplerOptions& options() const { return options_; }

  // Splits `indices` into chunks of at most `max_local` (gradient accumulation
  // when a local batch would not fit); each chunk's weight is chunk / global.
  static std::vector<Batch> SplitMicroBatches(const Batch& batch, int64_t max_local);

 private:
  const std::vector<int64_t>& Permutation(int64_t epoch) const;

  int64_t dataset_size_;
  int64_t batch_;
  uint64_t seed_;
  SamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t cursor_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> permutation_;
};

}  // namespace aryl
