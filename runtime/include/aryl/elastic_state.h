// ElasticState: everything that moves to a joining worker and into a checkpoint.
//
// Tracks modules (parameters and buffers), optimizers (the ones libtorch ships:
// SGD, Adam, AdamW, RMSprop, Adagrad, with their per-parameter state), user
// scalars, ElasticSamplers (epoch and cursor) and the step counter the runtime
// commits. Serialize()/Deserialize() use libtorch's archive format, so a state
// written at one world size loads at any other.
//
// Tracked objects are not owned (except modules, shared) and must outlive the
// state. Register the same objects in the same order on every worker.
// Thread safety: not thread-safe; owned by the training loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/result.h"
#include "aryl/status.h"

namespace at {
class Tensor;
}
namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace aryl {

class ElasticSampler;

class ElasticState {
 public:
  ElasticState();
  ~ElasticState();
  ElasticState(const ElasticState&) = delete;
  ElasticState& operator=(const ElasticState&) = delete;

  void Track(std::shared_ptr<torch::nn::Module> module, std::string name = {});
  // ModuleHolder (e.g. torch::nn::Linear or a TORCH_MODULE type).
  template <typename Holder>
  auto Track(Holder& holder, std::string name = {}) -> decltype(holder.ptr(), void()) {
    Track(std::shared_ptr<torch::nn::Module>(holder.ptr()), std::move(name));
  }
  void Track(torch::optim::Optimizer& optimizer, std::string name = {});
  void Track(std::string name, int64_t* value);
  void Track(std::string name, double* value);
  void Track(ElasticSampler& sampler, std::string name = {});

  // Steps committed so far (the runtime advances it).
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

  Result<std::string> Serialize() const;
  // Corruption when the bytes do not parse or do not match what is tracked.
  Status Deserialize(std::string_view bytes);

  // Fast transfer to joiners (no archive): a small metadata blob (step,
  // scalars, samplers, learning rates, which optimizer state exists and its
  // counters) plus the tensors themselves, moved in place by the
  // communicator. SGD, Adam and AdamW state moves as tensors; other optimizers
  // travel inside the metadata as libtorch archives.
  // Receivers call DeserializeMetadata() first (it creates missing optimizer
  // state with the right shapes), then TransferTensors() returns the tensors
  // to receive into, in the same order as on the sender.
  Result<std::string> SerializeMetadata() const;
  Status DeserializeMetadata(std::string_view bytes);
  std::vector<at::Tensor> TransferTensors() const;

  // Moves every tracked sampler past the step just committed at `world`.
  void AdvanceSamplers(int world);
  // The modules (for gradient all-reduce).
  std::vector<std::shared_ptr<torch::nn::Module>> Modules() const;

 private:
  struct Entries;
  std::unique_ptr<Entries> entries_;
  int64_t step_ = 0;
};

}  // namespace aryl
