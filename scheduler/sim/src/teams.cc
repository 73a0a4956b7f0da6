#include "aryl/sim/teams.h"

#include <algorithm>

#include "aryl/sim/random.h"

namespace aryl::sim {

Status AssignQueues(std::vector<sched::JobSpec>& jobs, const sched::QueueConfig& queues,
                    const std::string& quota_type, int training_gpus) {
  double total = 0;
  for (const auto& q : queues.queues) total += q.jobs_share;
  if (!(total > 0))
    return Status::InvalidArgument("queues: every jobs_share is 0: no queue gets trace jobs");
  for (sched::JobSpec& job : jobs) {
    // Stable: the trace id alone decides (not --seed, not the job's position).
    const double u = ToUnit(HashName(job.name, 0x7465616d73ULL)) * total;
    size_t q = 0;
    double acc = 0;
    for (; q + 1 < queues.queues.size(); ++q) {
      acc += queues.queues[q].jobs_share;
      if (u < acc) break;
    }
    while (queues.queues[q].jobs_share == 0 && q > 0) --q;  // rounding at the top end
    const auto& spec = queues.queues[q];
    job.queue = spec.name;
    const double v = ToUnit(HashName(job.name, 0x7072696fULL));
    int p = 0;
    double pacc = 0;
    for (; p + 1 < sched::kPriorityClasses; ++p) {
      pacc += spec.priority_mix[p];
      if (v < pacc) break;
    }
    while (spec.priority_mix[p] == 0 && p > 0) --p;
    job.priority = p;
    // A job its queue could never hold on training servers would wait
    // forever under a policy that does not loan: refuse the file.
    const int reach = sched::QueueReach(queues, static_cast<int>(q), quota_type, training_gpus);
    if (job.min_workers > reach)
      return Status::InvalidArgument(
          "queue '" + spec.name + "': job '" + job.name + "' needs " +
          std::to_string(job.min_workers) +
          " GPUs, more than the queue can ever hold on training servers (" + std::to_string(reach) +
          ": its quota_gpus " + std::to_string(spec.Nominal(quota_type)) +
          " plus what its borrow_limit and its cohort's lending let it borrow)");
  }
  return Status::Ok();
}

QueueMeter::QueueMeter(const sched::QueueConfig& queues, const std::string& quota_type,
                       double bound, double start)
    : queues_(queues), bound_(bound), now_(start) {
  const size_t n = queues.queues.size();
  for (const auto& q : queues.queues) quota_.push_back(q.Nominal(quota_type));
  training_.assign(n, 0);
  loaned_.assign(n, 0);
  waiting_.assign(n, 0);
  stretch_since_.assign(n, -1);
  held_s_.assign(n, 0);
  borrowed_s_.assign(n, 0);
  loaned_s_.assign(n, 0);
  owed_s_.assign(n, 0);
  kept_s_.assign(n, 0);
  missed_fitting_s_.assign(n, 0);
  sizes_.assign(n, {});
}

void QueueMeter::Advance(double t) {
  if (t <= now_) return;
  const double dt = t - now_;
  for (size_t q = 0; q < quota_.size(); ++q) {
    const int held = training_[q] + loaned_[q];
    held_s_[q] += held * dt;
    loaned_s_[q] += loaned_[q] * dt;
    borrowed_s_[q] += std::max(0, training_[q] - quota_[q]) * dt;
    if (held + waiting_[q] >= quota_[q]) {
      if (stretch_since_[q] < 0) stretch_since_[q] = now_;
      const double from = std::max(now_, stretch_since_[q] + bound_);
      if (t > from) {
        owed_s_[q] += t - from;
        if (held >= quota_[q]) {
          kept_s_[q] += t - from;
        } else if (!sizes_[q].empty() && *sizes_[q].begin() <= quota_[q] - training_[q]) {
          missed_fitting_s_[q] += t - from;
        }
      }
    } else {
      stretch_since_[q] = -1;
    }
  }
  now_ = t;
}

std::vector<QueueMetrics> QueueMeter::Finish(const std::vector<JobOutcome>& jobs,
                                             const std::vector<int>& queue_of) const {
  std::vector<QueueMetrics> out;
  for (size_t q = 0; q < quota_.size(); ++q) {
    std::vector<JobOutcome> mine;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (queue_of[i] == static_cast<int>(q)) mine.push_back(jobs[i]);
    }
    RunMetrics m;
    SummarizeJobs(mine, m);
    QueueMetrics r;
    r.queue = queues_.queues[q].name;
    r.quota_gpus = quota_[q];
    r.weight = queues_.queues[q].weight;
    r.jobs = static_cast<std::int64_t>(mine.size());
    r.gpu_hours = held_s_[q] / 3600;
    r.borrowed_gpu_hours = borrowed_s_[q] / 3600;
    r.loaned_gpu_hours = loaned_s_[q] / 3600;
    r.avg_queue_s = m.avg_queue_s;
    r.avg_jct_s = m.avg_jct_s;
    r.quota_held_fraction = owed_s_[q] > 0 ? kept_s_[q] / owed_s_[q] : 1;
    r.quota_missed_s = owed_s_[q] - kept_s_[q];
    r.quota_missed_fitting_s = missed_fitting_s_[q];
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace aryl::sim
