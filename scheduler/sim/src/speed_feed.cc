#include "speed_feed.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "aryl/sim/random.h"

namespace aryl::sim {

const char* SpeedKnowledgeName(SpeedKnowledge k) {
  switch (k) {
    case SpeedKnowledge::kOracle:
      return "oracle";
    case SpeedKnowledge::kLearned:
      return "learned";
    case SpeedKnowledge::kLinear:
      return "linear";
  }
  return "?";
}

namespace internal {

std::shared_ptr<const sched::ThroughputCatalog> LinearCatalog(
    const sched::ThroughputCatalog& truth, const std::vector<sched::ServerSpec>& servers) {
  std::set<std::string> types;
  int gpus = 0;
  for (const auto& s : servers) {
    types.insert(s.gpu_type);
    gpus += s.gpus;
  }
  auto out = std::make_shared<sched::ThroughputCatalog>();
  for (const std::string& model : truth.Models()) {
    for (const std::string& type : types) {
      sched::ThroughputCatalog::Table t;
      for (int w = 1; w <= gpus; ++w) {
        t.sizes.push_back(w);
        t.values.push_back(truth.Throughput(model, type, w) > 0 ? w : 0.0);
      }
      // A type the model may not use at any size keeps no table (AddTable refuses it).
      if (std::any_of(t.values.begin(), t.values.end(), [](double v) { return v > 0; })) {
        (void)out->AddTable(model, type, std::move(t));
      }
    }
  }
  return out;
}

SpeedFeed::SpeedFeed(const SimConfig& config, std::shared_ptr<sched::SpeedModels> models)
    : config_(config), models_(std::move(models)) {}

Status SpeedFeed::Submitted(const sched::JobSpec& spec) {
  segment_[spec.id] = 0;
  return models_ ? models_->AddJob(spec.id, spec.model) : Status::Ok();
}

void SpeedFeed::Finished(sched::JobId job) {
  segment_.erase(job);
  if (models_) (void)models_->RemoveJob(job);
}

void SpeedFeed::Placed(sched::JobId job, double measure_at) {
  const std::uint32_t seg = ++segment_[job];
  pending_.push({measure_at, job, seg});
}

void SpeedFeed::Stopped(sched::JobId job) { ++segment_[job]; }

std::vector<sched::JobId> SpeedFeed::Due(double t) {
  std::vector<sched::JobId> out;
  while (!pending_.empty() && pending_.top().time <= t) {
    const Pending p = pending_.top();
    pending_.pop();
    auto it = segment_.find(p.job);
    if (it != segment_.end() && it->second == p.segment) out.push_back(p.job);
  }
  return out;
}

Result<bool> SpeedFeed::Measure(sched::JobId job, const std::string& gpu_type, int workers,
                                int nodes, double true_step) {
  Rng rng(Mix64(config_.scheduler.seed ^
                Mix64(static_cast<std::uint64_t>(job) * 0x100000001b3ULL + segment_[job])));
  sched::StepSample s;
  s.gpu_type = gpu_type;
  s.workers = workers;
  s.nodes = nodes;
  s.local_batch = 1.0 / workers;  // a fixed global batch, in units of one
  s.step_time = true_step * std::exp(config_.speed_noise * rng.Normal());
  s.spread = config_.speed_noise * s.step_time;
  s.count = 1;
  return models_->AddSample(job, s);
}

}  // namespace internal
}  // namespace aryl::sim
