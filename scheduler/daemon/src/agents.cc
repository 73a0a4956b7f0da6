#include "daemon_impl.h"

namespace aryl::daemon {

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::AgentRegister& m) {
  if (!IsRouteOf(from.peer.identity, m.agent_id)) {
    return Err(Status::InvalidArgument("agent_register: agent_id '" + m.agent_id +
                                       "' differs from the connection's identity"));
  }
  auto it = nodes.find(m.agent_id);
  bool is_new = it == nodes.end();

  if (!is_new && (it->second.pool != m.pool || it->second.gpu_type != m.gpu_type || it->second.slots != m.slots)) {
    return Err(Status::FailedPrecondition(
        "agent " + m.agent_id + " registered before as " + std::string(p::ToString(it->second.pool)) + "/" +
        it->second.gpu_type + "/" + std::to_string(it->second.slots) + " slots; use a new agent id for a changed server"));
  }
  // A registration that a later report of the same agent process overtook
  // (protocol step 1): its list of workers is older than one already read.
  if (!is_new && it->second.Stale(m.instance, m.seq.value_or(0)))
    return Err(Status::FailedPrecondition("agent_register: report " + std::to_string(*m.seq) + " of agent " + m.agent_id +
                               " is older than report " + std::to_string(it->second.report_seq) +
                               " already read: ignored"));
  bool was_connected = !is_new && it->second.connected;
  // The agent died and came back before it timed out (systemd's Restart=):
  // its workers died with it and its store is a new one. That is a node
  // failure first (jobs whose store it was restart from their checkpoint),
  // then a registration.
  const bool new_process = !is_new && it->second.instance != 0 && m.instance != 0 && it->second.instance != m.instance;
  bool restarted = was_connected && new_process;
  std::string id = m.agent_id;
  Status st = Transaction("register " + id, [&]() -> Status {
    if (restarted) {
      spdlog::warn("agent {} registered from a new process: the workers of its last one are lost", id);
      ARYL_RETURN_IF_ERROR(NodeFailed(id, WallNow()));
    }
    Node& n = nodes[id];
    n.instance = m.instance;
    n.report_seq = m.seq.value_or(0);
    // Acknowledged by the AgentRegistered below (start_confirm.h).
    n.acked_seq = new_process ? n.report_seq : std::max(n.acked_seq, n.report_seq);
    if (is_new) {
      n.id = id;
      n.pool = m.pool;
      n.gpu_type = m.gpu_type;
      n.slots = static_cast<int>(m.slots);
      registry.AssignServer(n);
      n.loan_state = m.pool == p::Pool::kInference ? "held" : "available";
    }
    n.host = m.host;
    n.route = from.peer.identity;
    n.store_endpoint = m.store_endpoint;
    registry.SetConnected(n, true);
    n.serving = m.serving;
    if (n.serving) serving_sync.insert(id);  // its ServingCommand follows (serving.cc)
    if (n.removed) {
      n.removed = false;
      ARYL_RETURN_IF_ERROR(store->SetMeta("removed/" + n.id, "0"));
    }
    Heard(n);
    ARYL_RETURN_IF_ERROR(SaveNode(n));
    ARYL_RETURN_IF_ERROR(Journal(0, "register",
                                 n.id + " " + std::string(p::ToString(n.pool)) + " " + n.gpu_type + " x" +
                                     std::to_string(n.slots),
                                 {{"pool", p::ToString(n.pool)}, {"gpu_type", n.gpu_type}, {"slots", n.slots}}, {n.id}));
    spdlog::info("agent {} registered ({} {} x{}, {} workers running, {} exits to report)", n.id,
                 p::ToString(n.pool), n.gpu_type, n.slots, m.workers.size(), m.exited.size());
    // Exits the agent kept for us come first: those workers ended, they are not lost.
    for (auto ex : m.exited) {
      ex.agent_id = n.id;
      ARYL_RETURN_IF_ERROR(ex.Validate());
      ARYL_RETURN_IF_ERROR(HandleWorkerExit(ex));
      Send(n.id, p::WorkerExitAck{ex.job, ex.worker});
    }
    Reconcile(n, m.workers, StartReport{m.seq.value_or(0), m.acked.value_or(0), true});
    // A job waiting out this agent's lease need not wait once the agent says
    // it runs none of the job's workers: no second copy can be running.
    // The jobs that wait on this node's lease only (lease_waits), not every live job.
    if (auto waits = lease_waits.find(n.id); waits != lease_waits.end()) {
      std::set<p::JobId> still;
      for (p::JobId jid : waits->second) {
        auto jit = jobs.find(jid);
        if (jit == jobs.end() || !jit->second.lease.WaitsOn(n.id)) continue;  // stale entry
        Job& j = jit->second;
        bool runs = std::any_of(m.workers.begin(), m.workers.end(), [&](const auto& rw) { return rw.job == jid; });
        if (!runs && j.lease.ReleasedByRegistration(n.id, new_process)) {
          j.lease.Release(n.id);
          pending_converge.insert(jid);
        } else {
          still.insert(jid);
        }
      }
      if (still.empty()) lease_waits.erase(waits);
      else waits->second = std::move(still);
    }
    if (is_new) {
      ARYL_RETURN_IF_ERROR(AddServer(n));
      return SyncCordon(n);
    }
    // A node drained --now stays failed; a drained one is back, still cordoned.
    if (core && (restarted || !was_connected) && !(n.drained && n.drain_now)) {
      const auto* info = core->state().server(n.server_id);
      if (info && info->failed) ARYL_RETURN_IF_ERROR(Feed(s::ServerRecovered{n.server_id}, "agent back"));
    }
    return SyncCordon(n);
  });
  if (!st.ok()) {
    // Nothing of the registration happened; the agent tries again.
    auto nit = nodes.find(id);
    if (nit != nodes.end()) registry.SetConnected(nit->second, was_connected);
    spdlog::error("agent {}: registration not recorded: {}", id, st.ToString());
    return Err(st);
  }
  p::AgentRegistered reply;
  reply.agent_id = id;
  reply.heartbeat_interval_seconds = opt.heartbeat_interval;
  reply.scheduler_epoch = scheduler_epoch;
  reply.store_key = store_key;
  reply.lease_seconds = opt.agent_lease;
  reply.term = term;
  snapshot_dirty = true;
  return p::Message(reply);
}

// What the agent of `n` says it runs (every heartbeat and registration),
// against what the daemon expects there:
// - a worker the daemon does not expect (its job went on without it while the
//   agent was out of touch, or, at a registration, is over) is a stray:
//   killed (SIGKILL, not SIGTERM: the runtime turns a SIGTERM into a clean
//   stop of every rank, which would stop the job it left), the kill sent again every
//   kStrayKillEvery s while it is still listed (a StopWorkers can be lost
//   with a broken connection). While a stray of a live job runs, that job
//   starts no fresh group (Job::stray_nodes, ConvergeInputOf); if the agent
//   is lost meanwhile, its lease wait covers the strays (NodeFailed);
// - a start is confirmed once its worker is listed (ConfirmStarts);
// - at a registration, an expected worker that is not listed exited while
//   the agent was away: gone (a start not yet confirmed excepted).
// O(the workers listed + the node's workers).
void Daemon::Impl::Reconcile(Node& n, const std::vector<p::RunningWorker>& running, const StartReport& report) {
  const bool registration = report.registration;
  std::set<std::pair<p::JobId, p::WorkerId>> reported;
  std::set<p::JobId> stray_jobs;
  for (const auto& rw : running) {
    reported.insert({rw.job, rw.worker});
    auto jit = jobs.find(rw.job);
    Worker* w = nullptr;
    if (jit != jobs.end())
      if (auto wit = jit->second.workers.find(rw.worker); wit != jit->second.workers.end() && wit->second.agent == n.id)
        w = &wit->second;
    if (w) {
      w->start_watch = -1;
      continue;
    }
    // A worker of an ended job is being stopped with its grace (EndJob; the
    // linger stop repeats it): only a registration kills it at once.
    if (!registration && jit == jobs.end()) continue;
    auto [sit, first] = n.strays.try_emplace({rw.job, rw.worker}, registry.watch_now());
    if (first || registry.watch_now() - sit->second >= kStrayKillEvery) {
      sit->second = registry.watch_now();
      spdlog::warn("agent {} runs worker {} of job {} that the scheduler does not expect: killing it", n.id,
                   rw.worker, rw.job);
      p::StopWorkers sw;
      sw.job = rw.job;
      sw.workers = {rw.worker};
      sw.grace_seconds = 0;
      sw.reason = "not expected by the scheduler";
      Send(n.id, sw);
    }
    if (jit == jobs.end()) continue;
    stray_jobs.insert(rw.job);
    jit->second.stray_nodes.insert(n.id);
  }
  // Strays no longer listed are gone; a job they held back may start again.
  for (auto it = n.strays.begin(); it != n.strays.end();) {
    if (reported.count(it->first)) {
      ++it;
      continue;
    }
    const p::JobId jid = it->first.first;
    it = n.strays.erase(it);
    if (auto jit = jobs.find(jid); jit != jobs.end() && !stray_jobs.count(jid) && jit->second.stray_nodes.erase(n.id))
      pending_converge.insert(jid);
  }
  if (!registration) return ConfirmStarts(n, reported, report);
  // Workers the daemon expected there but the agent no longer runs: they
  // exited while we were apart. Not a start the agent has not listed yet:
  // the registration may have been sent before the start arrived (seed 387
  // of aryl-simtest --daemon: under a 2.7 s delay that made a new worker
  // "gone" and a second group start beside it), unless the registration
  // says the agent refuses it for ever (start_confirm.h). The node's workers
  // only (workers_on).
  auto on = registry.workers_on().find(n.id);
  if (on == registry.workers_on().end()) return;
  std::vector<std::pair<p::JobId, p::WorkerId>> gone;
  for (const auto& key : on->second) {
    if (reported.count(key)) continue;
    Worker& w = jobs.at(key.first).workers.at(key.second);
    if (w.start_watch < 0 || JudgeUnlistedStart(w.start_floor, registry.watch_now() - w.start_watch, report,
                                                kStartConfirmSeconds) == StartVerdict::kGone)
      gone.push_back(key);
  }
  for (const auto& [jid, wid] : gone) WorkerGone(n, jobs.at(jid), wid, "lost");
}

void Daemon::Impl::WorkerGone(const Node& n, Job& j, p::WorkerId wid, const std::string& why) {
  bool leaving = j.workers.at(wid).leaving;
  table.EraseWorker(j, wid);
  spdlog::info("job {} worker {} on {} is gone ({})", j.rec.id, wid, n.id, leaving ? "was leaving" : why);
  if (!leaving) j.failures++;
  pending_converge.insert(j.rec.id);
}

// A start is confirmed once the agent lists the worker. One that a heartbeat
// does not list is given up as start_confirm.h says: once the agent's
// acknowledged report is newer than the start (it refuses the start for
// ever), or, from an agent that does not say (an older version), once it
// went out kStartConfirmSeconds of watching ago (watch time, LivenessTick, so
// that heartbeats read after a pause do not count against it). Before the
// acknowledgement rule, a wire late by more than those 6 s made a start that
// then arrived and ran "never ran", and a fresh group started beside it
// (aryl-simtest --daemon --faults lag, seeds 14 and 29). O(the node's workers).
void Daemon::Impl::ConfirmStarts(const Node& n, const std::set<std::pair<p::JobId, p::WorkerId>>& reported,
                                 const StartReport& report) {
  auto on = registry.workers_on().find(n.id);
  if (on == registry.workers_on().end()) return;
  std::vector<std::pair<p::JobId, p::WorkerId>> never_ran;
  for (const auto& [jid, wid] : on->second) {
    Worker& w = jobs.at(jid).workers.at(wid);
    if (w.start_watch >= 0 && !reported.count({jid, wid}) &&
        JudgeUnlistedStart(w.start_floor, registry.watch_now() - w.start_watch, report, kStartConfirmSeconds) ==
            StartVerdict::kGone)
      never_ran.emplace_back(jid, wid);
  }
  for (const auto& [jid, wid] : never_ran)
    WorkerGone(n, jobs.at(jid), wid, "its agent never ran it: the start was lost or refused");
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::Heartbeat& m) {
  auto it = nodes.find(m.agent_id);
  if (it == nodes.end() || !it->second.connected || from.peer.identity != it->second.route) {
    // A scheduler that restarted or timed the agent out: ask it to register again.
    p::Error e;
    e.code = Status::Code::kFailedPrecondition;
    e.message = "unknown agent " + m.agent_id + ": register again";
    Send(from.peer.identity, e);
    return std::nullopt;
  }
  Heard(it->second);
  // To the node (its route, from.peer.identity): SendNow raises its acked_seq as it goes.
  Send(m.agent_id, p::HeartbeatAck{m.seq, opt.agent_lease, scheduler_epoch, term});
  // One that a later report overtook says nothing new of the workers.
  if (it->second.Stale(it->second.instance, m.seq)) return std::nullopt;
  it->second.report_seq = m.seq;
  Reconcile(it->second, m.workers, StartReport{m.seq, m.acked.value_or(0), false});
  // A full log disk cuts the workers' output: an event when it fills, one when
  // space returns (aryl events, aryl_log_disk_full_total).
  Node& n = it->second;
  bool full = m.log_free_bytes >= 0 && m.log_free_bytes < kLogDiskFullBytes;
  if (full != n.log_disk_full) {
    n.log_disk_full = full;
    if (full) metrics.Inc("aryl_log_disk_full_total");
    std::string what = full ? "the log directory's disk is full (" + std::to_string(m.log_free_bytes) +
                                  " bytes free): workers' output is being cut"
                            : "the log directory's disk has space again";
    if (full) spdlog::error("agent {}: {}", n.id, what);
    else spdlog::info("agent {}: {}", n.id, what);
    Status st = Transaction("log disk of " + n.id, [&] {
      return Journal(0, full ? "log_disk_full" : "log_disk_ok", n.id + ": " + what, {{"free_bytes", m.log_free_bytes}},
                     {n.id});
    });
    if (!st.ok()) spdlog::warn("agent {}: disk event not journaled: {}", n.id, st.ToString());
  }
  return std::nullopt;
}

// Agents that stopped heartbeating have failed: their workers are gone.
// Silence is measured on the registry's watch clock (node_registry.h), which
// counts only the time this scheduler was watching.
void Daemon::Impl::LivenessTick(double now) {
  registry.Watch(now, port->drained());
  bool after_restart_grace = now - started_at > std::max(opt.restart_grace, opt.agent_timeout);
  // The failed nodes first, then one transaction each: a transaction that
  // fails (a full state disk) reloads `nodes` from the store, so no iterator
  // of it may live across one.
  auto failed = registry.LostNodes(opt.agent_timeout, [&](const Node& n) {
    // Known to the core from before this scheduler started, and not back.
    if (!after_restart_grace || !core) return false;
    const auto* info = core->state().server(n.server_id);
    return info && !info->failed;
  });
  for (const auto& [node_id, timed_out] : failed) {
    Status st = Transaction("node " + node_id + " failed", [&] { return NodeFailed(node_id, now); });
    if (!st.ok()) {
      spdlog::error("agent {} lost: {}", node_id, st.ToString());
      continue;  // not recorded: the next tick tries again
    }
    spdlog::warn("agent {} {}: its workers are lost", node_id, timed_out ? "stopped heartbeating" : "did not come back");
  }
}

Status Daemon::Impl::NodeFailed(const std::string& id, double now) {
  Node& n = nodes[id];
  registry.SetConnected(n, false);
  // The jobs with workers on this node only (workers_on).
  std::map<p::JobId, std::vector<p::WorkerId>> gone_by_job;
  if (auto on = registry.workers_on().find(id); on != registry.workers_on().end())
    for (const auto& [jid, wid] : on->second) gone_by_job[jid].push_back(wid);
  // The agent may still run these workers until its lease runs out (it was
  // last heard at n.last_heartbeat; one that never came back after this
  // scheduler started was acknowledged last before that start).
  double expiry = NodeRegistry::LeaseExpiry(n.heard_here ? n.last_heartbeat : std::max(n.last_heartbeat, started_at),
                                            opt.agent_lease);
  // Strays it ran (Reconcile) may run until then too.
  for (const auto& [key, sent] : n.strays)
    if (auto jit = jobs.find(key.first); jit != jobs.end() && jit->second.stray_nodes.erase(id)) gone_by_job[key.first];
  n.strays.clear();
  // A reclaim of this node is not met by its workers' loss: they may run
  // until the lease runs out, unless its agent registers before (ReclaimTick).
  if (!gone_by_job.empty())
    for (auto& pr : reclaims)
      if (pr.node == id) pr.lost_until = std::max(pr.lost_until, expiry);
  for (const auto& [jid, gone] : gone_by_job) {
    Job& j = jobs.at(jid);
    bool unconfirmed = false;  // a start there no report listed (LeaseFence)
    for (auto wid : gone) {
      if (auto w = j.workers.find(wid); w != j.workers.end() && w->second.start_watch >= 0) unconfirmed = true;
      table.EraseWorker(j, wid);
    }
    j.lease.Prune(WallNow());
    if (expiry > WallNow()) {
      j.lease.Wait(id, expiry, unconfirmed);
      lease_waits[id].insert(jid);
    }
    pending_converge.insert(jid);
    if (!n.store_endpoint.empty() && j.home_store == n.store_endpoint && !j.workers.empty()) {
      // The job's rendezvous store died with this agent: its other workers
      // cannot form another generation. Stop them now (no checkpoint is
      // possible without rank 0) and start again from the latest checkpoint.
      spdlog::warn("job {}: its rendezvous store was on {}; restarting it from its latest checkpoint", jid, id);
      StopJobWorkers(j, /*checkpoint_first=*/false, "the job's rendezvous store was lost with " + id, 0.0);
    }
    ARYL_RETURN_IF_ERROR(SaveJob(j));
  }
  ARYL_RETURN_IF_ERROR(Journal(0, "node_failed", id, json::object(), {id}));
  if (core) return Feed(s::ServerFailed{n.server_id}, "agent lost");
  return Status::Ok();
}

std::int64_t Daemon::Impl::RankZero(const Job& j) {
  for (const auto& [id, w] : j.workers)
    if (!w.leaving && w.rank == 0) return id;
  return -1;
}

// drain: the node takes no new workers; the jobs on it run to their end (the
// core sees its server cordoned; Slurm's DRAIN). drain-now: its workers also
// move off at once, as on a planned shrink or a preemption (the core sees the
// server failed while the agent stays connected, so leavers go at a step
// boundary, with a checkpoint). resume: schedulable again. remove: forget a
// disconnected node. Each is idempotent and survives a scheduler restart
// (meta table; the cordon also in the core journal).
Status Daemon::Impl::SyncCordon(const Node& n) {
  const auto* info = core ? core->state().server(n.server_id) : nullptr;
  if (!info || info->cordoned == n.drained) return Status::Ok();
  return Feed(s::ServerCordoned{n.server_id, n.drained}, n.drained ? "drain " + n.id : "resume " + n.id);
}

Status Daemon::Impl::NodeCommandFor(const std::string& name, const std::string& action) {
  auto it = nodes.find(name);
  if (it == nodes.end() || it->second.removed) return Status::NotFound("no node named '" + name + "'");
  Node& n = it->second;
  if (action == "drain" || action == "drain-now") {
    const bool now = action == "drain-now";
    if (n.drained && (n.drain_now || !now)) return Status::Ok();
    return Transaction(action + " " + name, [&]() -> Status {
      n.drained = true;
      n.drain_now = now;
      ARYL_RETURN_IF_ERROR(store->SetMeta("drained/" + name, now ? "1" : "wait"));
      ARYL_RETURN_IF_ERROR(Journal(0, "drain", name, json{{"now", now}}, {name}));
      ARYL_RETURN_IF_ERROR(SyncCordon(n));
      const auto* info = core ? core->state().server(n.server_id) : nullptr;
      if (now && info && !info->failed)
        return Feed(s::ServerFailed{n.server_id, "drained (--now)"}, "drain --now " + name);
      return Status::Ok();
    });
  }
  if (action == "resume") {
    if (!n.drained) return Status::FailedPrecondition("node '" + name + "' is not drained");
    return Transaction("resume " + name, [&]() -> Status {
      n.drained = false;
      n.drain_now = false;
      ARYL_RETURN_IF_ERROR(store->SetMeta("drained/" + name, "0"));
      ARYL_RETURN_IF_ERROR(Journal(0, "resume", name, json::object(), {name}));
      ARYL_RETURN_IF_ERROR(SyncCordon(n));
      const auto* info = core ? core->state().server(n.server_id) : nullptr;
      if (n.connected && info && info->failed) return Feed(s::ServerRecovered{n.server_id}, "resume " + name);
      return Status::Ok();
    });
  }
  // remove
  if (n.connected)
    return Status::FailedPrecondition("node '" + name + "' is connected; stop its agent first (or drain it)");
  return Transaction("remove " + name, [&]() -> Status {
    n.removed = true;
    ARYL_RETURN_IF_ERROR(store->SetMeta("removed/" + name, "1"));
    return Journal(0, "remove", name, json::object(), {name});
  });
}

}  // namespace aryl::daemon
