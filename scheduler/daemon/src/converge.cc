// Converge: from the core's placement of a job to the workers that run it.
// What to do is PlanConverge's answer (converger.h: who stays, leaves and
// joins, the forming rule, the lease wait); here it is carried out: the
// generation's NewGeneration and StartWorkers messages, restarts (stop every
// worker, start again) and stops.
// Declared in daemon_impl.h ("converge.cc").
#include <algorithm>

#include "aryl/hash.h"
#include "core_journal.h"
#include "daemon_impl.h"

namespace aryl::daemon {

// Slots not held by a worker that stays. A leaver's slot counts as free: the
// core gave it away with the plan, and the leaver goes at its next step
// boundary (or is stopped), so the joiner shares it only briefly.
bool Daemon::Impl::Fits(const Job& j, const std::map<std::string, int>& desired) {
  const std::map<std::string, int> live = j.LivePlacement();
  for (const auto& [node, want] : desired) {
    auto nit = nodes.find(node);
    if (nit == nodes.end()) return false;
    auto own = live.find(node);
    const int have = own == live.end() ? 0 : own->second;
    if (static_cast<int>(FreeSlots(nit->second).size()) + have < want) return false;
  }
  return true;
}

std::set<int> Daemon::Impl::FreeSlots(const Node& n) {
  std::set<int> used;
  auto on = registry.workers_on().find(n.id);
  if (on != registry.workers_on().end()) {
    for (const auto& [jid, wid] : on->second) {
      const Worker& w = jobs.at(jid).workers.at(wid);
      if (!w.leaving) used.insert(w.slot);
    }
  }
  std::set<int> free;
  for (int i = 0; i < n.slots; ++i)
    if (!used.count(i)) free.insert(i);
  return free;
}

// The daemon's own indexes of the live jobs (lease_waits,
// master_ports), after the table was loaded again.
void Daemon::Impl::IndexWaits() {
  lease_waits.clear();
  master_ports.Clear();
  for (const auto& [jid, j] : jobs) {
    for (const auto& [node, until] : j.lease.until) lease_waits[node].insert(jid);
    if (j.master_port > 0) master_ports.Add(j.master_host, j.master_port, jid);
  }
}

std::vector<p::WorkerId> Daemon::Impl::MarkLeavers(Job& j,
                                                   const std::map<std::string, int>& desired) {
  std::map<std::int64_t, ConvergeWorker> view;
  for (const auto& [id, w] : j.workers) view[id] = ConvergeWorkerOf(w);
  std::vector<p::WorkerId> leavers = PickLeavers(view, desired);
  for (p::WorkerId id : leavers) j.workers.at(id).leaving = true;
  return leavers;
}

ConvergeWorker Daemon::Impl::ConvergeWorkerOf(const Worker& w) {
  return {w.id, w.agent, w.rank, w.slot, w.generation, w.joined, w.leaving};
}

ConvergeInput Daemon::Impl::ConvergeInputOf(const Job& j,
                                            const std::map<std::string, int>& desired) const {
  ConvergeInput in;
  in.life = &j.life;
  for (const auto& [id, w] : j.workers) in.workers[id] = ConvergeWorkerOf(w);
  in.desired = desired;
  for (const auto& [node, want] : desired) {
    auto nit = nodes.find(node);
    if (nit == nodes.end()) continue;
    ConvergeNode& cn = in.nodes[node];
    cn.slots = nit->second.slots;
    cn.training = nit->second.pool == p::Pool::kTraining;
    auto on = registry.workers_on().find(node);
    if (on == registry.workers_on().end()) continue;
    for (const auto& [jid, wid] : on->second) {
      if (jid == j.rec.id) continue;
      const Worker& w = jobs.at(jid).workers.at(wid);
      if (!w.leaving) cn.used_by_others.insert(w.slot);
    }
  }
  in.in_place = j.runtime && !j.RestartsToResize();
  in.last_loss_time = j.last_loss_time;
  in.restart_not_before = j.lease.NotBefore();
  // A stray of the job still runs (agents.cc, Reconcile): no fresh start
  // until its agent has killed it; asked again a second later.
  if (!j.stray_nodes.empty()) in.restart_not_before = std::max(in.restart_not_before, WallNow() + 1.0);
  in.members_announced = j.members_announced;
  in.generation = j.generation;
  in.next_worker = j.next_worker;
  in.now = WallNow();
  in.forming_timeout = kFormingSeconds;
  return in;
}

// This start's MASTER_PORT: in --port-range, from a start salted by the
// scheduler's endpoint, the job and its start count (two clusters on one
// machine, and a job's consecutive starts, try different ports first); never a
// port another live job of this scheduler holds on the same host
// (master_ports.h); on a loopback master, never one something on this
// machine listens on now.
int Daemon::Impl::PickMasterPort(Job& j, const std::string& master_host) {
  const bool local = master_host == "localhost" || master_host.rfind("127.", 0) == 0;
  std::uint64_t salt = Fnv1a64(port ? port->endpoint() : opt.endpoint);
  salt ^= j.rec.id * 0x9E3779B97F4A7C15ull ^ std::uint64_t(j.starts) * 0xC2B2AE3D27D4EB4Full;
  auto holds = [&](p::JobId other, const std::string& host, int port) {
    auto it = jobs.find(other);
    return it != jobs.end() && it->second.master_port == port && it->second.master_host == host &&
           !it->second.workers.empty();
  };
  std::function<bool(int)> busy;
  if (local) busy = [](int port) { return !PortBindable(port); };
  j.master_host = master_host;
  if (auto port = master_ports.Pick(ports, salt, j.rec.id, master_host, holds, busy)) return *port;
  spdlog::warn("job {}: every port of --port-range {} is taken on {}; MASTER_PORT {} may be in use",
               j.rec.id, ports.ToString(), master_host, ports.lo);
  return ports.lo;
}

// Makes the job's live workers match `desired` (node -> count) as
// PlanConverge (converger.h) says: starts joiners where there are too few,
// marks leavers where there are too many, and announces the new generation to
// every agent involved; or waits, or restarts the group.
Status Daemon::Impl::Converge(Job& j, const std::map<std::string, int> desired,
                              const std::string& reason) {
  const ConvergeResult plan = PlanConverge(ConvergeInputOf(j, desired));
  if (plan.again) pending_converge.insert(j.rec.id);
  if (!plan.abandoned.empty()) StopUnformed(j, plan.abandoned);
  for (const auto& [node, missing] : plan.short_nodes)
    spdlog::error(
        "job {}: {} is {} slot(s) short of the workers placed there; the scheduler's view and the "
        "agent disagree",
        j.rec.id, node, missing);
  switch (plan.step) {
    case ConvergeStep::kNone:
    case ConvergeStep::kWaitForming:
    case ConvergeStep::kPending:
      return Status::Ok();
    case ConvergeStep::kLeaseWait: {
      if (j.life.Is(JobPhase::kLeaseWait)) return Status::Ok();
      Phase(j, j.life.LeaseWait(WallNow()), "lease wait");
      const double left = plan.lease_left;
      const std::string lease_node = j.lease.LastNode();
      if (!j.stray_nodes.empty() && j.lease.NotBefore() <= WallNow()) {
        const std::string& node = *j.stray_nodes.begin();
        spdlog::warn("job {}: starts again once {} has stopped its old workers", j.rec.id, node);
        return Journal(j.rec.id, "lease_wait", "starts again once " + node + " has stopped its old workers",
                       {{"node", node}}, {node});
      }
      spdlog::warn(
          "job {}: starts again in {:.1f} s, once the lease of {} has run out (its workers may "
          "still run there)",
          j.rec.id, left, lease_node);
      ARYL_RETURN_IF_ERROR(Journal(j.rec.id, "lease_wait",
                                   "starts again once the lease of " + lease_node +
                                       " has run out (" +
                                       std::to_string(static_cast<int>(std::ceil(left))) + " s)",
                                   {{"node", lease_node}, {"seconds", left}}, {lease_node}));
      Notify(j, p::JobState::kResizing,
             "waiting " + std::to_string(static_cast<int>(std::ceil(left))) +
                 " s for the lease of " + lease_node + " to run out");
      return Status::Ok();
    }
    case ConvergeStep::kRestart:
      return Restart(j, "a fresh group starts once the old workers are gone", plan.restart_planned);
    case ConvergeStep::kGeneration:
      return StartGeneration(j, plan, reason);
  }
  return Status::Ok();
}

// Carries out a new generation (ConvergeStep::kGeneration): the leavers and
// joiners it names, the ranks, and the NewGeneration / StartWorkers messages.
Status Daemon::Impl::StartGeneration(Job& j, const ConvergeResult& plan,
                                     const std::string& reason) {
  const bool fresh = plan.fresh;
  const std::vector<p::WorkerId>& leavers = plan.leavers;
  for (p::WorkerId id : leavers) j.workers.at(id).leaving = true;
  std::set<std::string> existing_agents;
  for (const auto& [id, w] : j.workers) existing_agents.insert(w.agent);
  std::map<std::string, std::vector<p::WorkerPlacement>> joiners;
  for (const auto& jn : plan.joiners) {
    Worker w;
    w.id = jn.id;
    w.agent = jn.node;
    w.slot = jn.slot;
    w.joined = plan.generation;
    w.start_watch = registry.watch_now();
    // Raised as its start goes out (SendNow); this one stands for a start never sent.
    if (auto nit = nodes.find(jn.node); nit != nodes.end()) w.start_floor = nit->second.acked_seq;
    joiners[jn.node].push_back({w.id, 0, w.slot});
    table.AddWorker(j, w);
  }
  j.next_worker = plan.next_worker;
  j.generation = plan.generation;
  const std::vector<p::WorkerId>& members = plan.members;
  j.members_announced = members.size();
  for (size_t r = 0; r < members.size(); ++r) {
    auto& w = j.workers.at(members[r]);
    w.rank = static_cast<int>(r);
    w.generation = j.generation;
  }
  for (auto& [node, list] : joiners)
    for (auto& wp : list) wp.rank = j.workers.at(wp.worker).rank;

  if (fresh) {
    j.starts++;
    if (j.Restarting() && j.restart_stopped_at > 0) {
      j.restart_generation = j.generation;
      j.restart_to = static_cast<std::int64_t>(members.size());
    }
    Phase(j, j.life.Started(j.generation, WallNow()), "start");
    j.last_start = WallNow();
    if (j.rec.start_time <= 0)
      j.rec.start_time = j.last_start;  // the first start, kept (describe's "Started")
  } else {
    Phase(j, j.life.Resized(j.generation, WallNow()), "resize");
  }
  std::string master_node = members.empty() ? "" : j.workers[members[0]].agent;
  std::string master_host = nodes.count(master_node) ? nodes[master_node].host : "127.0.0.1";
  if (fresh || j.master_port == 0) j.master_port = PickMasterPort(j, master_host);
  const int master_port = j.master_port;
  // Every agent hosting stayers or leavers learns the new generation; the
  // agent relays it to its workers and makes leavers go at the switch.
  std::map<std::string, std::vector<p::WorkerId>> leaving_by_agent;
  for (auto id : leavers) leaving_by_agent[j.workers[id].agent].push_back(id);
  if (fresh) {
    // The agent of rank 0 hosts this start's rendezvous (when it has a store).
    j.home_store = nodes.count(master_node) && !nodes[master_node].store_endpoint.empty()
                       ? nodes[master_node].store_endpoint
                       : "none";
  }
  std::string store_ep = j.home_store;
  std::string store_key = std::to_string(j.rec.id) + "-" + std::to_string(j.starts);
  if (!fresh && store_ep != "none") {
    for (const auto& [id, n] : nodes)
      if (n.store_endpoint == store_ep && n.connected) existing_agents.insert(id);
  }
  if (!fresh) {
    for (const auto& agent : existing_agents) {
      p::NewGeneration ng;
      ng.job = j.rec.id;
      ng.generation = j.generation;
      ng.members = members;
      ng.leaving =
          leaving_by_agent.count(agent) ? leaving_by_agent[agent] : std::vector<p::WorkerId>{};
      ng.store_endpoint = store_ep;
      ng.store_prefix = store_key;
      if (members.empty()) {
        p::StopWorkers sw;
        sw.job = j.rec.id;
        sw.workers = ng.leaving;
        sw.grace_seconds = StopGraceOn(j, agent);
        sw.reason = reason;
        Push(agent, sw);
      } else {
        Push(agent, ng);
      }
    }
  }
  for (const auto& [agent, list] : joiners) {
    p::StartWorkers sw;
    sw.job = j.rec.id;
    sw.generation = j.generation;
    sw.workers = list;
    sw.members = members;
    sw.argv = j.spec.argv;
    sw.env = j.spec.env;
    sw.env["ARYL_JOB_ID"] = store_key;
    sw.env["ARYL_MIN_WORKERS"] =
        std::to_string(j.spec.min_workers.value_or(j.spec.workers.value_or(1)));
    sw.env["ARYL_MAX_WORKERS"] =
        std::to_string(j.spec.max_workers.value_or(j.spec.workers.value_or(1)));
    sw.env["ARYL_MASTER_ADDR"] = master_host;
    sw.env["ARYL_MASTER_PORT"] = std::to_string(master_port);
    sw.env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(j.spec.max_restarts.value_or(0));
    // The checkpoint fence's owner (runtime/include/aryl/checkpoint.h): the
    // same for every start of this job, different from any other job's, even
    // one of another state file that reuses the number.
    sw.env["ARYL_FENCE_ID"] = std::to_string(j.rec.id) + "." +
                              std::to_string(static_cast<std::int64_t>(j.rec.submit_time * 1000));
    // The runtime reports the steps left from it (Runtime::SetTotalSteps).
    if (j.spec.total_work > 0)
      sw.env["ARYL_TOTAL_STEPS"] =
          std::to_string(static_cast<std::int64_t>(std::ceil(j.spec.total_work)));
    sw.cwd = j.spec.cwd;
    sw.checkpoint_dir = j.spec.checkpoint_dir;
    sw.store_endpoint = store_ep;
    sw.store_prefix = store_key;
    sw.owner = j.spec.owner.value_or("local");
    sw.owner_uid = j.spec.owner_uid;
    sw.restart_count = j.starts - 1;
    Push(agent, sw);  // its ack_floor stamped as it goes out (SendNow)
  }
  int size = static_cast<int>(members.size());
  j.rec.state = size > 0 ? JobState::kRunning : j.rec.state;
  j.rec.message = reason;
  std::string kind = fresh ? "start" : "resize";
  std::map<std::string, int> placed;
  for (auto id : members) placed[j.workers[id].agent]++;
  ARYL_RETURN_IF_ERROR(JournalPlacement(j, kind, members, reason));
  Notify(j, fresh ? p::JobState::kRunning : p::JobState::kResizing,
         kind + " to " + std::to_string(size) + (size == 1 ? " worker on " : " workers on ") +
             PlacementString(placed) + ": " + reason);
  spdlog::info("job {} {}: generation {} on {} ({})", j.rec.id, kind, j.generation,
               PlacementString(placed), reason);
  return SaveJob(j);
}

// Restart elasticity: stops every worker of the job (SIGTERM, then SIGKILL
// after the grace period); when the last is gone, ConvergeTick starts the
// group again at the core's placement, with fresh torchrun variables and
// TORCHELASTIC_RESTART_COUNT one higher. Exits meanwhile are planned
// (ClassifyExit). A restart asked for while one is under way joins it.
Status Daemon::Impl::Restart(Job& j, const std::string& reason, bool planned) {
  if (j.workers.empty()) {
    pending_converge.insert(j.rec.id);
    return Status::Ok();
  }
  if (!j.Restarting()) {
    Phase(j, j.life.RestartBegun(WallNow()), "restart");
    j.restart_stopped_at = WallNow();
    j.restart_from = static_cast<std::int64_t>(j.workers.size());
    j.restart_to = j.restart_generation = 0;
    j.restart_planned = planned;
    StopJobWorkers(j, false, "restart: " + reason);
    ARYL_RETURN_IF_ERROR(Journal(j.rec.id, "restart", reason,
                                 {{"workers", j.workers.size()}, {"planned", planned}},
                                 JobNodes(j)));
    Notify(j, p::JobState::kResizing, "restarting all workers: " + reason);
    spdlog::info("job {}: stopping all {} workers to restart them ({})", j.rec.id, j.workers.size(),
                 reason);
  }
  return SaveJob(j);
}

double Daemon::Impl::StopGraceOn(const Job& j, const std::string& agent) const {
  double grace = j.StopGrace(opt.stop_grace);
  const double now = WallNow();
  for (const auto& pr : reclaims)
    if (pr.node == agent && !pr.forced)
      grace = std::min(
          grace, std::max(kReclaimEnforceSeconds, pr.deadline - kReclaimEnforceSeconds - now));
  return grace;
}

void Daemon::Impl::StopJobWorkers(Job& j, bool checkpoint_first, const std::string& reason,
                                  double grace) {
  std::map<std::string, std::vector<p::WorkerId>> by_agent;
  for (auto& [id, w] : j.workers) {
    w.leaving = true;
    by_agent[w.agent].push_back(id);
  }
  for (const auto& [agent, ids] : by_agent) {
    p::StopWorkers sw;
    sw.job = j.rec.id;
    sw.workers = ids;
    sw.grace_seconds = grace < 0 ? StopGraceOn(j, agent) : grace;
    sw.checkpoint_first = checkpoint_first;
    sw.reason = reason;
    Push(agent, sw);
  }
}

}  // namespace aryl::daemon
