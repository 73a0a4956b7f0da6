// In-memory worker processes of a driven agent (memory_workers.h).
#include "memory_workers.h"

#include <signal.h>

#include <algorithm>
#include <string>

namespace aryl::daemon::testing {

namespace p = aryl::protocol;

Result<agent::StartedWorker> MemoryWorkers::Launch(const p::StartWorkers& m, const p::WorkerPlacement& wp) {
  agent::StartedWorker w;
  w.pid = next_pid_++;
  w.identity = "worker-" + std::to_string(m.job) + "-" + std::to_string(wp.worker);
  alive_[w.pid] = Process{m.job, wp.worker};
  return w;
}

void MemoryWorkers::RequestStop(pid_t pid, double grace) {
  auto it = alive_.find(pid);
  if (it == alive_.end()) return;
  const double at = clock_.NowSeconds() + std::max(0.0, grace);
  if (it->second.kill_at >= 0) {
    it->second.kill_at = std::min(it->second.kill_at, at);  // SIGTERM was sent once
    return;
  }
  it->second.kill_at = at;
  const Process p = it->second;  // the worker may end inside on_term_
  on_term_(p.job, p.worker, p.checkpoint_first, grace);
}

void MemoryWorkers::Kill(pid_t pid) {
  auto it = alive_.find(pid);
  if (it == alive_.end()) return;
  agent::ExitInfo ex;
  ex.exit_code = 128 + SIGKILL;
  ex.signal = SIGKILL;
  End(it->second.worker, ex);
}

void MemoryWorkers::Push(const agent::LocalWorker& w, const p::Message& m) {
  auto it = alive_.find(w.pid);
  if (it == alive_.end()) return;
  if (auto* req = std::get_if<p::WorkerCheckpointRequest>(&m); req && req->stop_after)
    it->second.checkpoint_first = true;
}

agent::WorkerEnding MemoryWorkers::TakeEnding(const agent::LocalWorker& w) {
  auto it = endings_.find(w.pid);
  if (it == endings_.end()) return {};
  agent::WorkerEnding e = std::move(it->second);
  endings_.erase(it);
  return e;
}

std::map<pid_t, MemoryWorkers::Process>::iterator MemoryWorkers::Find(p::WorkerId worker) {
  return std::find_if(alive_.begin(), alive_.end(), [&](const auto& kv) { return kv.second.worker == worker; });
}

bool MemoryWorkers::End(p::WorkerId worker, agent::ExitInfo ex, agent::WorkerEnding ending) {
  auto it = Find(worker);
  if (it == alive_.end()) return false;
  ex.pid = it->first;
  endings_[it->first] = std::move(ending);
  ended_.push_back(ex);
  alive_.erase(it);
  return true;
}

void MemoryWorkers::Escalate() {
  std::vector<p::WorkerId> due;
  for (const auto& [pid, w] : alive_)
    if (w.kill_at >= 0 && clock_.NowSeconds() + 1e-9 >= w.kill_at) due.push_back(w.worker);
  for (p::WorkerId worker : due) {
    agent::ExitInfo ex;
    ex.exit_code = 128 + SIGKILL;
    ex.signal = SIGKILL;
    ex.killed_by_us = true;
    End(worker, ex);
  }
}

std::vector<agent::ExitInfo> MemoryWorkers::Poll() {
  std::vector<agent::ExitInfo> out;
  out.swap(ended_);
  return out;
}

std::optional<p::JobId> MemoryWorkers::JobOf(p::WorkerId worker) const {
  for (const auto& [pid, w] : alive_)
    if (w.worker == worker) return w.job;
  return std::nullopt;
}

void MemoryWorkers::DieAll() {
  alive_.clear();
  ended_.clear();
  endings_.clear();
}

}  // namespace aryl::daemon::testing
