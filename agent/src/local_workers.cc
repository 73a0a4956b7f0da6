// The worker processes this agent runs (local_workers.h).
#include "local_workers.h"

#include <algorithm>

namespace aryl::agent {

namespace p = aryl::protocol;

bool LocalWorkers::Runs(p::JobId job, p::WorkerId worker) const {
  bool dup = false;
  for (const auto& [pid, w] : by_pid_) dup |= w.job == job && w.id == worker;
  return dup;
}

bool LocalWorkers::Hosts(p::JobId job) const {
  for (const auto& [pid, w] : by_pid_)
    if (w.job == job) return true;
  return false;
}

std::set<p::JobId> LocalWorkers::Jobs() const {
  std::set<p::JobId> jobs;
  for (const auto& [pid, w] : by_pid_) jobs.insert(w.job);
  return jobs;
}

std::vector<const LocalWorker*> LocalWorkers::Of(p::JobId job, const std::set<p::WorkerId>& only) const {
  std::vector<const LocalWorker*> out;
  for (const auto& [pid, w] : by_pid_) {
    if (w.job != job || (!only.empty() && !only.count(w.id))) continue;
    out.push_back(&w);
  }
  return out;
}

std::vector<LocalWorker*> LocalWorkers::Of(p::JobId job, const std::set<p::WorkerId>& only) {
  std::vector<LocalWorker*> out;
  for (auto& [pid, w] : by_pid_)
    if (w.job == job && (only.empty() || only.count(w.id))) out.push_back(&w);
  return out;
}

std::vector<p::RunningWorker> LocalWorkers::Running() const {
  std::vector<p::RunningWorker> out;
  for (const auto& [pid, w] : by_pid_) out.push_back({w.job, w.id, w.generation, w.rank, w.slot, pid});
  return out;
}

std::int64_t LocalWorkers::FreeSlots(std::int64_t slots) const {
  std::set<std::int64_t> used;
  for (const auto& [pid, w] : by_pid_) used.insert(w.slot);
  return std::max<std::int64_t>(0, slots - static_cast<std::int64_t>(used.size()));
}

void LocalWorkers::Apply(const p::NewGeneration& m, double leave_deadline) {
  std::set<p::WorkerId> leaving(m.leaving.begin(), m.leaving.end());
  for (auto& [pid, w] : by_pid_) {
    if (w.job != m.job) continue;
    if (leaving.count(w.id)) {
      w.life.Leave(leave_deadline);
      continue;
    }
    auto it = std::find(m.members.begin(), m.members.end(), w.id);
    if (it != m.members.end()) {
      w.generation = m.generation;
      w.rank = it - m.members.begin();
      w.world = static_cast<int>(m.members.size());
    }
  }
}

std::vector<pid_t> LocalWorkers::OverdueLeavers(double now) {
  std::vector<pid_t> out;
  for (auto& [pid, w] : by_pid_)
    if (w.life.Overdue(now)) out.push_back(pid);
  return out;
}

}  // namespace aryl::agent
