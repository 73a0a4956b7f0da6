// ClusterState's rules: which actions fit the state (CanApply), applying
// them (Apply), and the bookkeeping every state must satisfy (CheckInvariants).
#include <algorithm>
#include <cmath>
#include <set>

#include "aryl/sched/state.h"
#include "state_names.h"

namespace aryl::sched {

using internal::JobName;
using internal::PlacementString;
using internal::ServerName;

// --- Actions -------------------------------------------------------------------------

Status ClusterState::ValidatePlacement(const JobInfo& job, const Placement& placement,
                                       bool resize) const {
  const std::string who = JobName(job.spec.id);
  if (placement.empty()) return Status::InvalidArgument(who + ": empty placement");
  int w = 0;
  for (const auto& [sid, n] : placement) {
    int i = server_index(sid);
    if (i < 0) return Status::NotFound(who + ": unknown " + ServerName(sid));
    const ServerInfo& s = servers_[i];
    if (n <= 0) return Status::InvalidArgument(who + ": " + std::to_string(n) + " workers on " +
                                               ServerName(sid));
    int mine = 0;
    if (resize) {
      auto it = job.placement.find(sid);
      if (it != job.placement.end()) mine = it->second;
    }
    // A draining or cordoned server keeps the workers it has (a job left to
    // finish there may shrink) but takes no new ones.
    const bool keeps = s.holds_in_place() && n <= mine;
    if (!s.usable() && !keeps) {
      return Status::FailedPrecondition(who + ": " + ServerName(sid) +
                                        " is not usable by training (held, failed, returned, being reclaimed or drained)");
    }
    if (job.curves[s.type].empty()) {
      return Status::InvalidArgument(who + ": may not use GPU type " + type_names_[s.type] +
                                     " of " + ServerName(sid));
    }
    if (n > s.free() + mine) {
      return Status::FailedPrecondition(who + ": " + std::to_string(n) + " workers on " +
                                        ServerName(sid) + " but only " +
                                        std::to_string(s.free() + mine) + " GPUs free");
    }
    w += n;
  }
  if (w < job.spec.min_workers || w > job.spec.max_workers) {
    return Status::OutOfRange(who + ": " + std::to_string(w) + " workers outside [" +
                              std::to_string(job.spec.min_workers) + ", " +
                              std::to_string(job.spec.max_workers) + "]");
  }
  if (PlacementThroughput(job, placement) <= 0) {
    return Status::InvalidArgument(who + ": size " + std::to_string(w) +
                                   " not allowed on placement " + PlacementString(placement) +
                                   " (granularity or throughput table)");
  }
  return Status::Ok();
}

Status ClusterState::CanApply(const Action& a) const {
  switch (a.type) {
    case ActionType::kStart: {
      const JobInfo* j = job(a.job);
      if (!j) return Status::NotFound(JobName(a.job) + ": unknown job id");
      if (j->status != JobStatus::kQueued) {
        return Status::FailedPrecondition(JobName(a.job) + ": start of a job that is not queued");
      }
      return ValidatePlacement(*j, a.placement, false);
    }
    case ActionType::kResize: {
      const JobInfo* j = job(a.job);
      if (!j) return Status::NotFound(JobName(a.job) + ": unknown job id");
      if (j->status != JobStatus::kRunning) {
        return Status::FailedPrecondition(JobName(a.job) + ": resize of a job that is not running");
      }
      if (a.placement == j->placement) {
        return Status::InvalidArgument(JobName(a.job) + ": resize to the same placement");
      }
      return ValidatePlacement(*j, a.placement, true);
    }
    case ActionType::kPreempt: {
      const JobInfo* j = job(a.job);
      if (!j) return Status::NotFound(JobName(a.job) + ": unknown job id");
      if (j->status != JobStatus::kRunning) {
        return Status::FailedPrecondition(JobName(a.job) + ": preempt of a job that is not running");
      }
      return Status::Ok();
    }
    case ActionType::kReturnServer: {
      const ServerInfo* s = server(a.server);
      if (!s) return Status::NotFound("unknown " + ServerName(a.server));
      if (s->state != ServerState::kLoaned) {
        return Status::FailedPrecondition(ServerName(a.server) + " is not loaned");
      }
      if (s->used > 0) {
        return Status::FailedPrecondition(ServerName(a.server) + " still holds " +
                                          std::to_string(s->used) + " workers");
      }
      return Status::Ok();
    }
  }
  return Status::Internal("unknown action type");
}

Status ClusterState::Apply(const Action& a) {
  ARYL_RETURN_IF_ERROR(CanApply(a));
  switch (a.type) {
    case ActionType::kStart: {
      JobInfo& j = *mutable_job(a.job);
      SetPlacement(j, a.placement);
      j.status = JobStatus::kRunning;
      queued_.erase(a.job);
      running_.insert(a.job);
      if (j.elastic()) running_elastic_.insert(a.job);
      if (j.stats.first_start < 0) j.stats.first_start = now_;
      j.started_at = now_;
      j.paused_until =
          now_ + (j.stats.preemptions == 0 ? 0
                  : j.suspended            ? config_.resume_pause
                                           : config_.restart_pause);
      j.checkpoint_time = now_;
      j.checkpoint_remaining = j.remaining_work;
      break;
    }
    case ActionType::kResize: {
      JobInfo& j = *mutable_job(a.job);
      SetPlacement(j, a.placement);
      j.stats.rescales++;
      j.last_resize = now_;
      j.paused_until = std::max(j.paused_until, now_ + config_.RescalePause(j.spec));
      j.checkpoint_time = now_;
      j.checkpoint_remaining = j.remaining_work;
      break;
    }
    case ActionType::kPreempt: {
      JobInfo& j = *mutable_job(a.job);
      SetPlacement(j, {});
      j.suspended = a.suspend;
      if (a.suspend) j.checkpoint_remaining = j.remaining_work;  // saved as it stops
      j.stats.lost_work += std::max(0.0, j.checkpoint_remaining - j.remaining_work);
      j.remaining_work = std::max(j.remaining_work, j.checkpoint_remaining);
      j.status = JobStatus::kQueued;
      j.stats.preemptions++;
      j.queued_since = now_;
      j.paused_until = now_;
      running_.erase(a.job);
      running_elastic_.erase(a.job);
      queued_.insert(a.job);
      queue_log_.push_back(a.job);
      break;
    }
    case ActionType::kReturnServer: {
      ServerInfo& s = servers_[server_index(a.server)];
      s.state = ServerState::kHeld;
      if (s.draining()) {
        draining_.erase(std::find(draining_.begin(), draining_.end(), a.server));
        ReclaimRecord& r = reclaims_[s.reclaim_record];
        r.returned.push_back(a.server);
        if (static_cast<int>(r.returned.size()) == r.requested) r.met_time = now_;
        s.return_by = kNever;
        s.reclaim_record = -1;
      }
      break;
    }
  }
  return Status::Ok();
}

// --- Jobs that run slower than they could --------------------------------------------

int ClusterState::PaceType(const JobInfo& job, const Placement& placement) const {
  // The round's rule for a job's home type (round.cc), over a whole placement.
  int pace = -1;
  double slowest = -1;  // Thr(pace, workers), read only when types differ
  for (const auto& [sid, n] : placement) {
    const int type = servers_[server_index(sid)].type;
    if (pace < 0) {
      pace = type;
      continue;
    }
    if (type == pace) continue;
    if (slowest < 0) slowest = job.Thr(pace, job.workers);
    const double thr = job.Thr(type, job.workers);
    if (thr < slowest) {
      slowest = thr;
      pace = type;
    }
  }
  return pace;
}

bool ClusterState::RunsSlow(const JobInfo& job) const {
  const int pace = PaceType(job, job.placement);
  const int w = job.workers;
  if (pace < 0 || w <= 0) return false;
  const int fastest = job.FastestType(num_types(), w);
  return fastest >= 0 && job.Slower(pace, fastest, w);
}

void ClusterState::UpdateSlow(const JobInfo& job) {
  if (RunsSlow(job)) {
    running_slow_.insert(job.spec.id);
  } else {
    running_slow_.erase(job.spec.id);
  }
}

// --- Invariants ----------------------------------------------------------------------

Status ClusterState::CheckInvariants() const {
  std::vector<int> used(servers_.size(), 0);
  size_t entries = 0;
  for (const auto& [id, j] : jobs_) {
    const std::string who = JobName(id);
    const bool running = j.status == JobStatus::kRunning;
    if (running != (running_.count(id) > 0) ||
        (running && j.elastic()) != (running_elastic_.count(id) > 0) ||
        (j.status == JobStatus::kQueued) != (queued_.count(id) > 0)) {
      return Status::Internal(who + ": status disagrees with the running/queued sets");
    }
    if (RunsSlow(j) != running_slow_.contains(id)) {
      return Status::Internal(who + ": running_slow() disagrees with its placement and curves");
    }
    if (!running) {
      if (!j.placement.empty()) return Status::Internal(who + ": placement while not running");
      continue;
    }
    int w = 0;
    for (const auto& [sid, n] : j.placement) {
      int i = server_index(sid);
      if (i < 0 || n <= 0) return Status::Internal(who + ": bad placement entry");
      const ServerInfo& s = servers_[i];
      if (!s.usable() && !s.holds_in_place()) {
        return Status::Internal(who + ": workers on " + ServerName(sid) +
                                " which is not usable (held, returned or failed)");
      }
      auto it = std::find_if(s.jobs.begin(), s.jobs.end(),
                             [job = id](const auto& e) { return e.first == job; });
      if (it == s.jobs.end() || it->second != n) {
        return Status::Internal(who + ": " + ServerName(sid) + " does not record its workers");
      }
      used[i] += n;
      w += n;
      ++entries;
    }
    if (w != j.workers) return Status::Internal(who + ": worker count disagrees with placement");
    if (w < j.spec.min_workers || w > j.spec.max_workers) {
      return Status::Internal(who + ": " + std::to_string(w) + " workers outside [" +
                              std::to_string(j.spec.min_workers) + ", " +
                              std::to_string(j.spec.max_workers) + "]");
    }
    if (j.spec.kind == JobKind::kInelastic && w != j.spec.min_workers) {
      return Status::Internal(who + ": inelastic job at another size");
    }
    if (j.spec.kind == JobKind::kElastic && !j.spec.granularity.Allows(w)) {
      return Status::Internal(who + ": size " + std::to_string(w) + " off its granularity");
    }
    if (PlacementThroughput(j, j.placement) <= 0) {
      return Status::Internal(who + ": running at a size its throughput table does not allow");
    }
  }
  size_t server_entries = 0;
  for (size_t i = 0; i < servers_.size(); ++i) {
    const ServerInfo& s = servers_[i];
    server_entries += s.jobs.size();
    if (used[i] != s.used) {
      return Status::Internal(ServerName(s.spec.id) + ": used " + std::to_string(s.used) +
                              " but placements hold " + std::to_string(used[i]));
    }
    if (s.used > s.spec.gpus || s.used < 0) {
      return Status::Internal(ServerName(s.spec.id) + ": GPU double-booked (" +
                              std::to_string(s.used) + " workers on " +
                              std::to_string(s.spec.gpus) + " GPUs)");
    }
    if (s.spec.pool == Pool::kTraining && s.state != ServerState::kAvailable) {
      return Status::Internal(ServerName(s.spec.id) + ": training server in an inference state");
    }
  }
  if (server_entries != entries) return Status::Internal("servers record workers of no job");
  for (const auto& r : reclaims_) {
    // Met once every server is returned. That the core returns them by the
    // deadline (at the first event at or after it) is the policy's promise,
    // tested as such: returned late (a driver that sent no event by the
    // deadline: a paused daemon, a simulator's sparse events) is an outcome
    // the record keeps (met() false), not an inconsistency of the state.
    const bool returned = static_cast<int>(r.returned.size()) == r.requested;
    if (returned != (r.met_time >= 0)) {
      return Status::Internal("reclaim at " + std::to_string(r.time) + ": met_time " +
                              std::to_string(r.met_time) + " disagrees with its returned servers");
    }
  }
  return Status::Ok();
}

}  // namespace aryl::sched
