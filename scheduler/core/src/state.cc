#include "aryl/sched/state.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <sstream>

#include "aryl/sched/queues.h"
#include "aryl/sched/speed_models.h"
#include "aryl/sched/throughput.h"
#include "state_names.h"

namespace aryl::sched {
using internal::JobName;
using internal::PlacementString;
using internal::ServerName;

std::uint64_t ClusterState::InstanceId::Next() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1) << 20;
}

Result<ClusterState> ClusterState::Create(std::vector<ServerSpec> servers,
                                          std::shared_ptr<const ThroughputCatalog> thr,
                                          SchedulerConfig config) {
  if (servers.empty()) return Status::InvalidArgument("no servers");
  if (!thr) return Status::InvalidArgument("no throughput catalog");
  if (config.rescale_pause < 0 || config.restart_pause < 0 || config.resume_pause < 0 ||
      config.checkpoint_interval < 0) {
    return Status::InvalidArgument("pauses and checkpoint_interval must be >= 0");
  }
  if (!(config.resize_horizon > 0) || !(config.resize_dwell >= 0) || !(config.resize_margin >= 0) ||
      std::isinf(config.resize_dwell) || std::isinf(config.resize_margin)) {
    return Status::InvalidArgument("resize_horizon must be > 0, resize_dwell and resize_margin finite and >= 0; got " +
                                   std::to_string(config.resize_horizon) + ", " +
                                   std::to_string(config.resize_dwell) + ", " + std::to_string(config.resize_margin));
  }
  ClusterState state;
  state.config_ = std::move(config);
  state.thr_ = std::move(thr);
  std::set<std::string> names;
  std::set<std::string> types;
  for (const auto& s : servers) {
    if (s.gpus <= 0) {
      return Status::InvalidArgument(ServerName(s.id) + " (" + s.name + "): gpus must be > 0, got " +
                                     std::to_string(s.gpus));
    }
    if (s.gpu_type.empty()) return Status::InvalidArgument(ServerName(s.id) + ": empty gpu_type");
    if (state.server_index_.count(s.id)) {
      return Status::AlreadyExists(ServerName(s.id) + ": duplicate server id");
    }
    if (!s.name.empty() && !names.insert(s.name).second) {
      return Status::AlreadyExists(ServerName(s.id) + ": duplicate server name '" + s.name + "'");
    }
    state.server_index_[s.id] = static_cast<int>(state.servers_.size());
    types.insert(s.gpu_type);
    ServerInfo info;
    info.spec = s;
    info.state = s.pool == Pool::kTraining ? ServerState::kAvailable : ServerState::kHeld;
    state.servers_.push_back(std::move(info));
  }
  ServerId max_id = 0;
  for (const auto& s : state.servers_) max_id = std::max(max_id, s.spec.id);
  if (static_cast<size_t>(max_id) < 4 * state.servers_.size() + 64) {
    state.server_dense_.assign(static_cast<size_t>(max_id) + 1, -1);
    for (const auto& [id, i] : state.server_index_) state.server_dense_[id] = i;
  }
  state.type_names_.assign(types.begin(), types.end());
  state.type_gpus_.assign(state.type_names_.size(), 0);
  state.type_node_.assign(state.type_names_.size(), 0);
  for (auto& s : state.servers_) {
    s.type = state.type_index(s.spec.gpu_type);
    state.type_gpus_[s.type] += s.spec.gpus;
    state.type_node_[s.type] = std::max(state.type_node_[s.type], s.spec.gpus);
  }
  return state;
}

int ClusterState::SparseServerIndex(ServerId id) const {
  auto it = server_index_.find(id);
  return it == server_index_.end() ? -1 : it->second;
}

int ClusterState::type_index(const std::string& gpu_type) const {
  auto it = std::lower_bound(type_names_.begin(), type_names_.end(), gpu_type);
  return it != type_names_.end() && *it == gpu_type ? static_cast<int>(it - type_names_.begin())
                                                    : -1;
}

std::vector<ServerId> ClusterState::LoanedServers() const {
  std::vector<ServerId> out;
  for (const auto& s : servers_) {
    if (s.state == ServerState::kLoaned && !s.draining()) out.push_back(s.spec.id);
  }
  return out;
}

bool ClusterState::OnDraining(const JobInfo& job) const {
  if (draining_.empty() && cordoned_ == 0) return false;
  for (const auto& [sid, n] : job.placement) {
    if (servers_[server_index(sid)].holds_in_place()) return true;
  }
  return false;
}

Status ClusterState::MarkDraining(ServerId id, Seconds return_by, int record) {
  int i = server_index(id);
  if (i < 0) return Status::NotFound("reclaim of unknown " + ServerName(id));
  ServerInfo& s = servers_[i];
  if (s.state != ServerState::kLoaned || s.draining()) {
    return Status::FailedPrecondition(ServerName(id) + " is not loaned or already being reclaimed");
  }
  if (record < 0 || record >= static_cast<int>(reclaims_.size()) || !(return_by < kNever)) {
    return Status::InvalidArgument(ServerName(id) + ": drain without a reclaim record or deadline");
  }
  s.return_by = return_by;
  s.reclaim_record = record;
  draining_.push_back(id);
  return Status::Ok();
}

std::vector<ServerId> ClusterState::HeldServers() const {
  std::vector<ServerId> out;
  for (const auto& s : servers_) {
    if (s.state == ServerState::kHeld) out.push_back(s.spec.id);
  }
  return out;
}

int ClusterState::total_gpus() const {
  int n = 0;
  for (int g : type_gpus_) n += g;
  return n;
}

int ClusterState::used_gpus() const {
  int n = 0;
  for (const auto& s : servers_) n += s.used;
  return n;
}

void ClusterState::IndexJob(JobInfo* job) const {
  JobIndex& x = job_index_;
  const JobId id = job->spec.id;
  if (static_cast<size_t>(id) < 2 * (jobs_.size() + 1024)) {
    if (static_cast<size_t>(id) >= x.dense.size()) {
      x.dense.resize(std::max(static_cast<size_t>(id) + 1, 2 * x.dense.size()), nullptr);
    }
    x.dense[id] = job;
  } else {
    x.sparse[id] = job;
  }
  ++x.size;
}

JobInfo* ClusterState::FindJob(JobId id) const {
  JobIndex& x = job_index_;
  if (x.size != jobs_.size()) {  // a copied state: rebuild
    x = JobIndex();
    for (auto& [jid, j] : jobs_) IndexJob(const_cast<JobInfo*>(&j));
  }
  if (static_cast<size_t>(id) < x.dense.size() && x.dense[id]) return x.dense[id];
  if (x.sparse.empty()) return nullptr;
  auto it = x.sparse.find(id);
  return it == x.sparse.end() ? nullptr : it->second;
}

JobInfo* ClusterState::mutable_job(JobId id) { return FindJob(id); }

double ClusterState::PlacementThroughput(const JobInfo& job, const Placement& placement) const {
  int w = 0;
  for (const auto& [s, n] : placement) w += n;
  if (config_.hetero_dp) {
    // Batch shares proportional to speed: every worker at its own type's pace.
    double thr = 0;
    for (const auto& [s, n] : placement) {
      int i = server_index(s);
      if (i < 0 || n <= 0) return 0;
      const double t = job.Thr(servers_[i].type, w);
      if (!(t > 0)) return 0;
      thr += n * t / w;
    }
    return thr;
  }
  double thr = kNever;
  for (const auto& [s, n] : placement) {
    int i = server_index(s);
    if (i < 0 || n <= 0) return 0;
    thr = std::min(thr, job.Thr(servers_[i].type, w));
  }
  return placement.empty() ? 0 : thr;
}

// --- Progress ----------------------------------------------------------------------

double ClusterState::RemainingAt(const JobInfo& job, Seconds t) const {
  const Seconds productive = std::max(0.0, t - std::max(now_, job.paused_until));
  return std::max(0.0, job.remaining_work - job.throughput * productive);
}

void ClusterState::AdvanceJob(JobInfo& job, Seconds t) {
  const Seconds dt = t - now_;
  job.stats.gpu_seconds += job.workers * dt;
  job.stats.run_time += dt;
  const Seconds interval = config_.checkpoint_interval;
  if (interval > 0 && t >= job.checkpoint_time + interval) {
    const double n = std::floor((t - job.checkpoint_time) / interval);
    const Seconds ck = job.checkpoint_time + n * interval;
    job.checkpoint_remaining = RemainingAt(job, ck);
    job.checkpoint_time = ck;
  }
  job.remaining_work = RemainingAt(job, t);
}

Status ClusterState::AdvanceTo(Seconds t) {
  if (std::isnan(t) || t < now_) {
    return Status::InvalidArgument("event time " + std::to_string(t) + " is before now (" +
                                   std::to_string(now_) + ")");
  }
  if (t == now_) return Status::Ok();
  const Seconds dt = t - now_;
  for (JobId id : running_) AdvanceJob(*FindJob(id), t);
  for (auto& s : servers_) {
    s.busy_gpu_seconds += s.used * dt;
    if (s.state == ServerState::kLoaned) s.loaned_seconds += dt;
  }
  now_ = t;
  return Status::Ok();
}

Seconds ClusterState::EstimatedFinishTime(JobId id) const {
  const JobInfo* j = job(id);
  if (!j || j->status != JobStatus::kRunning || j->throughput <= 0) return kNever;
  return std::max(now_, j->paused_until) + j->remaining_work / j->throughput;
}

std::optional<std::pair<Seconds, JobId>> ClusterState::NextCompletion() const {
  std::optional<std::pair<Seconds, JobId>> best;
  for (JobId id : running_) {
    Seconds t = EstimatedFinishTime(id);
    if (t < kNever && (!best || t < best->first)) best = std::make_pair(t, id);
  }
  return best;
}

std::vector<JobId> ClusterState::CompletedBy(Seconds t) const {
  std::vector<std::pair<Seconds, JobId>> done;
  for (JobId id : running_) {
    Seconds f = EstimatedFinishTime(id);
    if (f <= t) done.emplace_back(f, id);
  }
  std::sort(done.begin(), done.end());
  std::vector<JobId> out;
  for (const auto& [f, id] : done) out.push_back(id);
  return out;
}

std::vector<const ReclaimRecord*> ClusterState::PendingReclaims() const {
  std::vector<const ReclaimRecord*> out;
  for (const auto& r : reclaims_) {
    if (!r.met()) out.push_back(&r);
  }
  return out;
}

// --- Jobs ----------------------------------------------------------------------------

Status ClusterState::ValidateJob(const JobSpec& spec) const { return BuildJob(spec).status(); }

Status ClusterState::AddJob(const JobSpec& spec) {
  ARYL_ASSIGN_OR_RETURN(JobInfo job, BuildJob(spec));
  job.queued_since = now_;
  FindJob(spec.id);  // brings the index up to date before it grows
  auto [it, inserted] = jobs_.emplace(spec.id, std::move(job));
  IndexJob(&it->second);
  queued_.insert(spec.id);
  queue_log_.push_back(spec.id);
  return Status::Ok();
}

Result<JobInfo> ClusterState::BuildJob(const JobSpec& spec, bool refresh) const {
  const std::string who = JobName(spec.id);
  if (!refresh && jobs_.count(spec.id)) return Status::AlreadyExists(who + ": already submitted");
  if (spec.min_workers < 1) {
    return Status::InvalidArgument(who + ": min_workers must be >= 1, got " +
                                   std::to_string(spec.min_workers));
  }
  if (spec.min_workers > spec.max_workers) {
    return Status::InvalidArgument(who + ": min_workers " + std::to_string(spec.min_workers) +
                                   " > max_workers " + std::to_string(spec.max_workers));
  }
  if (spec.kind == JobKind::kInelastic && spec.min_workers != spec.max_workers) {
    return Status::InvalidArgument(who + ": an inelastic job needs min_workers == max_workers, got " +
                                   std::to_string(spec.min_workers) + " and " +
                                   std::to_string(spec.max_workers));
  }
  if (spec.granularity.kind == Granularity::Kind::kMultiple && spec.granularity.multiple <= 0) {
    return Status::InvalidArgument(who + ": granularity multiple must be > 0, got " +
                                   std::to_string(spec.granularity.multiple));
  }
  if (!(spec.total_work > 0) || std::isinf(spec.total_work)) {
    return Status::InvalidArgument(who + ": total_work must be > 0, got " +
                                   std::to_string(spec.total_work));
  }
  if (spec.requested_workers != 0 &&
      (spec.requested_workers < spec.min_workers || spec.requested_workers > spec.max_workers)) {
    return Status::InvalidArgument(who + ": requested_workers " +
                                   std::to_string(spec.requested_workers) + " outside [" +
                                   std::to_string(spec.min_workers) + ", " +
                                   std::to_string(spec.max_workers) + "]");
  }
  if (!thr_->HasModel(spec.model)) {
    return Status::NotFound(who + ": unknown model '" + spec.model + "' (no throughput table)");
  }
  std::vector<bool> allowed_type(type_names_.size(), spec.gpu_types.empty());
  for (const auto& t : spec.gpu_types) {
    int i = type_index(t);
    if (i < 0) {
      std::string have;
      for (const auto& n : type_names_) have += (have.empty() ? "" : ", ") + n;
      return Status::InvalidArgument(who + ": unknown GPU type '" + t + "' (cluster has " + have +
                                     ")");
    }
    allowed_type[i] = true;
  }
  std::vector<int> type_gpus = type_gpus_;
  const std::vector<int>& type_node = type_node_;  // GPUs of the type's largest server
  const JobSpeedSource* speed = config_.speed.get();
  if (config_.hetero_dp) {
    // A job may mix types: every type's curve reaches the cluster's size.
    int all = 0;
    for (int g : type_gpus) all += g;
    std::fill(type_gpus.begin(), type_gpus.end(), all);
  }

  JobInfo job;
  job.spec = spec;
  if (config_.queues) {
    job.queue = config_.queues->Find(spec.queue);
    if (job.queue < 0) return Status::InvalidArgument(who + ": queue '" + spec.queue + "': no such queue");
    if (spec.priority < kPriorityLow || spec.priority > kPriorityHigh) {
      return Status::InvalidArgument(who + ": priority " + std::to_string(spec.priority) +
                                     " outside [0, 2] (low, normal, high)");
    }
  }
  job.curves.resize(type_names_.size());
  int base = 0;
  for (size_t t = 0; t < type_names_.size(); ++t) {
    if (!allowed_type[t]) continue;
    const int cap = std::min(spec.max_workers, type_gpus[t]);
    auto& curve = job.curves[t];
    curve.assign(cap + 1, 0.0);
    for (int w = spec.min_workers; w <= cap; ++w) {
      if (spec.kind == JobKind::kElastic && !spec.granularity.Allows(w)) continue;
      double v = thr_->Throughput(spec.model, type_names_[t], w);
      if (v > 0 && std::isfinite(v) && speed != nullptr) {
        const double measured = speed->Throughput(spec.id, type_names_[t], w, type_node[t]);
        if (measured > 0 && std::isfinite(measured)) v = measured;
      }
      if (v > 0 && std::isfinite(v)) {
        curve[w] = v;
        if (base == 0 || w < base) base = w;
      }
    }
  }
  if (base == 0) {
    std::string types;
    for (size_t t = 0; t < type_names_.size(); ++t) {
      if (allowed_type[t]) types += (types.empty() ? "" : ", ") + type_names_[t];
    }
    return Status::InvalidArgument(
        who + ": no allowed size in [" + std::to_string(spec.min_workers) + ", " +
        std::to_string(spec.max_workers) + "] for model '" + spec.model + "' on " + types +
        " (throughput cells empty, nan or 0, granularity, or more workers than GPUs)");
  }
  job.base_workers = base;
  int requested = spec.kind == JobKind::kInelastic
                      ? spec.min_workers
                      : (spec.requested_workers > 0 ? spec.requested_workers : spec.max_workers);
  // Snap down to a size some type allows (never below base).
  auto allowed_anywhere = [&](int w) {
    for (size_t t = 0; t < job.curves.size(); ++t) {
      if (job.Allowed(static_cast<int>(t), w)) return true;
    }
    return false;
  };
  while (requested > base && !allowed_anywhere(requested)) --requested;
  job.requested_workers = std::max(requested, base);
  job.remaining_work = spec.total_work;
  job.checkpoint_remaining = spec.total_work;
  job.status = JobStatus::kQueued;
  return job;
}

void ClusterState::SetPlacement(JobInfo& job, const Placement& placement) {
  for (const auto& [sid, n] : job.placement) {
    auto& s = servers_[server_index(sid)];
    s.used -= n;
    auto it = std::find_if(s.jobs.begin(), s.jobs.end(),
                           [&](const auto& e) { return e.first == job.spec.id; });
    if (it != s.jobs.end()) s.jobs.erase(it);
  }
  job.placement = placement;
  job.workers = 0;
  for (const auto& [sid, n] : placement) {
    auto& s = servers_[server_index(sid)];
    s.used += n;
    s.jobs.emplace_back(job.spec.id, n);
    job.workers += n;
  }
  job.throughput = placement.empty() ? 0 : PlacementThroughput(job, placement);
  UpdateSlow(job);
}

Status ClusterState::FinishJob(JobId id) { return EndJob(id, JobStatus::kFinished); }

Status ClusterState::CancelJob(JobId id) { return EndJob(id, JobStatus::kCancelled); }

Status ClusterState::EndJob(JobId id, JobStatus status) {
  JobInfo* j = mutable_job(id);
  if (!j) return Status::NotFound(JobName(id) + ": unknown job id");
  if (j->status == JobStatus::kFinished || j->status == JobStatus::kCancelled) {
    return Status::FailedPrecondition(JobName(id) + ": already finished or cancelled");
  }
  SetPlacement(*j, {});
  running_.erase(id);
  running_elastic_.erase(id);
  queued_.erase(id);
  j->status = status;
  if (status == JobStatus::kFinished) j->remaining_work = 0;
  j->stats.finish_time = now_;
  return Status::Ok();
}

Status ClusterState::SetRemainingWork(JobId id, double remaining) {
  JobInfo* j = mutable_job(id);
  if (!j) return Status::NotFound(JobName(id) + ": unknown job id");
  if (j->status != JobStatus::kRunning && j->status != JobStatus::kQueued) {
    return Status::FailedPrecondition(JobName(id) + ": progress for a job that is not active");
  }
  if (!(remaining >= 0) || std::isinf(remaining)) {
    return Status::InvalidArgument(JobName(id) + ": remaining_work must be >= 0, got " +
                                   std::to_string(remaining));
  }
  j->remaining_work = remaining;
  j->checkpoint_remaining = std::max(j->checkpoint_remaining, remaining);
  if (j->status == JobStatus::kQueued) queue_log_.push_back(id);
  return Status::Ok();
}

Status ClusterState::RefreshCurves(JobId id) {
  JobInfo* j = mutable_job(id);
  if (!j) return Status::NotFound(JobName(id) + ": unknown job id");
  if (j->status != JobStatus::kRunning && j->status != JobStatus::kQueued) {
    return Status::FailedPrecondition(JobName(id) + ": speed refresh for a job that is not active");
  }
  ARYL_ASSIGN_OR_RETURN(JobInfo built, BuildJob(j->spec, /*refresh=*/true));
  j->curves = std::move(built.curves);
  if (j->status == JobStatus::kRunning) j->throughput = PlacementThroughput(*j, j->placement);
  UpdateSlow(*j);
  if (j->status == JobStatus::kQueued) queue_log_.push_back(id);
  return Status::Ok();
}

Status ClusterState::SetRescale(JobId id, Rescale rescale) {
  JobInfo* j = mutable_job(id);
  if (!j) return Status::NotFound(JobName(id) + ": unknown job id");
  if (j->status != JobStatus::kRunning && j->status != JobStatus::kQueued) {
    return Status::FailedPrecondition(JobName(id) + ": rescale kind for a job that is not active");
  }
  // A pause measured for the other kind says nothing about this one.
  if (j->spec.rescale != rescale) j->measured_pause = -1;
  j->spec.rescale = rescale;
  return Status::Ok();
}

Status ClusterState::SetMeasuredPause(JobId id, Seconds pause) {
  JobInfo* j = mutable_job(id);
  if (!j) return Status::NotFound(JobName(id) + ": unknown job id");
  if (j->status != JobStatus::kRunning && j->status != JobStatus::kQueued) {
    return Status::FailedPrecondition(JobName(id) + ": measured pause for a job that is not active");
  }
  if (!(pause >= 0) || std::isinf(pause)) {
    return Status::InvalidArgument(JobName(id) + ": measured pause must be finite and >= 0, got " +
                                   std::to_string(pause));
  }
  j->measured_pause = pause;
  return Status::Ok();
}

// --- Servers -------------------------------------------------------------------------

Status ClusterState::LoanServer(ServerId id) {
  int i = server_index(id);
  if (i < 0) return Status::NotFound("loan of unknown " + ServerName(id));
  ServerInfo& s = servers_[i];
  if (s.spec.pool != Pool::kInference) {
    return Status::InvalidArgument("loan of " + ServerName(id) + ", a training server");
  }
  if (s.state != ServerState::kHeld) {
    return Status::FailedPrecondition("loan of " + ServerName(id) + ", already loaned");
  }
  if (s.failed) return Status::FailedPrecondition("loan of " + ServerName(id) + ", which failed");
  s.state = ServerState::kLoaned;
  return Status::Ok();
}

Status ClusterState::MarkFailed(ServerId id) {
  int i = server_index(id);
  if (i < 0) return Status::NotFound("failure of unknown " + ServerName(id));
  ServerInfo& s = servers_[i];
  if (s.failed) return Status::FailedPrecondition(ServerName(id) + " already failed");
  if (s.used > 0) {
    return Status::FailedPrecondition(ServerName(id) + " still holds workers; move them first");
  }
  s.failed = true;
  return Status::Ok();
}

Status ClusterState::MarkRecovered(ServerId id) {
  int i = server_index(id);
  if (i < 0) return Status::NotFound("recovery of unknown " + ServerName(id));
  ServerInfo& s = servers_[i];
  if (!s.failed) return Status::FailedPrecondition(ServerName(id) + " has not failed");
  s.failed = false;
  return Status::Ok();
}

Status ClusterState::SetCordoned(ServerId id, bool cordoned) {
  int i = server_index(id);
  if (i < 0) return Status::NotFound("cordon of unknown " + ServerName(id));
  ServerInfo& s = servers_[i];
  if (s.cordoned == cordoned) return Status::Ok();
  s.cordoned = cordoned;
  cordoned_ += cordoned ? 1 : -1;
  return Status::Ok();
}

Status ClusterState::AddServer(const ServerSpec& spec) {
  if (spec.gpus <= 0) {
    return Status::InvalidArgument(ServerName(spec.id) + " (" + spec.name + "): gpus must be > 0, got " +
                                   std::to_string(spec.gpus));
  }
  if (spec.gpu_type.empty()) return Status::InvalidArgument(ServerName(spec.id) + ": empty gpu_type");
  if (server_index(spec.id) >= 0) return Status::AlreadyExists(ServerName(spec.id) + ": duplicate server id");
  const int type = type_index(spec.gpu_type);
  if (type < 0) {
    return Status::FailedPrecondition(ServerName(spec.id) + ": GPU type '" + spec.gpu_type +
                                      "' is new to the cluster; build the state again");
  }
  if (!spec.name.empty()) {
    for (const auto& s : servers_) {
      if (s.spec.name == spec.name) {
        return Status::AlreadyExists(ServerName(spec.id) + ": duplicate server name '" + spec.name + "'");
      }
    }
  }
  const int type_gpus = type_gpus_[type] + spec.gpus;
  ServerInfo info;
  info.spec = spec;
  info.state = spec.pool == Pool::kTraining ? ServerState::kAvailable : ServerState::kHeld;
  info.failed = true;
  info.type = type;
  const int index = static_cast<int>(servers_.size());
  servers_.push_back(std::move(info));
  type_gpus_[type] = type_gpus;
  type_node_[type] = std::max(type_node_[type], spec.gpus);
  server_index_[spec.id] = index;
  if (!server_dense_.empty()) {
    if (static_cast<size_t>(spec.id) < 4 * servers_.size() + 64) {
      if (static_cast<size_t>(spec.id) >= server_dense_.size()) server_dense_.resize(static_cast<size_t>(spec.id) + 1, -1);
      server_dense_[spec.id] = index;
    } else {
      server_dense_.clear();  // sparse ids: the hash map alone
    }
  }
  // Curves are capped at the GPUs of their type (BuildJob): extend those that
  // the new server lifts. In a cluster larger than its jobs, none.
  auto extend = [&](JobId id) {
    JobInfo* j = mutable_job(id);
    if (!j || type >= static_cast<int>(j->curves.size()) || j->curves[type].empty()) return;
    if (static_cast<int>(j->curves[type].size()) - 1 >= std::min(j->spec.max_workers, type_gpus)) return;
    JobSpec spec = j->spec;
    spec.id = jobs_.rbegin()->first + 1;  // BuildJob refuses a known id
    auto built = BuildJob(spec);
    if (!built.ok()) return;
    j->curves = std::move(built->curves);
    j->base_workers = built->base_workers;
    j->requested_workers = built->requested_workers;
    UpdateSlow(*j);
  };
  for (JobId id : queued_) extend(id);
  for (JobId id : running_) extend(id);
  // Curves may have changed: queue orders kept by policies start again.
  ++queue_epoch_;
  queue_log_.clear();
  return Status::Ok();
}

}  // namespace aryl::sched
