// aryl logs: the scheduler relays a client's JobLogs to the agent that ran the
// worker (LogRead) and the agent's LogReadReply back to the client as a
// LogChunk (protocol/inspect.h, steps 4-7). Logs stay on the agents' disks;
// the scheduler holds only the pending reads, each answered within
// kLogRelaySeconds.
#include "daemon_impl.h"

namespace aryl::daemon {
namespace {

struct Target {
  p::WorkerId worker = 0;
  std::int64_t rank = 0;
  std::string node;
};

// The rank (or worker) in the members of a journaled start or resize.
std::optional<Target> FindInMembers(const json& members, const p::JobLogs& m) {
  if (!members.is_array()) return std::nullopt;
  for (const auto& e : members) {
    if (!e.is_object() || !e.contains("worker") || !e.contains("rank") || !e.contains("node")) continue;
    try {
      Target t{e["worker"].get<p::WorkerId>(), e["rank"].get<std::int64_t>(), e["node"].get<std::string>()};
      if (m.worker ? t.worker == *m.worker : t.rank == m.rank) return t;
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

std::string Which(const p::JobLogs& m) {
  return m.worker ? "worker " + std::to_string(*m.worker) : "rank " + std::to_string(m.rank);
}

}  // namespace

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::JobLogs& m) {
  if (Status v = m.Validate(); !v.ok()) {
    metrics.Inc("aryl_bad_requests_total");
    return Err(v);
  }
  std::string job = "job " + std::to_string(m.job);
  std::optional<Target> target;
  bool running = false;
  auto it = jobs.find(m.job);
  if (it != jobs.end()) {
    for (const auto& [id, w] : it->second.workers) {
      if (m.worker ? id == *m.worker : (!w.leaving && w.rank == m.rank)) {
        target = Target{id, w.rank, w.agent};
        running = true;
        break;
      }
    }
  } else if (auto rec = store->GetJob(m.job); !rec.ok()) {
    return Err(rec.status());
  }
  if (!target) {
    // Not running now: the worker of that rank in the newest generation the
    // journal holds (a finished job, a preempted one, a rank that is gone);
    // a worker asked for by id may be of any earlier generation.
    EventFilter f;
    f.job = m.job;
    f.newest_first = true;
    f.limit = m.worker ? 200 : 1;
    std::vector<EventRecord> rows;
    for (const char* kind : {"start", "resize"}) {
      f.kind = kind;
      auto r = store->Events(f);
      if (!r.ok()) return Err(r.status());
      rows.insert(rows.end(), r->begin(), r->end());
    }
    if (rows.empty()) return Err(Status::NotFound(job + " has not started yet: no worker has written a log"));
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.seq > b.seq; });
    for (const auto& e : rows) {
      json data = json::parse(e.data, nullptr, false);
      if (data.is_object()) target = FindInMembers(data.value("members", json::array()), m);
      if (target || !m.worker) break;
    }
    if (!target)
      return Err(Status::NotFound(job + " has no " + Which(m) +
                                  (m.worker ? "" : " in its newest generation") + " (aryl describe job " +
                                  std::to_string(m.job) + " shows its placement history)"));
  }
  auto nit = nodes.find(target->node);
  if (nit == nodes.end() || !nit->second.connected) {
    std::string age = nit != nodes.end() && nit->second.last_heartbeat > 0
                          ? " (last heartbeat " + std::to_string(static_cast<long>(WallNow() - nit->second.last_heartbeat)) +
                                " s ago)"
                          : "";
    return Err(Status::Unavailable("the agent '" + target->node + "' that ran " + Which(m) + " (worker " +
                                   std::to_string(target->worker) + ") of " + job + " is not connected" + age +
                                   "; its log cannot be read until the agent is back"));
  }
  if (pending_logs.size() >= 1000)
    return Err(Status::Unavailable("too many log reads in flight; try again in a moment"));
  p::LogRead read;
  read.request = next_log_request++;
  read.job = m.job;
  read.worker = target->worker;
  read.stream = m.stream;
  read.offset = m.offset;
  read.max_bytes = m.max_bytes;
  PendingLog pending;
  pending.to = from;
  pending.agent = target->node;
  pending.chunk.job = m.job;
  pending.chunk.worker = target->worker;
  pending.chunk.rank = target->rank;
  pending.chunk.agent_id = target->node;
  pending.chunk.stream = m.stream;
  pending.chunk.offset = m.offset;
  pending.chunk.running = running;
  pending.deadline = WallNow() + p::kLogRelaySeconds;
  pending_logs[read.request] = std::move(pending);
  Send(target->node, read);
  return std::nullopt;  // answered by the agent's reply, or by LogRelayTick
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::LogReadReply& m) {
  auto it = pending_logs.find(m.request);
  if (it == pending_logs.end()) return std::nullopt;  // too late: the client was told Timeout
  if (it->second.agent != m.agent_id) {
    spdlog::warn("log read {} answered by '{}', but it went to '{}'; ignored", m.request, m.agent_id, it->second.agent);
    return std::nullopt;
  }
  PendingLog pending = std::move(it->second);
  pending_logs.erase(it);
  Status st;
  if (m.error_code) {
    st = p::Error{*m.error_code, "agent '" + m.agent_id + "': " + m.error}.ToStatus();
    st = port->Reply(pending.to, p::Error::FromStatus(st));
  } else {
    pending.chunk.offset = m.offset;
    pending.chunk.data = std::move(m.data);
    pending.chunk.size = m.size;
    st = port->Reply(pending.to, pending.chunk);
  }
  if (!st.ok()) spdlog::debug("log reply to {}: {}", pending.to.peer.identity, st.ToString());
  return std::nullopt;
}

void Daemon::Impl::LogRelayTick(double now) {
  for (auto it = pending_logs.begin(); it != pending_logs.end();) {
    const PendingLog& pl = it->second;
    auto nit = nodes.find(pl.agent);
    bool gone = nit == nodes.end() || !nit->second.connected;
    if (!gone && now < pl.deadline) {
      ++it;
      continue;
    }
    std::string what = "the log of job " + std::to_string(pl.chunk.job) + " worker " + std::to_string(pl.chunk.worker);
    Status st = gone ? Status::Unavailable("the agent '" + pl.agent + "' disconnected before it sent " + what)
                     : Status::Timeout("the agent '" + pl.agent + "' did not send " + what + " within " +
                                       std::to_string(static_cast<int>(p::kLogRelaySeconds)) + " s");
    (void)port->Reply(pl.to, p::Error::FromStatus(st));
    it = pending_logs.erase(it);
  }
}

}  // namespace aryl::daemon
