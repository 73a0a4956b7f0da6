#include "aryl/duration.h"
#include "daemon_impl.h"

namespace aryl::daemon {

const p::SubmitJob* Daemon::Impl::SpecOf(const JobRecord& rec, const Job* live, std::optional<p::SubmitJob>& stored) {
  if (live) return &live->spec;  // decoded already
  auto decoded = p::DecodeAs<p::SubmitJob>(rec.spec_json);
  if (!decoded.ok()) return nullptr;
  stored = std::move(*decoded);
  return &*stored;
}

std::map<std::string, std::set<int>> Daemon::Impl::SlotsInUse() const {
  std::map<std::string, std::set<int>> used;
  for (const auto& [jid, j] : jobs)
    for (const auto& [wid, w] : j.workers)
      if (!w.leaving) used[w.agent].insert(w.slot);
  return used;
}

p::JobRow Daemon::Impl::Row(const JobRecord& rec, const Job* live) {
  p::JobRow r;
  r.job = rec.id;
  r.name = rec.name;
  std::optional<p::SubmitJob> stored;
  if (const p::SubmitJob* spec = SpecOf(rec, live, stored)) {
    r.min_workers = spec->workers.value_or(spec->min_workers.value_or(1));
    r.max_workers = spec->workers.value_or(spec->max_workers.value_or(1));
    r.gpu_type = spec->gpu_type;
    r.owner = spec->owner.value_or("local");
  }
  r.submit_time = std::max(0.0, rec.submit_time);
  r.generation = static_cast<std::int64_t>(rec.generation);
  switch (rec.state) {
    case JobState::kQueued: r.state = p::JobState::kQueued; break;
    case JobState::kRunning: r.state = p::JobState::kRunning; break;
    case JobState::kFinished: r.state = p::JobState::kCompleted; break;
    case JobState::kFailed: r.state = p::JobState::kFailed; break;
    case JobState::kCancelled: r.state = p::JobState::kCancelled; break;
  }
  if (!live) {
    try {
      r.rescales = json::parse(rec.workers_json).value("rescales", std::int64_t{0});
    } catch (const std::exception&) {
    }
  }
  if (live) {
    for (const auto& [id, w] : live->workers)
      if (!w.leaving) r.workers++;
    r.step = live->step;
    r.steps_per_second = r.workers > 0 ? live->rate : 0;  // a queued job's last rate is not its rate
    r.rescales = live->rescales;
    r.generation = live->generation;
    if (rec.state == JobState::kQueued && !live->workers.empty()) r.state = p::JobState::kPreempted;
  }
  return r;
}

std::string Daemon::Impl::PendingReason(const Job& j) const {
  const auto& spec = j.spec;
  const int need = static_cast<int>(spec.workers.value_or(spec.min_workers.value_or(1)));
  const std::string type = spec.gpu_type.empty() ? "" : " of type " + spec.gpu_type;
  const std::string workers = std::to_string(need) + (need == 1 ? " worker" : " workers");
  if (WallNow() < j.restart_not_before)
    return "waiting for node " + j.lease_node + "'s lease to run out (its agent may still run this job's workers) until " +
           FormatDuration(j.restart_not_before - WallNow()) + " from now";
  // Slots a training job may use: training nodes and loaned inference nodes.
  const auto used = SlotsInUse();
  int usable = 0, free = 0;
  for (const auto& [id, n] : nodes) {
    if (!n.connected || n.drained || n.removed) continue;
    if (n.pool != p::Pool::kTraining && n.loan_state != "loaned") continue;
    if (!spec.gpu_type.empty() && n.gpu_type != spec.gpu_type) continue;
    usable += n.slots;
    auto u = used.find(n.id);
    free += std::max(0, n.slots - (u == used.end() ? 0 : static_cast<int>(u->second.size())));
  }
  if (usable == 0) return "no connected training node" + type;
  if (usable < need)
    return "needs " + workers + type + "; the connected training nodes have " +
           std::to_string(usable) + " slots";
  int ahead = 0;
  for (const auto& [id, other] : jobs)
    ahead += id < j.rec.id && other.rec.state == JobState::kQueued && other.workers.empty();
  if (free < need)
    return "waiting for capacity: needs " + workers + type + ", " + std::to_string(free) +
           " of " + std::to_string(usable) + " slots free; " + std::to_string(ahead) + " queued before it";
  return "waiting for the scheduler's next round (" + std::to_string(free) + " slots free" + type + "; " +
         std::to_string(ahead) + " queued before it)";
}

std::vector<p::NodeRow> Daemon::Impl::NodeRows() {
  const auto used = SlotsInUse();
  std::vector<p::NodeRow> rows;
  for (const auto& [id, n] : nodes) {
    if (n.removed) continue;
    p::NodeRow r;
    r.agent_id = n.id;
    r.host = n.host;
    r.pool = n.pool;
    r.gpu_type = n.gpu_type;
    r.slots = n.slots;
    auto u = used.find(n.id);
    r.used_slots = u == used.end() ? 0 : static_cast<int>(u->second.size());
    r.connected = n.connected;
    r.last_heartbeat_age = n.last_heartbeat > 0 ? std::max(0.0, WallNow() - n.last_heartbeat) : 0;
    if (!n.connected) r.state = p::NodeState::kDisconnected;
    else if (n.drained) r.state = r.used_slots > 0 ? p::NodeState::kDraining : p::NodeState::kDrained;
    else if (n.loan_state == "loaned") r.state = Draining(n) ? p::NodeState::kReclaiming : p::NodeState::kLoaned;
    else if (n.loan_state == "held") {
      bool reclaiming = std::any_of(reclaims.begin(), reclaims.end(), [&](auto& pr) { return pr.node == n.id; });
      r.state = reclaiming ? p::NodeState::kReclaiming : p::NodeState::kHeld;
    } else r.state = p::NodeState::kAvailable;
    rows.push_back(r);
  }
  return rows;
}

json Daemon::Impl::Summary() {
  json j;
  j["epoch"] = scheduler_epoch;
  j["policy"] = opt.policy;
  j["uptime_seconds"] = WallNow() - started_at;
  j["state"] = store->location();
  if (leadership) j["ha"] = json::parse(leadership->StatusJson());
  json pools = json::object();
  int loaned = 0;
  for (const auto& row : NodeRows()) {
    std::string pool(p::ToString(row.pool));
    auto& pj = pools[pool];
    if (pj.is_null()) pj = json::object();
    pj["servers"] = pj.value("servers", 0) + 1;
    pj["slots"] = pj.value("slots", 0) + row.slots;
    pj["used_slots"] = pj.value("used_slots", 0) + row.used_slots;
    if (row.state == p::NodeState::kLoaned) {
      loaned++;
      pj["loaned_servers"] = pj.value("loaned_servers", 0) + 1;
      pj["loaned_slots"] = pj.value("loaned_slots", 0) + row.slots;
    }
    if (row.connected) pj["connected"] = pj.value("connected", 0) + 1;
  }
  j["pools"] = pools;
  j["loaned_servers"] = loaned;
  json counts = json::object();
  json jobs_arr = json::array();
  for (const auto& [id, job] : jobs) {
    auto row = Row(job.rec, &job);
    std::string st(p::ToString(row.state));
    counts[st] = counts.value(st, 0) + 1;
    if (opt.status_max_jobs > 0 && jobs_arr.size() >= static_cast<std::size_t>(opt.status_max_jobs)) continue;
    jobs_arr.push_back({{"job", id}, {"name", row.name}, {"state", st}, {"workers", row.workers},
                        {"min", row.min_workers}, {"max", row.max_workers}, {"step", row.step},
                        {"loss", job.loss}, {"steps_per_second", row.steps_per_second},
                        {"rescales", row.rescales}, {"generation", row.generation}});
  }
  j["jobs_by_state"] = counts;
  // Bounded (--status-max-jobs): the lowest ids; `aryl jobs` pages through all.
  if (jobs_arr.size() < jobs.size()) j["jobs_truncated"] = jobs.size() - jobs_arr.size();
  j["jobs_total"] = jobs.size();
  j["jobs"] = jobs_arr;
  j["rescales"] = metrics.Value("aryl_rescales_total");
  j["preemptions"] = metrics.Value("aryl_preemptions_total");
  j["reclaims"] = metrics.Value("aryl_reclaims_total");
  j["reclaims_late"] = metrics.Value("aryl_reclaims_late_total");
  auto round = metrics.Histogram("aryl_round_seconds");
  j["rounds"] = {{"count", round.count}, {"max_seconds", round.max},
                 {"mean_seconds", round.count ? round.sum / round.count : 0.0}};
  auto lat = metrics.Histogram("aryl_reclaim_latency_seconds");
  j["reclaim_latency"] = {{"count", lat.count}, {"max_seconds", lat.max}};
  j["pending_reclaims"] = reclaims.size() + draining.size();
  return j;
}

void Daemon::Impl::PublishSnapshot() {
  auto t0 = std::chrono::steady_clock::now();
  snapshot_dirty = false;
  json j = Summary();
  // Gauges.
  metrics.ClearGauge("aryl_jobs");
  for (auto& [state, n] : j["jobs_by_state"].items()) metrics.Set("aryl_jobs", "state=\"" + state + "\"", n.get<double>());
  metrics.ClearGauge("aryl_gpus");
  for (auto& [pool, pj] : j["pools"].items()) {
    int used = pj.value("used_slots", 0), total = pj.value("slots", 0);
    metrics.Set("aryl_gpus", "pool=\"" + pool + "\",use=\"used\"", used);
    metrics.Set("aryl_gpus", "pool=\"" + pool + "\",use=\"free\"", total - used);
  }
  metrics.Set("aryl_loaned_servers", "", j["loaned_servers"].get<double>());
  int connected = 0;
  for (const auto& [id, n] : nodes) connected += n.connected;
  metrics.Set("aryl_nodes_connected", "", connected);
  PublishClusterSeries();
  std::string text = j.dump(2);
  {
    std::lock_guard lock(snapshot_mu);
    status_snapshot = std::move(text);
  }
  publish_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Daemon::Impl::PublishClusterSeries() {
  if (!cluster_series) return;
  ClusterSnapshot s;
  s.jobs.reserve(jobs.size());
  for (const auto& [id, j] : jobs) {
    JobSeries js{id, j.rec.name, 0, j.rate, j.last_resize_pause, j.preemptions, j.rescales, j.measured_rate,
                 PredictedRate(j)};
    for (const auto& [wid, w] : j.workers) js.workers += !w.leaving;
    if (js.workers == 0) js.steps_per_second = js.measured_steps_per_second = 0;
    s.jobs.push_back(std::move(js));
  }
  for (const auto& row : NodeRows())
    s.nodes.push_back({row.agent_id, std::string(p::ToString(row.pool)), std::string(p::ToString(row.state)), row.slots,
                       row.used_slots, nodes[row.agent_id].loan_state == "loaned"});
  double now = WallNow();
  auto pending = [&](const PendingReclaim& pr) {
    auto n = nodes.find(pr.node);
    s.reclaims.push_back({pr.node, n == nodes.end() ? "inference" : std::string(p::ToString(n->second.pool)),
                          pr.deadline - now});
  };
  for (const auto& pr : reclaims) pending(pr);
  for (const auto& [sid, pr] : draining) pending(pr);
  cluster_series->Publish(s);
}

}  // namespace aryl::daemon
