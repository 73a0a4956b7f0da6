#include "daemon_impl.h"
#include "reclaim_record.h"

namespace aryl::daemon {

Status Daemon::Impl::Offer(const std::vector<std::string>& names) {
  std::vector<s::ServerId> ids;
  for (const auto& name : names) {
    auto it = nodes.find(name);
    if (it == nodes.end()) return Status::NotFound("no agent named '" + name + "'");
    if (it->second.pool != p::Pool::kInference)
      return Status::InvalidArgument("'" + name + "' is a training server; only inference servers can be offered");
    if (it->second.loan_state == "loaned") return Status::FailedPrecondition("'" + name + "' is already loaned");
    if (it->second.loan_state == "lending")
      return Status::FailedPrecondition("'" + name + "' is being lent (its serving side is stopping)");
    if (!it->second.connected) return Status::Unavailable("'" + name + "' is not connected");
    if (it->second.drained)
      return Status::FailedPrecondition("'" + name + "' is drained (aryl nodes resume " + name + " first)");
    if (!it->second.serving) ids.push_back(it->second.server_id);
  }
  // A server with a serving side is lent once that side stopped (serving.cc,
  // protocol/serving.h S4); the others at once.
  ARYL_RETURN_IF_ERROR(Transaction("pool offer", [&]() -> Status {
    if (!ids.empty()) ARYL_RETURN_IF_ERROR(Feed(s::ServersLoaned{ids}, "pool offer"));
    for (const auto& name : names) {
      Node& n = nodes[name];
      n.loan_state = n.serving ? "lending" : "loaned";
      ARYL_RETURN_IF_ERROR(SaveNode(n));
      if (!n.serving) ARYL_RETURN_IF_ERROR(Journal(0, "loan", name, json::object(), {name}));
    }
    return Status::Ok();
  }));
  for (const auto& name : names)
    if (nodes[name].serving) {
      spdlog::info("lending {} once its serving side stopped", name);
      SendServing(nodes[name], true);
    }
  // A server offered again before its reclaim completed is no longer pending.
  for (const auto& name : names) {
    auto gone = std::remove_if(reclaims.begin(), reclaims.end(), [&](auto& pr) { return pr.node == name; });
    if (gone != reclaims.end()) ForgetReclaim(*store, name);
    reclaims.erase(gone, reclaims.end());
  }
  spdlog::info("loaned {} server(s) to training", names.size());
  return Status::Ok();
}

Status Daemon::Impl::ReclaimServers(int count, const std::vector<std::string>& names, double deadline_s) {
  std::vector<s::ServerId> ids;
  for (const auto& name : names) {
    auto it = nodes.find(name);
    if (it == nodes.end()) return Status::NotFound("no agent named '" + name + "'");
    if (it->second.loan_state != "loaned") return Status::FailedPrecondition("'" + name + "' is not loaned");
    ids.push_back(it->second.server_id);
  }
  // The deadline is when inference must be served again: training leaves by
  // that less the serving side's warm-up with its margin (ServingBudget; the
  // longest among the servers that may be taken).
  double warmup = 0, budget = 0;
  for (const auto& [id, n] : nodes)
    if (n.loan_state == "loaned" && (names.empty() || std::find(names.begin(), names.end(), id) != names.end())) {
      warmup = std::max(warmup, WarmupOf(n));
      budget = std::max(budget, ServingBudget(n));
    }
  const double leave_s = budget > 0 ? std::max(1.0, deadline_s - budget) : deadline_s;
  current_reclaim_deadline = leave_s;
  Status st = Transaction("pool reclaim", [&]() -> Status {
    ARYL_RETURN_IF_ERROR(Journal(0, "reclaim",
                                 std::to_string(names.empty() ? count : static_cast<int>(names.size())) +
                                     " server(s) within " + FormatDuration(deadline_s) +
                                     (warmup > 0 ? " (training leaves within " + FormatDuration(leave_s) +
                                                       ": serving warm-up " + FormatDuration(warmup) + ")"
                                                 : ""),
                                 {{"count", count}, {"deadline_seconds", deadline_s}, {"warmup_seconds", warmup},
                                  {"leave_seconds", leave_s}},
                                 names));
    return Feed(s::Reclaim{names.empty() ? count : 0, ids, CoreNow() + leave_s}, "pool reclaim");
  });
  current_reclaim_deadline = 120;
  return st;
}

Status Daemon::Impl::StartDemandSource() {
  if (!IsPrometheusDemand(opt.inference_demand)) return Status::Ok();
  ARYL_ASSIGN_OR_RETURN(auto spec, ParsePrometheusDemandSpec(opt.inference_demand));
  DemandControlConfig c;
  c.per_server = opt.demand_per_server;
  c.headroom = opt.demand_headroom;
  c.hysteresis = opt.demand_hysteresis;
  c.hold = opt.demand_hold;
  c.max_age = 3 * opt.demand_step + 10;  // a few missed polls, then hold still
  demand_control.emplace(c);
  spdlog::info("inference demand: {} on {}:{} every {} s, {} per server, headroom {}, hysteresis {}, hold {} s",
               spec.query, spec.host, spec.port, opt.demand_step, c.per_server, c.headroom, c.hysteresis, c.hold);
  demand_poller = std::make_unique<PrometheusDemandPoller>(spec, opt.demand_step, &metrics, clock);
  return Status::Ok();
}

// The demand source's latest sample through the controller (demand_control.h),
// then the offers and reclaims it decides.
void Daemon::Impl::DemandTick(double now) {
  if (opt.inference_demand.empty() || !core || now - last_demand_check < 0.5) return;
  last_demand_check = now;
  std::vector<std::string> inference;
  for (const auto& [id, n] : nodes)
    if (n.pool == p::Pool::kInference && n.connected) inference.push_back(id);
  std::optional<DemandSample> sample;
  if (demand_poller) {
    sample = demand_poller->Latest();
  } else {  // a replayed curve gives servers directly
    if (static_cast<int>(inference.size()) != demand_servers) {
      auto curve = sim::ParseDemand(opt.inference_demand, static_cast<int>(inference.size()), 1);
      if (!curve.ok()) {
        spdlog::error("--inference-demand: {}", curve.status().ToString());
        opt.inference_demand.clear();
        return;
      }
      demand = *curve;
      demand_servers = static_cast<int>(inference.size());
    }
    if (!demand_control) demand_control.emplace(DemandControlConfig{});
    // Ahead by the longest serving budget (the warm-up with the margin a
    // reclaim keeps back for it, ServingBudget): a server must be ready when
    // the demand arrives, not start then.
    double ahead = 0;
    for (const auto& id : inference) ahead = std::max(ahead, ServingBudget(nodes[id]));
    sample = DemandSample{now, static_cast<double>(demand->At((now - started_at) * opt.demand_time_scale + ahead))};
  }
  std::vector<std::string> offerable;
  int held = 0, loaned = 0;
  for (const auto& id : inference) {
    // A server being reclaimed counts as inference's already (its jobs left
    // to finish run out on it): no second reclaim for it, and no offer.
    const bool draining = Draining(nodes[id]);
    if ((nodes[id].loan_state == "loaned" || nodes[id].loan_state == "lending") && !draining) {
      loaned++;
      continue;
    }
    held++;
    // Only servers whose previous reclaim is complete, and not drained.
    if (!draining && !nodes[id].drained && std::none_of(reclaims.begin(), reclaims.end(), [&](auto& pr) { return pr.node == id; }))
      offerable.push_back(id);
  }
  InferencePool pool{static_cast<int>(inference.size()), held, static_cast<int>(offerable.size())};
  DemandDecision d = demand_control->Decide(now, sample, pool);
  if (d.required_up >= 0) metrics.Set("aryl_demand_required_servers", "", d.required_up);
  if (d.offer > 0) {
    offerable.resize(static_cast<std::size_t>(d.offer));
    Status st = Offer(offerable);
    if (!st.ok()) spdlog::warn("demand offer: {}", st.ToString());
    else metrics.Inc("aryl_demand_offers_total", "", d.offer);
  } else if (d.reclaim > 0 && loaned > 0) {
    int k = std::min(d.reclaim, loaned);
    Status st = ReclaimServers(k, {}, opt.demand_reclaim_deadline);
    if (!st.ok()) {
      spdlog::warn("demand reclaim: {}", st.ToString());
    } else {
      metrics.Inc("aryl_demand_reclaims_total", "", k);
      spdlog::info("inference demand needs {} server(s), {} held: reclaiming {} within {} s", d.required_up, held, k,
                   opt.demand_reclaim_deadline);
    }
  }
}

void Daemon::Impl::NoteDraining() {
  if (!core) return;
  const s::ClusterState& st = core->state();
  for (auto it = draining.begin(); it != draining.end();) {
    const s::ServerInfo* srv = st.server(it->first);
    it = srv && srv->draining() ? std::next(it) : draining.erase(it);
  }
  for (s::ServerId sid : st.draining()) {
    if (draining.count(sid)) continue;
    auto nit = registry.node_by_server().find(sid);
    if (nit == registry.node_by_server().end()) continue;
    const s::ServerInfo& srv = *st.server(sid);
    PendingReclaim pr{nit->second, WallNow(), epoch + srv.return_by};
    if (srv.reclaim_record >= 0 && srv.reclaim_record < static_cast<int>(st.reclaims().size()))
      pr.start = epoch + st.reclaims()[srv.reclaim_record].time;
    draining[sid] = pr;
  }
}

bool Daemon::Impl::Draining(const Node& n) const {
  if (!core) return false;
  const s::ServerInfo* srv = core->state().server(n.server_id);
  return srv && srv->draining();
}

// Reclaims: met when the server holds no worker; enforced at the deadline.
// A server whose agent was declared lost with workers on it is not empty
// before its agent registers again (and lists none) or its lease has run out.
// (A server the core drains is not returned yet: the core returns it, by the
// deadline, in the plan of the event that empties it or of a wakeup round.)
void Daemon::Impl::ReclaimTick(double now) {
  NoteDraining();
  for (auto it = reclaims.begin(); it != reclaims.end();) {
    if (it->serving_started) {  // empty; completes when its serving side is ready (serving.cc)
      ++it;
      continue;
    }
    // Busy: it holds workers of live jobs, or strays its agent listed, or it
    // was lost with workers that its lease may still let run.
    auto on = registry.workers_on().find(it->node);  // the node's workers only
    const auto nit = nodes.find(it->node);
    const bool has_workers = on != registry.workers_on().end() && !on->second.empty();
    const bool connected = nit != nodes.end() && nit->second.connected;
    const bool busy = has_workers || (nit != nodes.end() && !nit->second.strays.empty()) ||
                      (!connected && now < it->lost_until);
    if (!busy && nit != nodes.end() && nit->second.serving) {
      double latency = now - it->start;
      (void)Journal(0, "reclaimed", it->node + " empty after " + FormatDuration(latency) + "; its serving side starts",
                    {{"latency_seconds", latency}, {"serving", true}}, {it->node});
      spdlog::info("server {} empty after {:.2f} s: starting its serving side", it->node, latency);
      SendServing(nodes[it->node], false);
      it->serving_started = true;
      ++it;
      continue;
    }
    if (!busy) {
      double latency = now - it->start;
      metrics.Observe("aryl_reclaim_latency_seconds", latency);
      metrics.Observe("aryl_reclaim_slack_seconds", it->deadline - now);
      if (now > it->deadline) metrics.Inc("aryl_reclaims_late_total");
      (void)Journal(0, "reclaimed", it->node + " empty after " + FormatDuration(latency),
                    {{"latency_seconds", latency}}, {it->node});
      spdlog::info("server {} returned to inference after {:.2f} s", it->node, latency);
      ForgetReclaim(*store, it->node);
      it = reclaims.erase(it);
      continue;
    }
    // The deadline near: the workers still there are killed, and again every
    // kStrayKillEvery s while any is (a StopWorkers lost with a broken
    // connection must not cost the deadline; aryl-simtest --daemon's loss).
    // A node not connected (a restarted scheduler it has not registered with
    // yet) would not get it: the kill goes the tick it is back, not up to
    // kStrayKillEvery later (aryl-simtest --daemon --replay 590).
    // Strays are killed by Reconcile, again every kStrayKillEvery s.
    if (connected && has_workers && now > it->deadline - kReclaimEnforceSeconds &&
        (!it->forced || now - it->forced_at >= kStrayKillEvery)) {
      if (!it->forced) spdlog::warn("reclaim of {}: deadline near, killing the workers still there", it->node);
      std::map<p::JobId, std::vector<p::WorkerId>> by_job;
      for (const auto& [jid, wid] : on->second) by_job[jid].push_back(wid);
      for (auto& [jid, ids] : by_job) {
        p::StopWorkers sw;
        sw.job = jid;
        sw.workers = std::move(ids);
        sw.grace_seconds = 0;
        sw.reason = "reclaim deadline";
        Push(it->node, sw);
      }
      it->forced = true;
      it->forced_at = now;
    }
    ++it;
  }
}

}  // namespace aryl::daemon
