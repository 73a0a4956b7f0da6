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
    r.queue = QueueOf(*spec);
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

namespace {

std::string Plural(int n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); }

}  // namespace

std::vector<std::string> Daemon::Impl::PendingReasons(const std::vector<const Job*>& waiting) const {
  std::vector<std::string> out(waiting.size());
  std::vector<s::JobId> ids;
  ids.reserve(waiting.size());
  for (const Job* j : waiting) ids.push_back(j->rec.id);
  const std::vector<s::PendingReason> why = core ? core->WhyPending(ids) : std::vector<s::PendingReason>(ids.size());
  // The nodes of `type` a job cannot use now, and why ("node-2 drained"), for
  // the causes that wait for nodes to come back.
  auto out_of_service = [&](const std::string& type) {
    std::string list;
    int listed = 0, more = 0;
    for (const auto& [id, n] : nodes) {
      if (n.removed || (!type.empty() && n.gpu_type != type)) continue;
      const char* why_not = nullptr;
      if (!n.connected) why_not = "disconnected";
      else if (n.drained) why_not = "drained";
      else if (Draining(n)) why_not = "being reclaimed";
      else if (n.pool != p::Pool::kTraining && n.loan_state != "loaned") why_not = "held by inference";
      else continue;  // in service
      if (listed++ < 3) list += (list.empty() ? "" : ", ") + id + " " + why_not;
      else ++more;
    }
    if (more > 0) list += ", " + std::to_string(more) + " more";
    return list;
  };
  for (size_t k = 0; k < waiting.size(); ++k) {
    const Job& j = *waiting[k];
    const double now = WallNow();
    if (now < j.lease.NotBefore()) {
      out[k] = "LeaseWait: starts again once the lease of node " + j.lease.LastNode() + " has run out, " +
               FormatDuration(j.lease.NotBefore() - now) + " from now (its agent may still run this job's workers)";
      continue;
    }
    const s::JobInfo* info = core ? core->state().job(j.rec.id) : nullptr;
    if (info && info->status == s::JobStatus::kRunning) {
      out[k] = "Starting: placed on " + std::to_string(info->workers) + " slots; its workers are being started";
      continue;
    }
    const s::PendingReason& r = why[k];
    const std::string need = Plural(r.need, "worker", "workers") + " at once";
    const int min = static_cast<int>(j.spec.workers.value_or(j.spec.min_workers.value_or(1)));
    const std::string smallest = r.need > min ? " (its smallest allowed size)" : "";
    // "cpu 2 of 4 slots, t4 0 of 2 slots": per type, `count` of the slots there.
    auto per_type = [&](bool fitting_only, auto count) {
      std::string text;
      for (const auto& t : r.types) {
        if (fitting_only && !t.fits_size) continue;
        text += (text.empty() ? "" : ", ") + t.gpu_type + " " + count(t);
      }
      return text;
    };
    auto in_paren = [](const std::string& s) { return s.empty() ? s : " (" + s + ")"; };
    switch (r.cause) {
      case s::PendingCause::kNone: break;
      case s::PendingCause::kNoServer:
        out[k] = j.spec.gpu_type.empty()
                     ? "NoNode: no node is in service" + in_paren(out_of_service(""))
                     : "GpuType: no node of GPU type " + j.spec.gpu_type + " is in service" +
                           in_paren(out_of_service(j.spec.gpu_type));
        break;
      case s::PendingCause::kMinSize:
        out[k] = "MinSize: needs " + need + smallest + (r.types.size() > 1 ? " on one GPU type" : "") +
                 ", more than are in service: " +
                 per_type(false, [](const s::PendingType& t) {
                   return std::to_string(t.in_service) + " of " + Plural(t.gpus, "slot", "slots");
                 }) +
                 in_paren(out_of_service(r.types.size() == 1 ? r.types[0].gpu_type : ""));
        break;
      case s::PendingCause::kQuota:
        out[k] = "Quota: needs " + need + smallest + "; queue " + r.queue + " holds " +
                 std::to_string(r.quota_used) + " of its " + std::to_string(r.quota) + " " + r.quota_type +
                 " quota and may borrow no more now (its borrowing limit, or its cohort has none to lend); " +
                 "it starts when its queue's jobs end or other queues leave quota unused (aryl queues)";
        break;
      case s::PendingCause::kGang: {
        int free = 0;
        for (const auto& t : r.types) free += t.free + t.flexible;
        out[k] = "Gang: needs " + need + smallest + " on one GPU type; " + Plural(free, "slot is", "slots are") +
                 " free, but not of one type (" +
                 per_type(false, [](const s::PendingType& t) { return std::to_string(t.free + t.flexible); }) + ")";
        break;
      }
      case s::PendingCause::kCapacity:
      case s::PendingCause::kPriority: {
        int flexible = 0;
        for (const auto& t : r.types) flexible += t.fits_size ? t.flexible : 0;
        const std::string free =
            per_type(true, [](const s::PendingType& t) {
              return std::to_string(t.free) + " of " + Plural(t.in_service, "slot", "slots") + " free";
            }) +
            (flexible > 0 ? ", " + std::to_string(flexible) + " more held by elastic jobs above their minimum" : "");
        const std::string ahead = r.ahead > 0 ? Plural(r.ahead, "queued job", "queued jobs") + " ahead of it" : "";
        if (r.cause == s::PendingCause::kCapacity)
          out[k] = "Capacity: needs " + need + smallest + "; " + free + (ahead.empty() ? "" : "; " + ahead);
        else
          out[k] = "Priority: fits now (" + free + "); the scheduler's next round starts it" +
                   (ahead.empty() ? "" : ", after the " + ahead);
        break;
      }
    }
  }
  return out;
}

void Daemon::Impl::FillPendingReasons(std::vector<p::JobRow>& rows) const {
  std::vector<const Job*> waiting;
  std::vector<p::JobRow*> to;
  for (auto& row : rows) {
    if (row.state != p::JobState::kQueued) continue;
    auto it = jobs.find(row.job);
    if (it == jobs.end() || !it->second.workers.empty()) continue;
    waiting.push_back(&it->second);
    to.push_back(&row);
  }
  if (waiting.empty()) return;
  const auto reasons = PendingReasons(waiting);
  for (size_t k = 0; k < to.size(); ++k) to[k]->pending_reason = reasons[k];
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
    else if (n.loan_state == "held" || n.loan_state == "lending") {  // lending: inference's until its serving side stops
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
  metrics.Set("aryl_nodes_connected", "", registry.connected_count());
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
    js.checkpoint_failures = table.CheckpointFailures(id);
    if (js.workers == 0) js.steps_per_second = js.measured_steps_per_second = 0;
    s.jobs.push_back(std::move(js));
  }
  for (const auto& row : NodeRows())
    s.nodes.push_back({row.agent_id, std::string(p::ToString(row.pool)), std::string(p::ToString(row.state)),
                       static_cast<int>(row.slots), static_cast<int>(row.used_slots),
                       nodes[row.agent_id].loan_state == "loaned"});
  double now = WallNow();
  auto pending = [&](const PendingReclaim& pr) {
    auto n = nodes.find(pr.node);
    s.reclaims.push_back({pr.node, n == nodes.end() ? "inference" : std::string(p::ToString(n->second.pool)),
                          pr.deadline - now});
  };
  for (const auto& pr : reclaims) pending(pr);
  for (const auto& [sid, pr] : draining) pending(pr);
  s.queues = QueueSeriesNow();
  cluster_series->Publish(s);
}

}  // namespace aryl::daemon
