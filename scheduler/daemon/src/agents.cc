#include "daemon_impl.h"

namespace aryl::daemon {

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::AgentRegister& m) {
  if (from.peer.identity != m.agent_id) {
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
  Node& n = nodes[m.agent_id];
  bool was_connected = n.connected;
  if (is_new) {
    n.id = m.agent_id;
    n.pool = m.pool;
    n.gpu_type = m.gpu_type;
    n.slots = static_cast<int>(m.slots);
    s::ServerId next = 0;
    for (const auto& [sid, name] : node_by_server) next = std::max(next, sid + 1);
    n.server_id = next;
    n.loan_state = m.pool == p::Pool::kInference ? "held" : "available";
    node_by_server[n.server_id] = n.id;
  }
  n.host = m.host;
  n.store_endpoint = m.store_endpoint;
  n.connected = true;
  n.last_heartbeat = WallNow();
  Status st = SaveNode(n);
  if (!st.ok()) return Err(st);
  (void)store->AppendEvent(WallNow(), 0, "register", n.id + " " + std::string(p::ToString(n.pool)) + " " +
                                                        n.gpu_type + " x" + std::to_string(n.slots));
  spdlog::info("agent {} registered ({} {} x{}, {} workers running)", n.id, p::ToString(n.pool), n.gpu_type, n.slots,
               m.workers.size());
  Reconcile(n, m.workers);
  if (is_new) {
    st = RebuildCore(n.server_id);
  } else if (core && !was_connected) {
    const auto* info = core->state().server(n.server_id);
    if (info && info->failed) st = Feed(s::ServerRecovered{n.server_id}, "agent back");
  }
  if (!st.ok()) spdlog::error("agent {}: {}", n.id, st.ToString());
  p::AgentRegistered reply;
  reply.agent_id = n.id;
  reply.heartbeat_interval_seconds = opt.heartbeat_interval;
  reply.scheduler_epoch = scheduler_epoch;
  PublishSnapshot();
  return p::Message(reply);
}

// What an agent runs vs what the daemon believes it runs there.
void Daemon::Impl::Reconcile(Node& n, const std::vector<p::RunningWorker>& running) {
  std::set<std::pair<p::JobId, p::WorkerId>> reported;
  for (const auto& rw : running) {
    reported.insert({rw.job, rw.worker});
    auto jit = jobs.find(rw.job);
    bool known = jit != jobs.end() && jit->second.workers.count(rw.worker) &&
                 jit->second.workers[rw.worker].agent == n.id;
    if (!known) {
      spdlog::warn("agent {} runs worker {} of job {} that the scheduler does not expect: stopping it", n.id,
                   rw.worker, rw.job);
      p::StopWorkers sw;
      sw.job = rw.job;
      sw.workers = {rw.worker};
      sw.grace_seconds = opt.stop_grace;
      sw.reason = "not expected by the scheduler";
      (void)server->Push(n.id, sw);
    }
  }
  // Workers the daemon expected there but the agent no longer runs: they exited while we were apart.
  for (auto& [jid, j] : jobs) {
    std::vector<p::WorkerId> gone;
    for (const auto& [wid, w] : j.workers)
      if (w.agent == n.id && !reported.count({jid, wid})) gone.push_back(wid);
    for (auto wid : gone) {
      bool leaving = j.workers[wid].leaving;
      j.workers.erase(wid);
      spdlog::info("job {} worker {} on {} is gone ({})", jid, wid, n.id, leaving ? "was leaving" : "lost");
      if (!leaving) j.failures++;
    }
    if (!gone.empty()) pending_converge.insert(jid);
  }
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::Heartbeat& m) {
  auto it = nodes.find(m.agent_id);
  if (it == nodes.end() || !it->second.connected || from.peer.identity != m.agent_id) {
    // A scheduler that restarted or timed the agent out: ask it to register again.
    p::Error e;
    e.code = Status::Code::kFailedPrecondition;
    e.message = "unknown agent " + m.agent_id + ": register again";
    (void)server->Push(from.peer.identity, e);
    return std::nullopt;
  }
  it->second.last_heartbeat = WallNow();
  return std::nullopt;
}

// Agents that stopped heartbeating have failed: their workers are gone.
void Daemon::Impl::LivenessTick(double now) {
  bool after_restart_grace = now - started_at > std::max(opt.restart_grace, opt.agent_timeout);
  for (auto& [id, n] : nodes) {
    bool timed_out = n.connected && now - n.last_heartbeat > opt.agent_timeout;
    bool never_came_back = !n.connected && after_restart_grace && core;
    if (!timed_out && !never_came_back) continue;
    if (never_came_back) {
      const auto* info = core->state().server(n.server_id);
      if (!info || info->failed) continue;
    }
    spdlog::warn("agent {} {}: its workers are lost", id, timed_out ? "stopped heartbeating" : "did not come back");
    n.connected = false;
    for (auto& [jid, j] : jobs) {
      std::vector<p::WorkerId> gone;
      for (const auto& [wid, w] : j.workers)
        if (w.agent == id) gone.push_back(wid);
      for (auto wid : gone) j.workers.erase(wid);
      if (!gone.empty()) pending_converge.insert(jid);
    }
    (void)store->AppendEvent(now, 0, "node_failed", id);
    if (core) {
      Status st = Feed(s::ServerFailed{n.server_id}, "agent lost");
      if (!st.ok()) spdlog::error("server {} failed: {}", id, st.ToString());
    }
  }
}

}  // namespace aryl::daemon
