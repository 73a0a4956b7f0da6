#include "aryl/elastic_sampler.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>

#include "aryl/sample_random.h"

namespace aryl {

ElasticSampler::ElasticSampler(int64_t dataset_size, int64_t batch, uint64_t seed, BatchPolicy policy,
                               int reference_world)
    : ElasticSampler(dataset_size, batch, seed, SamplerOptions{true, policy, reference_world, {}}) {}

ElasticSampler::ElasticSampler(int64_t dataset_size, int64_t batch, uint64_t seed, SamplerOptions options)
    : dataset_size_(dataset_size), batch_(batch), seed_(seed), options_(options) {
  options_.reference_world = std::max(1, options_.reference_world);
  if (dataset_size <= 0 || batch <= 0) {
    throw std::invalid_argument("ElasticSampler: dataset_size=" + std::to_string(dataset_size) +
                                " and batch=" + std::to_string(batch) + " must be positive");
  }
}

int64_t ElasticSampler::GlobalBatch(int world) const {
  return options_.policy == BatchPolicy::kFixedGlobal ? batch_ : batch_ * std::max(1, world);
}

double ElasticSampler::LearningRateScale(int world) const {
  return options_.policy == BatchPolicy::kFixedGlobal ? 1.0 : double(std::max(1, world)) / options_.reference_world;
}

const std::vector<int64_t>& ElasticSampler::Permutation(int64_t epoch) const {
  if (cached_epoch_ != epoch && options_.order) {
    std::vector<int64_t> order = options_.order(epoch);
    const std::string where = "ElasticSampler: the order of epoch " + std::to_string(epoch);
    if (int64_t(order.size()) != dataset_size_) {
      throw std::invalid_argument(where + " has " + std::to_string(order.size()) +
                                  " entries; dataset_size is " + std::to_string(dataset_size_));
    }
    std::vector<bool> seen(size_t(dataset_size_), false);
    for (size_t i = 0; i < order.size(); ++i) {
      const int64_t v = order[i];
      if (v < 0 || v >= dataset_size_ || seen[size_t(v)]) {
        throw std::invalid_argument(where + " is not a permutation of [0, " + std::to_string(dataset_size_) +
                                    "): entry " + std::to_string(i) + " is " + std::to_string(v) +
                                    (v >= 0 && v < dataset_size_ ? " again" : ", out of range"));
      }
      seen[size_t(v)] = true;
    }
    permutation_ = std::move(order);
    cached_epoch_ = epoch;
  }
  if (cached_epoch_ != epoch) {
    permutation_.resize(dataset_size_);
    for (int64_t i = 0; i < dataset_size_; ++i) permutation_[i] = i;
    cached_epoch_ = epoch;
    if (!options_.shuffle) return permutation_;
    // Fisher-Yates with an explicit generator: identical on every platform.
    std::mt19937_64 rng(seed_ ^ (0x9E3779B97F4A7C15ull * uint64_t(epoch + 1)));
    for (int64_t i = dataset_size_ - 1; i > 0; --i) {
      int64_t j = int64_t(rng() % uint64_t(i + 1));
      std::swap(permutation_[i], permutation_[j]);
    }
  }
  return permutation_;
}

ElasticSampler::Batch ElasticSampler::Local(int rank, int world) const {
  Batch out;
  out.epoch = epoch_;
  int64_t global = std::min(GlobalBatch(world), dataset_size_ - cursor_);
  out.global_size = global;
  int64_t base = global / world, extra = global % world;
  int64_t begin = cursor_ + rank * base + std::min<int64_t>(rank, extra);
  int64_t size = base + (rank < extra ? 1 : 0);
  const auto& perm = Permutation(epoch_);
  out.indices.assign(perm.begin() + begin, perm.begin() + begin + size);
  out.random_keys.reserve(out.indices.size());
  for (int64_t index : out.indices) out.random_keys.push_back(SampleKey(seed_, epoch_, index));
  out.weight = global > 0 ? double(size) / double(global) : 0.0;
  out.last_in_epoch = cursor_ + global >= dataset_size_;
  return out;
}

void ElasticSampler::Advance(int world) {
  cursor_ += std::min(GlobalBatch(world), dataset_size_ - cursor_);
  if (cursor_ >= dataset_size_) {
    cursor_ = 0;
    ++epoch_;
  }
}

void ElasticSampler::SetPosition(int64_t epoch, int64_t cursor) {
  epoch_ = epoch;
  cursor_ = std::clamp<int64_t>(cursor, 0, dataset_size_ - 1);
}

std::vector<ElasticSampler::Batch> ElasticSampler::SplitMicroBatches(const Batch& batch, int64_t max_local) {
  std::vector<Batch> out;
  max_local = std::max<int64_t>(1, max_local);
  for (size_t i = 0; i < batch.indices.size(); i += size_t(max_local)) {
    Batch micro;
    micro.epoch = batch.epoch;
    micro.global_size = batch.global_size;
    size_t end = std::min(batch.indices.size(), i + size_t(max_local));
    micro.indices.assign(batch.indices.begin() + i, batch.indices.begin() + end);
    if (batch.random_keys.size() == batch.indices.size()) {
      micro.random_keys.assign(batch.random_keys.begin() + i, batch.random_keys.begin() + end);
    }
    micro.weight = batch.global_size > 0 ? double(micro.indices.size()) / double(batch.global_size) : 0.0;
    out.push_back(std::move(micro));
  }
  return out;
}

}  // namespace aryl
