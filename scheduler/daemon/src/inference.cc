#include "daemon_impl.h"

namespace aryl::daemon {

Status Daemon::Impl::Offer(const std::vector<std::string>& names) {
  std::vector<s::ServerId> ids;
  for (const auto& name : names) {
    auto it = nodes.find(name);
    if (it == nodes.end()) return Status::NotFound("no agent named '" + name + "'");
    if (it->second.pool != p::Pool::kInference)
      return Status::InvalidArgument("'" + name + "' is a training server; only inference servers can be offered");
    if (it->second.loan_state == "loaned") return Status::FailedPrecondition("'" + name + "' is already loaned");
    if (!it->second.connected) return Status::Unavailable("'" + name + "' is not connected");
    ids.push_back(it->second.server_id);
  }
  ARYL_RETURN_IF_ERROR(Transaction("pool offer", [&]() -> Status {
    ARYL_RETURN_IF_ERROR(Feed(s::ServersLoaned{ids}, "pool offer"));
    for (const auto& name : names) {
      nodes[name].loan_state = "loaned";
      ARYL_RETURN_IF_ERROR(SaveNode(nodes[name]));
      ARYL_RETURN_IF_ERROR(store->AppendEvent(WallNow(), 0, "loan", name));
    }
    return Status::Ok();
  }));
  // A server offered again before its reclaim completed is no longer pending.
  for (const auto& name : names)
    reclaims.erase(std::remove_if(reclaims.begin(), reclaims.end(), [&](auto& pr) { return pr.node == name; }),
                   reclaims.end());
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
  current_reclaim_deadline = deadline_s;
  Status st = Transaction("pool reclaim", [&]() -> Status {
    ARYL_RETURN_IF_ERROR(store->AppendEvent(WallNow(), 0, "reclaim",
                                            std::to_string(names.empty() ? count : static_cast<int>(names.size())) +
                                                " server(s) within " + std::to_string(deadline_s) + " s"));
    return Feed(s::Reclaim{names.empty() ? count : 0, ids, CoreNow() + deadline_s}, "pool reclaim");
  });
  current_reclaim_deadline = 120;
  return st;
}

void Daemon::Impl::DemandTick(double now) {
  if (opt.inference_demand.empty() || !core || now - last_demand_check < 0.5) return;
  last_demand_check = now;
  std::vector<std::string> inference;
  for (const auto& [id, n] : nodes)
    if (n.pool == p::Pool::kInference && n.connected) inference.push_back(id);
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
  int need = demand->At((now - started_at) * opt.demand_time_scale);
  std::vector<std::string> held, loaned;
  for (const auto& id : inference) {
    if (nodes[id].loan_state == "loaned") loaned.push_back(id);
    else held.push_back(id);
  }
  int held_n = static_cast<int>(held.size());
  if (need < held_n) {
    std::vector<std::string> offer(held.begin(), held.begin() + (held_n - need));
    // Only servers whose previous reclaim is complete.
    offer.erase(std::remove_if(offer.begin(), offer.end(), [&](const std::string& n) {
                  return std::any_of(reclaims.begin(), reclaims.end(), [&](auto& pr) { return pr.node == n; });
                }), offer.end());
    if (!offer.empty()) {
      Status st = Offer(offer);
      if (!st.ok()) spdlog::warn("demand offer: {}", st.ToString());
    }
  } else if (need > held_n && !loaned.empty()) {
    int k = std::min(need - held_n, static_cast<int>(loaned.size()));
    Status st = ReclaimServers(k, {}, demand_reclaim_deadline);
    if (!st.ok()) spdlog::warn("demand reclaim: {}", st.ToString());
    else spdlog::info("inference demand {} > {} held: reclaiming {}", need, held_n, k);
  }
}

// Reclaims: met when the server holds no worker; enforced at the deadline.
void Daemon::Impl::ReclaimTick(double now) {
  for (auto it = reclaims.begin(); it != reclaims.end();) {
    bool busy = false;
    for (auto& [jid, j] : jobs)
      for (auto& [wid, w] : j.workers)
        if (w.agent == it->node) busy = true;
    if (!busy) {
      double latency = now - it->start;
      metrics.Observe("aryl_reclaim_latency_seconds", latency);
      if (now > it->deadline) metrics.Inc("aryl_reclaims_late_total");
      (void)store->AppendEvent(now, 0, "reclaimed", it->node + " empty after " + std::to_string(latency) + " s");
      spdlog::info("server {} returned to inference after {:.2f} s", it->node, latency);
      it = reclaims.erase(it);
      continue;
    }
    if (!it->forced && now > it->deadline - 1.0) {
      spdlog::warn("reclaim of {}: deadline near, killing the workers still there", it->node);
      for (auto& [jid, j] : jobs) {
        std::vector<p::WorkerId> ids;
        for (auto& [wid, w] : j.workers)
          if (w.agent == it->node) ids.push_back(wid);
        if (ids.empty()) continue;
        p::StopWorkers sw;
        sw.job = jid;
        sw.workers = ids;
        sw.grace_seconds = 0;
        sw.reason = "reclaim deadline";
        Push(it->node, sw);
      }
      it->forced = true;
    }
    ++it;
  }
}

}  // namespace aryl::daemon
