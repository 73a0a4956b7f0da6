#include <algorithm>
#include <type_traits>

#include "core_journal.h"
#include "aryl/hash.h"
#include "daemon_impl.h"
#include "reclaim_record.h"

namespace aryl::daemon {

Status Daemon::Impl::Transaction(const std::string& what, const std::function<Status()>& body) {
  if (outbox.open()) return body();  // part of the enclosing one
  Status st = outbox.Run(*store, body);  // its messages sent once it committed
  if (st.ok()) {
    MaybeSnapshot();
    return st;
  }
  // Nothing of it happened: no command left, and memory goes back to what the
  // store holds (the core is rebuilt from its journal).
  metrics.Inc("aryl_state_write_failures_total");
  if (st.IsUnavailable()) ++unavailable_writes;  // Handle: the request may be retried
  Status reload = Reload();
  if (!reload.ok()) spdlog::error("{}: reloading the state after a failed write: {}", what, reload.ToString());
  return st.WithContext(what);
}

void Daemon::Impl::SendNow(const std::string& identity, const p::Message& msg) {
  // To an agent: the routing id it registered from (authz.h, IsRouteOf).
  auto n = nodes.find(identity);
  const std::string& route = n != nodes.end() && !n->second.route.empty() ? n->second.route : identity;
  // Commands to agents carry this daemon's term (messages.h, "Term fencing").
  Status st = std::visit([&](const auto& m) {
    if constexpr (requires { m.term; }) {
      auto stamped = m;
      stamped.term = term;
      if (n != nodes.end()) StampStartConfirmation(n->second, stamped);
      return port->Push(route, stamped);
    } else {
      return port->Push(route, msg);
    }
  }, msg);
  if (!st.ok()) spdlog::debug("push {} to {}: {}", p::TypeName(msg), identity, st.ToString());
}

// Start confirmation (start_confirm.h) counts what went out, in the order it
// went: an acknowledgement raises the node's acked_seq when it is sent, and a
// start takes the acked_seq of that moment as its ack_floor, and so do its
// workers. (At creation it could be older than an acknowledgement sent while
// the start waited in the Outbox for its transaction: the agent would refuse
// it for nothing.)
template <typename M>
void Daemon::Impl::StampStartConfirmation(Node& n, M& m) {
  if constexpr (std::is_same_v<M, p::HeartbeatAck>) {
    n.acked_seq = std::max(n.acked_seq, m.seq);
  } else if constexpr (std::is_same_v<M, p::StartWorkers>) {
    if (n.acked_seq == 0) return;  // an agent that numbers no report
    m.ack_floor = n.acked_seq;
    if (auto jit = jobs.find(m.job); jit != jobs.end())
      for (const auto& wp : m.workers)
        if (auto w = jit->second.workers.find(wp.worker); w != jit->second.workers.end() && w->second.agent == n.id)
          w->second.start_floor = n.acked_seq;
  }
}

// An event is applied to the core at once (its own actions, a failed server's
// shrinks, a reclaim's returns, are executed now); the policy's round for every
// event of a tick runs once, in RoundTick, as a journaled Tick. So a burst of
// submissions, exits or registrations costs one round, not one per event.
Status Daemon::Impl::Feed(s::EventBody body, const std::string& why, bool round) {
  if (!core) return Status::FailedPrecondition("no agent has registered yet");
  auto t0 = std::chrono::steady_clock::now();
  double t = CoreNow();
  std::string text = round ? EventToJson(body) : AppliedToJson(body);
  // Validate before journaling: a bad event must not poison the replay. The
  // core refuses an event without changing.
  auto plan = CoreStep(*core, {t, body}, round);
  if (!plan.ok()) return plan.status();
  last_core_time = t;
  if (!round) round_due = true;
  // The core moved: journal the event and execute the plan as one durable step
  // (a failed write rebuilds the core from the journal, so the two agree).
  return Transaction(why, [&]() -> Status {
    ARYL_RETURN_IF_ERROR(AppendCoreRow(t, text));
    for (const auto& a : plan->actions) ARYL_RETURN_IF_ERROR(Execute(a));
    NoteDraining();
    if (round)
      metrics.Observe("aryl_round_seconds",
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return Status::Ok();
  });
}

Result<s::Plan> Daemon::Impl::CoreStep(s::Scheduler& into, const s::Event& ev, bool round) {
  const auto* sub = std::get_if<s::JobSubmitted>(&ev.body);
  const bool new_model = sub && speed && !speed->Find(sub->spec.id);
  SpeedBefore(ev.body);
  auto plan = round ? into.Handle(ev) : into.Apply(ev);
  if (!plan.ok()) {
    if (new_model) (void)speed->RemoveJob(sub->spec.id);  // the core refused the job
    return plan.status();
  }
  SpeedAfter(ev.body);
  return plan;
}

void Daemon::Impl::RoundTick() {
  if (!core) return;
  // A round the core asked for (Scheduler::NextWakeup: a job left to finish on
  // a reclaimed server leaves by the deadline; a policy's timed step), at the
  // first core time step after it, unless an event after it already had one.
  // Strictly after: a live job can outrun its estimate (still running when
  // the core expects it done); at its leave-by time exactly the core would
  // still count on it finishing, a step later it leaves.
  const double wake = core->NextWakeup();
  const bool woken = wake < s::kNever && wake >= last_core_time && CoreNow() > wake;
  if (!round_due && !woken) return;
  round_due = false;
  Status st = Transaction("round", [&] { return Feed(s::Tick{}, "round", true); });
  if (!st.ok()) {
    spdlog::error("scheduling round: {}", st.ToString());
    round_due = true;  // again on the next tick
  }
}

std::map<std::string, int> Daemon::Impl::ToNodePlacement(const s::Placement& placement) {
  std::map<std::string, int> out;
  for (const auto& [sid, n] : placement) {
    auto it = registry.node_by_server().find(sid);
    if (it != registry.node_by_server().end() && n > 0) out[it->second] = n;
  }
  return out;
}

Status Daemon::Impl::Execute(const s::Action& a) {
  switch (a.type) {
    case s::ActionType::kStart:
    case s::ActionType::kResize: {
      auto it = jobs.find(a.job);
      if (it == jobs.end()) return Status::Ok();
      // A job whose workers are finishing keeps them until they are gone; the
      // slots the core takes back count as free (those workers are leaving).
      if (it->second.Completing()) {
        if (MarkLeavers(it->second, ToNodePlacement(a.placement)).empty()) return Status::Ok();
        return SaveJob(it->second);
      }
      if (a.type == s::ActionType::kResize) {
        it->second.rescales++;
        metrics.Inc("aryl_rescales_total");
        Job& j = it->second;
        if (j.RestartsToResize() && !j.workers.empty()) {
          // Only a pure grow waits for the kind: the GPUs it adds are idle
          // meanwhile. A resize that takes workers away goes now (a restart),
          // since the core has already given those slots to other jobs.
          const std::map<std::string, int> desired = ToNodePlacement(a.placement);
          const std::map<std::string, int> live = j.LivePlacement();
          const bool grows_only = std::all_of(live.begin(), live.end(), [&](const auto& e) {
            auto d = desired.find(e.first);
            return d != desired.end() && d->second >= e.second;
          });
          if (!j.spec.elastic && grows_only && WallNow() - j.last_start < kKindDetectSeconds) {
            j.resize_pending = true;  // ConvergeTick, once the kind is known
            return Status::Ok();
          }
          return Restart(j, a.reason);
        }
      }
      return Converge(it->second, ToNodePlacement(a.placement), a.reason);
    }
    case s::ActionType::kPreempt: {
      auto it = jobs.find(a.job);
      if (it == jobs.end()) return Status::Ok();
      metrics.Inc("aryl_preemptions_total");
      Job& j = it->second;
      j.preemptions++;
      StopJobWorkers(j, /*checkpoint_first=*/true, "preempted: " + a.reason);
      if (!j.Completing()) Phase(j, j.life.Unplaced(WallNow()), "preempt");
      j.rec.state = JobState::kQueued;
      j.rec.placement.clear();
      j.rec.message = "preempted: " + a.reason;
      ARYL_RETURN_IF_ERROR(Journal(j.rec.id, "preempt", a.reason, {{"reason", a.reason}}, JobNodes(j)));
      Notify(j, p::JobState::kPreempted, j.rec.message);
      return SaveJob(j);
    }
    case s::ActionType::kReturnServer: {
      auto nit = registry.node_by_server().find(a.server);
      if (nit == registry.node_by_server().end()) return Status::Ok();
      Node& n = nodes[nit->second];
      n.loan_state = "held";
      ARYL_RETURN_IF_ERROR(SaveNode(n));
      metrics.Inc("aryl_reclaims_total");
      ARYL_RETURN_IF_ERROR(Journal(0, "return", n.id + ": " + a.reason, {{"reason", a.reason}}, {n.id}));
      // A server the core drained (its jobs were left to finish) keeps its
      // reclaim's start and deadline; the others are returned as reclaimed.
      PendingReclaim pr{n.id, WallNow(), WallNow() + current_reclaim_deadline};
      if (auto d = draining.find(a.server); d != draining.end()) {
        pr = d->second;
        draining.erase(d);
      }
      pr.ready_by = pr.deadline + ServingBudget(n);
      ARYL_RETURN_IF_ERROR(SaveReclaim(*store, pr));  // kept across a restart
      reclaims.push_back(pr);
      return Status::Ok();
    }
  }
  return Status::Ok();
}

Status Daemon::Impl::SaveNode(const Node& n) {
  return store->UpsertNode({n.id, std::string(p::ToString(n.pool)), n.gpu_type, n.slots, n.loan_state, n.server_id});
}

json WorkerEndJson(const p::WorkerEnd& e) {
  return {{"worker", e.worker}, {"rank", e.rank}, {"node", e.node},
          {"exit_code", e.exit_code ? json(*e.exit_code) : json(nullptr)},
          {"signal", e.signal ? json(*e.signal) : json(nullptr)}, {"error", e.error}};
}

std::optional<p::WorkerEnd> WorkerEndFromJson(const json& j) {
  if (!j.is_object()) return std::nullopt;
  try {
    p::WorkerEnd e;
    e.worker = j.at("worker").get<p::WorkerId>();
    e.rank = j.at("rank").get<std::int64_t>();
    e.node = j.at("node").get<std::string>();
    if (j.contains("exit_code") && !j["exit_code"].is_null()) e.exit_code = j["exit_code"].get<std::int64_t>();
    if (j.contains("signal") && !j["signal"].is_null()) e.signal = j["signal"].get<std::int64_t>();
    e.error = j.value("error", std::string());
    if (e.worker < 0 || e.rank < 0 || (e.exit_code && (*e.exit_code < 0 || *e.exit_code > 255)) ||
        (e.signal && (*e.signal < 1 || *e.signal > 128)))
      return std::nullopt;
    return e;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

Status Daemon::Impl::SaveJob(Job& j) {
  json w;
  w["generation"] = j.generation;
  w["next_worker"] = j.next_worker;
  w["starts"] = j.starts;
  w["failures"] = j.failures;
  w["rescales"] = j.rescales;
  w["preemptions"] = j.preemptions;
  w["home_store"] = j.home_store;
  w["completing"] = j.Completing();
  w["completing_step"] = j.life.completing_step();
  w["runtime"] = j.runtime;
  w["restarting"] = j.Restarting();
  w["phase"] = std::string(PhaseName(j.life.phase()));
  w["restarts"] = j.restarts;
  // The lease wait survives a restart of the scheduler: the lost agent's
  // workers may run until then whoever is scheduling.
  if (!j.lease.until.empty()) w["lease_waits"] = j.lease.until;
  if (!j.lease.unconfirmed.empty()) w["lease_unconfirmed"] = j.lease.unconfirmed;
  if (j.first_end) w["first_end"] = WorkerEndJson(*j.first_end);
  if (j.failure) w["failure"] = WorkerEndJson(*j.failure);
  json arr = json::array();
  j.rec.placement.clear();
  for (const auto& [id, wk] : j.workers) {
    arr.push_back({{"id", wk.id}, {"agent", wk.agent}, {"rank", wk.rank}, {"slot", wk.slot},
                   {"generation", wk.generation}, {"leaving", wk.leaving}});
    if (!wk.leaving) j.rec.placement[wk.agent]++;
  }
  w["workers"] = arr;
  j.rec.workers_json = w.dump();
  j.rec.generation = static_cast<std::uint64_t>(j.generation);
  return store->UpdateJob(j.rec);
}

void Daemon::Impl::Push(const std::string& agent, const p::Message& msg) {
  auto n = nodes.find(agent);
  if (n == nodes.end() || !n->second.connected) return;  // reconciled when it comes back
  Send(agent, msg);
}

void Daemon::Impl::Notify(Job& j, p::JobState state, const std::string& message, bool final,
                           std::vector<std::string> output) {
  if (j.watchers.empty()) return;
  p::JobEvent ev;
  ev.job = j.rec.id;
  ev.time = WallNow();
  ev.state = state;
  int size = 0;
  for (const auto& [id, w] : j.workers)
    if (!w.leaving) size++;
  ev.workers = size;
  ev.message = message;
  ev.output = std::move(output);
  ev.final = final;
  ev.rank0_worker = RankZero(j);
  if (final) ev.exit_code = std::clamp(j.rec.exit_code, 0, 255);
  if (final && state == p::JobState::kFailed) ev.failure = j.failure;
  for (const auto& watcher : j.watchers) Send(watcher, ev);
}

}  // namespace aryl::daemon
