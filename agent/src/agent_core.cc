// What the agent decides about its workers (agent_core.h).
#include "agent_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace aryl::agent {

namespace p = aryl::protocol;

AgentCore::AgentCore(p::AgentRegister self, double leave_timeout, const Clock& clock, SchedulerLink& scheduler,
                     WorkerHost& host)
    : self_(std::move(self)), leave_timeout_(leave_timeout), clock_(clock), scheduler_(scheduler), host_(host) {
  self_.workers.clear();
  self_.exited.clear();
}

bool AgentCore::OnCommand(const p::Message& msg) {
  if (auto* m = std::get_if<p::StartWorkers>(&msg)) {
    OnStart(*m);
  } else if (auto* g = std::get_if<p::NewGeneration>(&msg)) {
    OnNewGeneration(*g);
  } else if (auto* s = std::get_if<p::StopWorkers>(&msg)) {
    OnStop(*s);
  } else if (auto* a = std::get_if<p::WorkerExitAck>(&msg)) {
    exits_.Acked(a->job, a->worker);
  } else if (auto* c = std::get_if<p::WorkerCheckpointRequest>(&msg)) {
    spdlog::info("job {}: checkpoint requested ({})", c->job, c->reason);
    PushToWorkers(c->job, "", *c);
  } else {
    return false;
  }
  return true;
}

bool AgentCore::Stale(p::JobId job, std::int64_t generation, std::string_view what) {
  std::int64_t newest = 0;
  if (!fence_.Stale(job, generation, &newest)) return false;
  spdlog::warn("job {}: {} for generation {} refused: generation {} was seen here (stale)", job, what, generation,
               newest);
  return true;
}

void AgentCore::OnStart(const p::StartWorkers& m) {
  Status v = m.Validate();
  if (!v.ok()) {
    spdlog::error("start_workers for job {}: {}", m.job, v.ToString());
    return;
  }
  SchedulerLease& lease = scheduler_.lease();
  if (!lease.held() || lease.Expired(clock_.NowSeconds())) {
    // Only a message queued from before the lease ran out can get here: the
    // scheduler sends starts after a registration, which grants a lease.
    spdlog::warn("job {}: start_workers refused: this agent holds no lease from the scheduler", m.job);
    return;
  }
  if (Stale(m.job, m.generation, "start_workers")) return;
  host_.Starting(m);
  for (const auto& wp : m.workers) {
    if (workers_.Runs(m.job, wp.worker)) continue;
    if (!started_.insert({m.job, wp.worker}).second) {
      spdlog::warn("job {} worker {}: start_workers refused: this worker already ran here (a late or repeated copy)",
                   m.job, wp.worker);
      continue;
    }
    if (started_.size() > kStartedKept) started_.erase(started_.begin());
    auto started = host_.Launch(m, wp);
    if (!started.ok()) {
      // The job's failure, not the agent's: its user hears of it through the
      // scheduler (exit 127 and the reason), so an info line here.
      spdlog::info("job {} worker {} could not start: {}", m.job, wp.worker, started.status().ToString());
      ReportExit(LaunchFailure(self_.agent_id, m.job, wp.worker, m.generation, started.status().message()));
      continue;
    }
    LocalWorker w;
    w.stdout_path = started->stdout_path;
    w.job = m.job;
    w.id = wp.worker;
    w.store_key = started->store_key;
    w.identity = started->identity;
    w.generation = m.generation;
    w.rank = wp.rank;
    w.world = static_cast<int>(m.members.size());
    w.slot = wp.local_slot;
    w.pid = started->pid;
    w.owner = started->owner;
    workers_.Add(w);
    spdlog::info("job {} worker {} (rank {}, slot {}) started: pid {}", m.job, wp.worker, wp.rank, wp.local_slot,
                 started->pid);
  }
}

bool AgentCore::OnNewGeneration(const p::NewGeneration& m) {
  if (Stale(m.job, m.generation, "new_generation")) return false;
  workers_.Apply(m, clock_.NowSeconds() + leave_timeout_);
  spdlog::info("job {}: generation {} with {} members, {} leaving here", m.job, m.generation, m.members.size(),
               m.leaving.size());
  return true;
}

void AgentCore::OnStop(const p::StopWorkers& m) {
  std::set<p::WorkerId> which(m.workers.begin(), m.workers.end());
  if (m.checkpoint_first) {
    // A preemption notice: the runtime checkpoints and stops at its next
    // step boundary; SIGTERM (which it treats the same) follows as the backstop.
    p::WorkerCheckpointRequest req;
    req.job = m.job;
    req.reason = m.reason;
    req.deadline_seconds = m.grace_seconds;
    req.stop_after = true;
    PushToWorkers(m.job, "", req, which);
  }
  for (LocalWorker* w : workers_.Of(m.job, which)) StopWorker(*w, m.grace_seconds, m.reason);
}

// worker_life.h b, c, e: without a grace, SIGKILL now; else SIGTERM once
// and its notice, the SIGKILL at the earliest deadline any stop asked for.
// A killed worker is asked nothing more.
void AgentCore::StopWorker(LocalWorker& w, double grace, const std::string& reason) {
  if (grace <= 0) {
    if (!w.life.Kill()) return;  // killed before
    host_.Kill(w.pid);
  } else {
    const double now = clock_.NowSeconds();
    const bool first = w.life.Stop(now, grace);
    if (w.life.state() != WorkerLife::State::kStopping) return;  // killed before
    host_.Notify(w, first ? grace : std::min(grace, w.life.kill_at() - now), reason);
  }
  spdlog::info("job {} worker {}: stopping ({}; grace {} s)", w.job, w.id, reason, grace);
  host_.RequestStop(w.pid, grace);
}

void AgentCore::PushToWorkers(p::JobId job, std::string_view key, const p::Message& m,
                              const std::set<p::WorkerId>& only) {
  for (const LocalWorker* w : workers_.Of(job, only)) {
    if (w->identity.empty() || (!key.empty() && w->store_key != key)) continue;
    host_.Push(*w, m);
  }
}

// No word from the scheduler for the whole lease: it may already have
// started this agent's jobs elsewhere. Every worker here checkpoints and
// stops (SIGTERM, which the runtime turns into a checkpoint and a clean
// stop), SIGKILL after kLeaseStopGraceSeconds; the agent then waits for the
// scheduler and registers again, reporting how its workers ended.
void AgentCore::LeaseTick() {
  SchedulerLease& lease = scheduler_.lease();
  if (!lease.Expired(clock_.NowSeconds())) return;
  lease.Drop();
  if (workers_.empty()) return;
  spdlog::error("no word from the scheduler for {:.1f} s (the lease): stopping the {} workers here",
                lease.lease_seconds(), workers_.size());
  const std::string reason = "the agent lost its lease from the scheduler";
  for (p::JobId job : workers_.Jobs()) {
    p::WorkerCheckpointRequest req;
    req.job = job;
    req.reason = reason;
    req.deadline_seconds = p::kLeaseStopGraceSeconds;
    req.stop_after = true;
    PushToWorkers(job, "", req);
  }
  for (auto& [pid, w] : workers_) StopWorker(w, p::kLeaseStopGraceSeconds, reason);
}

void AgentCore::Tick() {
  LeaseTick();
  const double now = clock_.NowSeconds();
  for (pid_t pid : workers_.OverdueLeavers(now)) host_.RequestStop(pid, WorkerLife::kOverdueGrace);
  if (!scheduler_.registered()) return;
  for (const auto& m : exits_.DueForResend(now)) scheduler_.Send(m);
}

// What the scheduler learns of a worker's end (exit_book.h), with what its
// channel said (WorkerHello, WorkerDone).
void AgentCore::OnExit(const ExitInfo& ex) {
  auto it = workers_.find(ex.pid);
  if (it == workers_.end()) return;
  LocalWorker& w = it->second;
  w.life.Exit();
  spdlog::info("job {} worker {} {}", w.job, w.id, ex.Describe());
  WorkerEnding end = host_.TakeEnding(w);
  ReportExit(ExitReport(self_.agent_id, w.job, w.id, w.generation, ex, end.runtime, end.done));
  const LocalWorker gone = w;
  workers_.erase(it);
  host_.Ended(gone, !workers_.Hosts(gone.job));
}

void AgentCore::ReportExit(const p::WorkerExited& m) {
  exits_.Add(m);
  if (scheduler_.registered()) scheduler_.Send(m);
}

// What this agent is, runs and has to report (protocol step 1).
p::AgentRegister AgentCore::RegisterMessage() const {
  p::AgentRegister m = self_;
  m.workers = workers_.Running();
  m.exited = exits_.Unacked();
  return m;
}

// Protocol step 2: free slots and the workers.
p::Heartbeat AgentCore::HeartbeatMessage() const {
  p::Heartbeat hb;
  hb.agent_id = self_.agent_id;
  hb.free_slots = workers_.FreeSlots(self_.slots);
  hb.workers = workers_.Running();
  return hb;
}

}  // namespace aryl::agent
