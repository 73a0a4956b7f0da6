// ElasticState: everything that moves to a joining worker and into a checkpoint.
//
// Tracks modules (parameters and buffers), optimizers (the ones libtorch ships:
// SGD, Adam, AdamW, RMSprop, Adagrad, with their per-parameter state), user
// scalars, ElasticSamplers (epoch and cursor), the CPU random generator
// (TrackRandomState: dropout, augmentation), state the program keeps in its
// own form (StateSource: the Python API's modules and optimizers) and the
// step counter the runtime commits. Serialize()/Deserialize() use libtorch's
// archive format, so a state written at one world size loads at any other.
//
// Tracked objects are not owned (modules passed as shared_ptr or holders are
// shared) and must outlive the state. Register the same objects in the same
// order on every worker.
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

// State that the program keeps in its own representation: metadata (shapes,
// hyperparameters, counters) plus tensors that the runtime moves in place.
// The Python API implements it for torch.nn.Module and torch.optim.Optimizer.
class StateSource {
 public:
  virtual ~StateSource() = default;
  // Everything but the tensors (small); enough for Restore() to recreate them.
  virtual std::string Metadata() const = 0;
  // Makes Tensors() return tensors of the sender's shapes and types (creating
  // missing optimizer state, checking that parameters match).
  virtual Status Restore(std::string_view metadata) = 0;
  // The tensors, in the same order on every worker after Restore(); written
  // in place when state arrives.
  virtual std::vector<at::Tensor> Tensors() const = 0;
};

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
  // A module the program owns (a plain struct deriving torch::nn::Module).
  void Track(torch::nn::Module& module, std::string name = {});
  void Track(torch::optim::Optimizer& optimizer, std::string name = {});
  void Track(StateSource& source, std::string name = {});
  // The CPU default generator (torch::manual_seed's): joiners receive the
  // source's generator state and checkpoints restore it, so random ops after a
  // resize or a restart continue the sequence the stayers were drawing from.
  void TrackRandomState();
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
