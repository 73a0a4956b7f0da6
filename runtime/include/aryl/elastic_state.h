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
