#include "aryl/elastic_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstring>
#include <mutex>
#include <sstream>

#include "aryl/elastic_sampler.h"

namespace aryl {

struct ElasticState::Entries {
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> modules;
  std::vector<std::pair<std::string, torch::optim::Optimizer*>> optimizers;
  std::vector<std::pair<std::string, int64_t*>> ints;
  std::vector<std::pair<std::string, double*>> doubles;
  std::vector<std::pair<std::string, ElasticSampler*>> samplers;
  std::vector<std::pair<std::string, StateSource*>> sources;
  bool random_state = false;
};

namespace {

torch::Tensor BytesTensor(std::string_view bytes) {
  auto t = torch::empty({int64_t(bytes.size())}, torch::kUInt8);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::string TensorBytes(const torch::Tensor& t) {
  auto c = t.contiguous().to(torch::kUInt8);
  return std::string(static_cast<const char*>(c.data_ptr()), size_t(c.numel()));
}

std::string RandomState() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return TensorBytes(gen.get_state());
}

void SetRandomState(std::string_view bytes) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(BytesTensor(bytes));
}

// Copies `loaded` into a source's tensor, checking that the shapes agree.
void CopyInto(const std::string& what, torch::Tensor& into, const torch::Tensor& loaded) {
  if (into.sizes() != loaded.sizes()) {
    throw std::runtime_error(what + ": saved shape " + c10::str(loaded.sizes()) + ", tracking " + c10::str(into.sizes()));
  }
  torch::NoGradGuard no_grad;
  into.copy_(loaded);
}

}  // namespace

ElasticState::ElasticState() : entries_(std::make_unique<Entries>()) {}
ElasticState::~ElasticState() = default;

void ElasticState::Track(std::shared_ptr<torch::nn::Module> module, std::string name) {
  if (name.empty()) name = "module" + std::to_string(entries_->modules.size());
  entries_->modules.emplace_back(std::move(name), std::move(module));
}
void ElasticState::Track(torch::nn::Module& module, std::string name) {
  // Not owned: the program keeps the module alive (see the header).
  Track(std::shared_ptr<torch::nn::Module>(&module, [](torch::nn::Module*) {}), std::move(name));
}
void ElasticState::Track(StateSource& source, std::string name) {
  if (name.empty()) name = "source" + std::to_string(entries_->sources.size());
  entries_->sources.emplace_back(std::move(name), &source);
}
void ElasticState::TrackRandomState() { entries_->random_state = true; }
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
    for (auto& [name, src] : entries_->sources) {
      archive.write("source/" + name + "/meta", BytesTensor(src->Metadata()));
      auto tensors = src->Tensors();
      for (size_t i = 0; i < tensors.size(); ++i) {
        archive.write("source/" + name + "/" + std::to_string(i), tensors[i].detach());
      }
    }
    if (entries_->random_state) archive.write("aryl/random_state", BytesTensor(RandomState()));
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
    for (auto& [name, src] : entries_->sources) {
      t = torch::Tensor();
      archive.read("source/" + name + "/meta", t);
      ARYL_RETURN_IF_ERROR(src->Restore(TensorBytes(t)).WithContext("ElasticState: source '" + name + "'"));
      auto tensors = src->Tensors();
      for (size_t i = 0; i < tensors.size(); ++i) {
        t = torch::Tensor();
        archive.read("source/" + name + "/" + std::to_string(i), t);
        CopyInto("source '" + name + "' tensor " + std::to_string(i), tensors[i], t);
      }
    }
    if (entries_->random_state) {
      t = torch::Tensor();
      archive.read("aryl/random_state", t);
      SetRandomState(TensorBytes(t));
    }
    step_ = step;
    return Status::Ok();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    return Status::Corruption("ElasticState::Deserialize: " + msg);
  }
}

namespace {

// A flat little-endian record of int64/double/string fields.
class Writer {
 public:
  void I(int64_t v) { Raw(&v, 8); }
  void D(double v) { Raw(&v, 8); }
  void S(const std::string& v) {
    I(int64_t(v.size()));
    out_.append(v);
  }
  std::string Take() { return std::move(out_); }

 private:
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  int64_t I() {
    int64_t v = 0;
    Raw(&v, 8);
    return v;
  }
  double D() {
    double v = 0;
    Raw(&v, 8);
    return v;
  }
  std::string S() {
    int64_t n = I();
    if (n < 0 || size_t(n) > in_.size() - pos_) throw std::runtime_error("metadata: string length out of range");
    std::string v(in_.substr(pos_, size_t(n)));
    pos_ += size_t(n);
    return v;
  }

 private:
  void Raw(void* p, size_t n) {
    if (in_.size() - pos_ < n) throw std::runtime_error("metadata: truncated");
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  std::string_view in_;
  size_t pos_ = 0;
};

enum class OptKind : int64_t { kSgd = 1, kAdam = 2, kAdamW = 3, kArchive = 4 };

OptKind KindOf(torch::optim::Optimizer* o) {
  if (dynamic_cast<torch::optim::SGD*>(o)) return OptKind::kSgd;
  if (dynamic_cast<torch::optim::AdamW*>(o)) return OptKind::kAdamW;
  if (dynamic_cast<torch::optim::Adam*>(o)) return OptKind::kAdam;
  return OptKind::kArchive;
}

std::string KeyOf(const torch::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

template <typename State>
State* StateOf(torch::optim::Optimizer* o, const torch::Tensor& p) {
  auto it = o->state().find(KeyOf(p));
  return it == o->state().end() ? nullptr : static_cast<State*>(it->second.get());
}

}  // namespace

Result<std::string> ElasticState::SerializeMetadata() const {
  try {
    Writer w;
    w.I(step_);
    for (auto& [name, v] : entries_->ints) w.I(*v);
    for (auto& [name, v] : entries_->doubles) w.D(*v);
    for (auto& [name, s] : entries_->samplers) {
      w.I(s->epoch());
      w.I(s->cursor());
    }
    for (auto& [name, o] : entries_->optimizers) {
      OptKind kind = KindOf(o);
      w.I(int64_t(kind));
      if (kind == OptKind::kArchive) {
        torch::serialize::OutputArchive archive;
        o->save(archive);
        std::ostringstream out;
        archive.save_to(out);
        w.S(out.str());
        continue;
      }
      for (auto& group : o->param_groups()) {
        w.D(group.options().get_lr());
        for (auto& p : group.params()) {
          if (kind == OptKind::kSgd) {
            auto* st = StateOf<torch::optim::SGDParamState>(o, p);
            w.I(st && st->momentum_buffer().defined() ? 1 : 0);
          } else if (kind == OptKind::kAdam) {
            auto* st = StateOf<torch::optim::AdamParamState>(o, p);
            w.I(st ? 1 : 0);
            if (st) {
              w.I(st->step());
              w.I(st->max_exp_avg_sq().defined() ? 1 : 0);
            }
          } else {
            auto* st = StateOf<torch::optim::AdamWParamState>(o, p);
            w.I(st ? 1 : 0);
            if (st) {
              w.I(st->step());
              w.I(st->max_exp_avg_sq().defined() ? 1 : 0);
            }
          }
        }
      }
    }
    for (auto& [name, src] : entries_->sources) w.S(src->Metadata());
    if (entries_->random_state) w.S(RandomState());
    return w.Take();
  } catch (const std::exception& e) {
    return Status::Internal(std::string("ElasticState::SerializeMetadata: ") + e.what());
  }
}

Status ElasticState::DeserializeMetadata(std::string_view bytes) {
  try {
    Reader r(bytes);
    int64_t step = r.I();
    for (auto& [name, v] : entries_->ints) *v = r.I();
    for (auto& [name, v] : entries_->doubles) *v = r.D();
    for (auto& [name, s] : entries_->samplers) {
      int64_t epoch = r.I();
      s->SetPosition(epoch, r.I());
    }
    for (auto& [name, o] : entries_->optimizers) {
      OptKind kind = OptKind(r.I());
      if (kind != KindOf(o)) return Status::Corruption("optimizer '" + name + "': kind differs from the sender's");
      if (kind == OptKind::kArchive) {
        std::string blob = r.S();
        torch::serialize::InputArchive archive;
        archive.load_from(blob.data(), blob.size());
        o->load(archive);
        continue;
      }
      for (auto& group : o->param_groups()) {
        group.options().set_lr(r.D());
        for (auto& p : group.params()) {
          const std::string key = KeyOf(p);
          bool has = r.I() != 0;
          if (!has) {
            o->state().erase(key);
            continue;
          }
          torch::NoGradGuard no_grad;
          if (kind == OptKind::kSgd) {
            auto st = std::make_unique<torch::optim::SGDParamState>();
            st->momentum_buffer(torch::zeros_like(p));
            o->state()[key] = std::move(st);
          } else if (kind == OptKind::kAdam) {
            auto st = std::make_unique<torch::optim::AdamParamState>();
            st->step(r.I());
            st->exp_avg(torch::zeros_like(p));
            st->exp_avg_sq(torch::zeros_like(p));
            if (r.I()) st->max_exp_avg_sq(torch::zeros_like(p));
            o->state()[key] = std::move(st);
          } else {
            auto st = std::make_unique<torch::optim::AdamWParamState>();
            st->step(r.I());
            st->exp_avg(torch::zeros_like(p));
            st->exp_avg_sq(torch::zeros_like(p));
            if (r.I()) st->max_exp_avg_sq(torch::zeros_like(p));
            o->state()[key] = std::move(st);
          }
        }
      }
    }
    for (auto& [name, src] : entries_->sources) {
      ARYL_RETURN_IF_ERROR(src->Restore(r.S()).WithContext("ElasticState: source '" + name + "'"));
    }
    if (entries_->random_state) SetRandomState(r.S());
    step_ = step;
    return Status::Ok();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    return Status::Corruption("ElasticState::DeserializeMetadata: " + msg.substr(0, msg.find('\n')));
  }
}

std::vector<at::Tensor> ElasticState::TransferTensors() const {
  std::vector<at::Tensor> out;
  for (auto& [name, m] : entries_->modules) {
    for (auto& p : m->parameters()) out.push_back(p.detach());
    for (auto& b : m->buffers()) out.push_back(b.detach());
  }
  for (auto& [name, o] : entries_->optimizers) {
    OptKind kind = KindOf(o);
    if (kind == OptKind::kArchive) continue;
    for (auto& group : o->param_groups()) {
      for (auto& p : group.params()) {
        auto it = o->state().find(KeyOf(p));
        if (it == o->state().end()) continue;
        if (kind == OptKind::kSgd) {
          auto* st = static_cast<torch::optim::SGDParamState*>(it->second.get());
          if (st->momentum_buffer().defined()) out.push_back(st->momentum_buffer());
        } else if (kind == OptKind::kAdam) {
          auto* st = static_cast<torch::optim::AdamParamState*>(it->second.get());
          out.push_back(st->exp_avg());
          out.push_back(st->exp_avg_sq());
          if (st->max_exp_avg_sq().defined()) out.push_back(st->max_exp_avg_sq());
        } else {
          auto* st = static_cast<torch::optim::AdamWParamState*>(it->second.get());
          out.push_back(st->exp_avg());
          out.push_back(st->exp_avg_sq());
          if (st->max_exp_avg_sq().defined()) out.push_back(st->max_exp_avg_sq());
        }
      }
    }
  }
  for (auto& [name, src] : entries_->sources) {
    for (auto& t : src->Tensors()) out.push_back(t.detach());
  }
  return out;
}

}  // namespace aryl
