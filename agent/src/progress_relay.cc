// Job progress relayed from rank 0 to the scheduler (progress_relay.h).
#include "progress_relay.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

namespace aryl::agent {

namespace p = aryl::protocol;

void ProgressRelay::OnWorkerProgress(const p::WorkerProgress& pr) {
  auto& cur = worker_progress_[pr.job];
  if (!cur.fresh || pr.step >= cur.msg.step) {
    // A step summary not yet relayed survives a newer report without one.
    std::optional<p::StepStats> unsent = cur.fresh && !pr.stats ? cur.msg.stats : std::nullopt;
    cur = {pr, true};
    if (unsent) cur.msg.stats = unsent;
  }
}

std::vector<p::JobProgress> ProgressRelay::RuntimeReports(const LocalWorkers& workers,
                                                          const std::function<bool(const std::string&)>& said_hello) {
  std::vector<std::pair<p::JobId, std::int64_t>> seen;
  for (const auto& [pid, w] : workers)
    if (!runtime_reported_.count(w.job) && said_hello(w.identity)) seen.push_back({w.job, w.generation});
  std::vector<p::JobProgress> out;
  for (const auto& [job, generation] : seen) {
    if (!runtime_reported_.insert(job).second) continue;
    p::JobProgress m;
    m.job = job;
    m.generation = generation;
    m.runtime = true;
    out.push_back(std::move(m));
  }
  std::erase_if(runtime_reported_, [&](p::JobId job) { return !workers.Hosts(job); });
  return out;
}

std::vector<p::JobProgress> ProgressRelay::Tick(double now, LocalWorkers& workers, bool registered) {
  std::vector<p::JobProgress> out;
  if (now - last_tick_ < 1.0) return out;
  last_tick_ = now;
  for (auto& [pid, w] : workers) {
    if (w.rank != 0) continue;
    auto line = w.progress.Read(w.stdout_path, w.generation, w.world);
    if (!line) continue;
    if (!std::isnan(line->loss)) stdout_loss_[w.job] = line->loss;
    if (!registered || worker_progress_.count(w.job)) continue;
    p::JobProgress m;
    m.job = w.job;
    m.generation = w.generation;
    m.step = line->step;
    m.loss = line->loss;
    m.steps_per_second = line->rate;
    // Step times from the printed step_s (stdout_progress.h); a program
    // that links the runtime sends its own (WorkerProgress.stats).
    if (!runtime_reported_.count(w.job)) m.stats = w.progress.TakeSummary();
    out.push_back(std::move(m));
  }
  for (auto it = worker_progress_.begin(); it != worker_progress_.end();) {
    const p::WorkerProgress& wp = it->second.msg;
    if (!workers.Hosts(wp.job)) {
      stdout_loss_.erase(wp.job);
      it = worker_progress_.erase(it);
      continue;
    }
    if (registered && it->second.fresh) {
      it->second.fresh = false;
      p::JobProgress m;
      m.job = wp.job;
      m.generation = 0;  // the scheduler's generation; the message has the store's
      for (const auto& [pid, w] : workers)
        if (w.job == wp.job) m.generation = std::max(m.generation, w.generation);
      m.step = wp.step;
      m.loss = std::isfinite(wp.loss) ? wp.loss : (stdout_loss_.count(wp.job) ? stdout_loss_[wp.job] : NAN);
      m.steps_per_second = std::isfinite(wp.steps_per_second) ? std::max(0.0, wp.steps_per_second) : 0;
      m.remaining_work = wp.remaining_work;
      m.stats = std::move(it->second.msg.stats);  // relayed once
      it->second.msg.stats.reset();
      out.push_back(std::move(m));
    }
    ++it;
  }
  return out;
}

}  // namespace aryl::agent
