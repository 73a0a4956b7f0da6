#include "aryl/elastic_state.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <sstream>

#include "aryl/elastic_sampler.h"

namespace aryl {

struct ElasticState::Entries {
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> modules;
  std::vector<std::pair<std::string, torch::optim::Optimizer*>> optimizers;
  std::vector<std::pair<std::string, int64_t*>> ints;
  std::vector<std::pair<std::string, double*>> doubles;
  std::vector<std::pair<std::string, ElasticSampler*>> samplers;
};

ElasticState::ElasticState() : entries_(std::make_unique<Entries>()) {}
ElasticState::~ElasticState() = default;

void ElasticState::Track(std::shared_ptr<torch::nn::Module> module, std::string name) {
  if (name.empty()) name = "module" + std::to_string(entries_->modules.size());
  entries_->modules.emplace_back(std::move(name), std::move(module));
}
void ElasticState::Track(torch::optim::Optimizer& optimizer, std::string name) {
  if (name.empty()) name = "optimizer" + std::to_string(entries_->optimizers.size());
  entries_->optimizers.emplace_back(std::move(name), &optimizer);
}
void ElasticState::Track(std::string name, int64_t* value) { entries_->ints.emplace_back(std::move(name), value); }
void ElasticState::Track(std::string name, double* value) { entries_->doubles.emplace_back(std::move(name), value); }
void ElasticState::Track(ElasticSampler& sampler, std::string name) {
  if (name.empty()) name = "sampler" + std::to_string(entries_->samplers.size());
  entries_->samplers.emplace_back(std::move(name), &sampler);
}

void ElasticState::AdvanceSamplers(int world) {
  for (auto& [name, s] : entries_->samplers) s->Advance(world);
}

std::vector<std::shared_ptr<torch::nn::Module>> ElasticState::Modules() const {
  std::vector<std::shared_ptr<torch::nn::Module>> out;
  for (auto& [name, m] : entries_->modules) out.push_back(m);
  return out;
}

Result<std::string> ElasticState::Serialize() const {
  try {
    torch::serialize::OutputArchive archive;
    archive.write("aryl/step", torch::full({1}, step_, torch::TensorOptions().dtype(torch::kInt64)));
    for (auto& [name, m] : entries_->modules) {
      torch::serialize::OutputArchive sub;
      m->save(sub);
      archive.write("module/" + name, sub);
    }
    for (auto& [name, o] : entries_->optimizers) {
      torch::serialize::OutputArchive sub;
      o->save(sub);
      archive.write("optimizer/" + name, sub);
    }
    for (auto& [name, v] : entries_->ints) archive.write("int/" + name, torch::full({1}, *v, torch::TensorOptions().dtype(torch::kInt64)));
    for (auto& [name, v] : entries_->doubles) archive.write("double/" + name, torch::full({1}, *v, torch::TensorOptions().dtype(torch::kFloat64)));
    for (auto& [name, s] : entries_->samplers) {
      archive.write("sampler/" + name, torch::tensor({s->epoch(), s->cursor(), s->dataset_size()}, torch::kInt64));
    }
    std::ostringstream out;
    archive.save_to(out);
    return out.str();
  } catch (const std::exception& e) {
    return Status::Internal(std::string("ElasticState::Serialize: ") + e.what());
  }
}

Status ElasticState::Deserialize(std::string_view bytes) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    torch::Tensor t;
    archive.read("aryl/step", t);  // a fresh tensor per read: read() set_()s into a defined one
    int64_t step = t.item<int64_t>();
    for (auto& [name, m] : entries_->modules) {
      torch::serialize::InputArchive sub;
      archive.read("module/" + name, sub);
      m->load(sub);
    }
    for (auto& [name, o] : entries_->optimizers) {
      torch::serialize::InputArchive sub;
      archive.read("optimizer/" + name, sub);
      o->load(sub);
    }
    for (auto& [name, v] : entries_->ints) {
      t = torch::Tensor();
      archive.read("int/" + name, t);
      *v = t.item<int64_t>();
    }
    for (auto& [name, v] : entries_->doubles) {
      t = torch::Tensor();
      archive.read("double/" + name, t);
      *v = t.item<double>();
    }
    for (auto& [name, s] : entries_->samplers) {
      t = torch::Tensor();
      archive.read("sampler/" + name, t);
      if (t.numel() != 3 || t[2].item<int64_t>() != s->dataset_size()) {
        return Status::Corruption("ElasticState: sampler '" + name + "' was saved for dataset_size " +
                                  std::to_string(t.numel() == 3 ? t[2].item<int64_t>() : -1) + ", tracking " +
                                  std::to_string(s->dataset_size()));
      }
      s->SetPosition(t[0].item<int64_t>(), t[1].item<int64_t>());
    }
    step_ = step;
    return Status::Ok();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    return Status::Corruption("ElasticState::Deserialize: " + msg);
  }
}

}  // namespace aryl
