// ClusterState: what the scheduling core knows about the cluster, and the one
// code path that changes it.
//
// Drivers read it (Scheduler::state()); only the Scheduler mutates it (the
// mutators below are public so that tests and replay tools can drive it
// directly, but a driver that mutates it bypasses the policy).
//
// Progress (how remaining work is kept current):
//   1. Every event carries a time. Before handling it, the state advances every
//      running job from the previous event's time to the new one:
//        remaining -= thr(placement) * (time the job was not paused in between)
//      where thr(placement) is the job's throughput at its total worker count on
//      the slowest GPU type in its placement (synchronous data parallelism), and
//      the job is paused until `paused_until` after a start-after-preemption
//      (restart_pause) or a rescale (rescale_pause).
//   2. A JobProgress event overrides the estimate with the driver's measurement.
//   3. Checkpoints: a running job checkpoints every checkpoint_interval seconds
//      of wall time since its last start or rescale (a rescale carries the state
//      over, so it counts as a checkpoint). A preemption sets remaining back to
//      the value at the last checkpoint (JobStats::lost_work records the loss),
//      unless it suspends (Action::suspend: the job checkpoints as it stops and
//      loses nothing; its next start pauses resume_pause, not restart_pause).
//   4. The simulator asks EstimatedFinishTime(job) / NextCompletion() for when to
//      send JobFinished; the estimate holds until the next event changes the
//      job's placement. CompletedBy(t) lists the jobs that finish by t if nothing
//      else happens.
//
// Thread safety: not thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/config.h"
#include "aryl/sched/id_set.h"
#include "aryl/sched/types.h"
#include "aryl/status.h"

namespace aryl::sched {

class ThroughputCatalog;

inline constexpr Seconds kNever = std::numeric_limits<double>::infinity();

enum class JobStatus : std::uint8_t { kQueued, kRunning, kFinished, kCancelled };

struct JobStats {
  Seconds first_start = -1;   // -1 until the job first starts
  Seconds finish_time = -1;   // -1 until finished or cancelled
  int preemptions = 0;
  int rescales = 0;
  double gpu_seconds = 0;     // attained service: sum of workers x running time
  Seconds run_time = 0;       // wall time spent running (including pauses)
  double lost_work = 0;       // iterations lost to preemptions
};

struct JobInfo {
  JobSpec spec;
  JobStatus status = JobStatus::kQueued;
  Placement placement;        // empty unless running
  int workers = 0;            // total workers in `placement`
  int base_workers = 0;       // smallest allowed size >= min (inelastic: n)
  int requested_workers = 0;  // size for policies without elasticity (allowed, <= max)
  double remaining_work = 0;  // iterations
  Seconds paused_until = 0;   // no progress before this time (restart/rescale pause)
  Seconds checkpoint_time = 0;
  double checkpoint_remaining = 0;  // remaining work at the last checkpoint
  double throughput = 0;      // iterations/s at the current placement (0 when queued)
  Seconds queued_since = 0;   // submit time, or the last preemption
  bool suspended = false;     // its last stop saved a checkpoint (Action::suspend)
  // When a kResize last changed its placement (-kNever: never). The resize
  // rule's dwell counts from here (resize_rule.h).
  Seconds last_resize = -kNever;
  // How long its last resize paused it, as the driver measured it
  // (JobResizeMeasured); < 0: unknown, SchedulerConfig::RescalePause counts.
  Seconds measured_pause = -1;
  // When it last started (-kNever: never); quota reclaims spare it for
  // SchedulerConfig::quota_min_runtime after this.
  Seconds started_at = -kNever;
  // Its queue's index in SchedulerConfig::queues; -1 without queues.
  int queue = -1;
  JobStats stats;
  // Per GPU type index (ClusterState::type_index): thr at w workers, w = 0..max
  // (0 where the size is not allowed: table cell, granularity, inelastic size).
  // Empty for types the job may not use.
  std::vector<std::vector<double>> curves;

  bool elastic() const { return spec.kind == JobKind::kElastic; }
  // Throughput on `type` at `w` workers; 0 when not allowed.
  double Thr(int type, int w) const {
    if (type < 0 || type >= static_cast<int>(curves.size())) return 0;
    const auto& c = curves[type];
    return w >= 0 && w < static_cast<int>(c.size()) ? c[w] : 0;
  }
  bool Allowed(int type, int w) const { return Thr(type, w) > 0; }
  // The allowed type of `num_types` where it runs fastest at `w` workers (the
  // lowest index among equals); -1 when none is allowed.
  int FastestType(int num_types, int w) const {
    int best = -1;
    for (int t = 0; t < num_types; ++t) {
      if (Thr(t, w) > 0 && (best < 0 || Thr(t, w) > Thr(best, w))) best = t;
    }
    return best;
  }
  // Whether type `t` is slower than type `f` for it at `w` workers.
  bool Slower(int t, int f, int w) const { return Thr(t, w) < Thr(f, w) * (1 - 1e-9); }
};

struct ServerInfo {
  ServerSpec spec;
  ServerState state = ServerState::kAvailable;  // kLoaned/kHeld for inference servers
  bool failed = false;    // a failed server keeps `state` (its pool role) for recovery
  int type = 0;           // GPU type index
  int used = 0;           // GPUs holding workers
  std::vector<std::pair<JobId, int>> jobs;  // job -> workers on this server
  double busy_gpu_seconds = 0;  // sum over time of `used` (per-server usage)
  Seconds loaned_seconds = 0;   // time spent loaned to training
  // A loaned server being reclaimed while jobs that finish before the deadline
  // run out on it (SchedulerConfig::reclaim_lets_jobs_finish): no new workers
  // go there; it is returned when it empties, by `return_by` at the latest.
  Seconds return_by = kNever;
  int reclaim_record = -1;      // index into ClusterState::reclaims() while draining
  // An operator's drain that lets jobs finish (ServerCordoned): no new workers,
  // the jobs there keep their placement until they end.
  bool cordoned = false;

  int free() const { return spec.gpus - used; }
  bool draining() const { return return_by < kNever; }
  // Jobs on it keep the workers they have but get no new ones here: a
  // reclaimed server they are left to finish on, or a cordoned one.
  bool holds_in_place() const { return !failed && (draining() || cordoned); }
  // Training may place new workers here now.
  bool usable() const {
    return !failed && !draining() && !cordoned &&
           (state == ServerState::kAvailable || state == ServerState::kLoaned);
  }
  bool loaned() const { return state == ServerState::kLoaned; }
  // The reported state: kFailed overrides the pool role.
  ServerState reported_state() const { return failed ? ServerState::kFailed : state; }
};

// One reclaim and how it was met. Servers are returned in the plan answering
// it, or later (by the deadline) when jobs are left to finish on them
// (SchedulerConfig::reclaim_lets_jobs_finish); `met_time` is when the last one
// was returned (-1 until then).
struct ReclaimRecord {
  Seconds time = 0;
  Seconds deadline = 0;
  int requested = 0;
  std::vector<ServerId> returned;
  int preemptions = 0;  // jobs preempted to meet it
  int shrinks = 0;      // jobs shrunk to meet it
  int left_to_finish = 0;  // jobs left to finish before the deadline
  Seconds met_time = -1;
  bool met() const { return met_time >= 0 && met_time <= deadline &&
                            static_cast<int>(returned.size()) == requested; }
};

// Everything ClusterState holds about the active cluster: every server, the
// queued and running jobs, the reclaim records and the time. A driver keeps one
// as a snapshot of its journal (FromImage rebuilds the state from it), so a
// restart replays only the events after it. Ended jobs are not part of it: the
// policies and the state's own rules never look at them.
struct StateImage {
  Seconds now = 0;
  std::vector<ServerInfo> servers;  // in index order
  std::vector<JobInfo> jobs;        // queued and running, by id
  std::vector<ReclaimRecord> reclaims;
  std::vector<ServerId> draining;   // ClusterState::draining(), in its order
};

class ClusterState {
 public:
  // Errors: no servers, 0 GPUs, duplicate id or name, empty GPU type.
  static Result<ClusterState> Create(std::vector<ServerSpec> servers,
                                     std::shared_ptr<const ThroughputCatalog> thr,
                                     SchedulerConfig config);

  // The active state (see StateImage). O(servers + active jobs).
  StateImage Image() const;
  // The same into `image`, assigned element by element: a driver that keeps
  // its last image (jobs and servers included) and takes the next into it
  // reuses that image's memory, each job's strings, placement and curves
  // too, instead of allocating them again (docs/performance.md, issue 39).
  void ImageInto(StateImage& image) const;
  // A state equal to the one `image` was taken of, ended jobs forgotten. A job
  // whose `curves` do not have one entry per GPU type of the image's servers
  // gets them built again from `thr` (a server of a new GPU type joined).
  // Errors: Create's, a job that is not queued or running or appears twice, and
  // bookkeeping that CheckInvariants refuses (Corruption naming the problem).
  static Result<ClusterState> FromImage(StateImage image, std::shared_ptr<const ThroughputCatalog> thr,
                                        SchedulerConfig config);
  // In place, what FromImage(Image()) builds under this state's own config
  // and catalog: ended jobs forgotten, the queue log started again (a new
  // queue_log_id(), as for a copy); everything else is already what FromImage
  // would rebuild (a live state keeps its bookkeeping consistent). A driver
  // that keeps snapshots calls it instead of replacing the state by its
  // restored copy, which at 100,000 jobs costs the copy again. O(jobs()),
  // O(1) when no job ended.
  void ForgetEnded();

  Seconds now() const { return now_; }
  const SchedulerConfig& config() const { return config_; }
  const ThroughputCatalog& catalog() const { return *thr_; }

  // --- Servers ---
  const std::vector<ServerInfo>& servers() const { return servers_; }
  // Inline: every round looks up every active job's servers.
  const ServerInfo* server(ServerId id) const {
    const int i = server_index(id);
    return i < 0 ? nullptr : &servers_[i];
  }
  int server_index(ServerId id) const {  // -1 when unknown
    if (!server_dense_.empty()) {
      return static_cast<size_t>(id) < server_dense_.size() ? server_dense_[id] : -1;
    }
    return SparseServerIndex(id);
  }
  int num_types() const { return static_cast<int>(type_names_.size()); }
  int type_index(const std::string& gpu_type) const;  // -1 when no server has it
  const std::string& type_name(int type) const { return type_names_[type]; }
  // Loaned servers a reclaim may still choose (not draining).
  std::vector<ServerId> LoanedServers() const;
  std::vector<ServerId> HeldServers() const;
  // Servers being reclaimed while jobs finish on them (ServerInfo::draining).
  const std::vector<ServerId>& draining() const { return draining_; }
  // Whether `job` has workers on a draining or cordoned server (it is left
  // to finish where it is).
  bool OnDraining(const JobInfo& job) const;
  int total_gpus() const;
  int used_gpus() const;

  // --- Jobs ---
  const JobInfo* job(JobId id) const {
    const JobIndex& x = job_index_;
    if (x.size == jobs_.size() && static_cast<size_t>(id) < x.dense.size() && x.dense[id]) {
      return x.dense[id];
    }
    return FindJob(id);
  }
  const std::map<JobId, JobInfo>& jobs() const { return jobs_; }  // every job ever seen
  const IdSet& running() const { return running_; }
  // The running jobs that are elastic (JobKind::kElastic), a subset of running().
  const IdSet& running_elastic() const { return running_elastic_; }
  // The running jobs that run slower than they could: their pace type
  // (PaceType) is slower than their fastest type at their size (JobInfo::
  // FastestType, Slower). A subset of running(), kept as placements and
  // curves change, so that a type-aware round visits only these among the
  // jobs it does not resize (the candidates to migrate to a faster type).
  const IdSet& running_slow() const { return running_slow_; }
  // The GPU type that sets the pace of `placement` for `job`: the first
  // server's type, unless a later server's type is slower at the job's size
  // (job.workers); -1 when the placement is empty.
  int PaceType(const JobInfo& job, const Placement& placement) const;
  const std::set<JobId>& queued() const { return queued_; }
  // Queue changes for policies that keep their own ordered queue across
  // rounds: every job that entered the queue (submitted or preempted) or whose
  // queued remaining work changed, in order, since the log was last reset.
  // queue_log_id() changes whenever earlier entries become invalid (another
  // state instance, a copy, a server that changed every job's curves): a
  // reader that sees a new id starts again from queued().
  const std::vector<JobId>& queue_log() const { return queue_log_; }
  std::uint64_t queue_log_id() const { return queue_log_id_.value ^ queue_epoch_; }
  // Iterations/s of `job` on `placement`: its throughput at the total worker count
  // on the slowest GPU type used (with SchedulerConfig::hetero_dp: the sum over
  // its servers of workers x thr(type, w) / w); 0 when any part is not allowed.
  double PlacementThroughput(const JobInfo& job, const Placement& placement) const;

  // --- Progress and completion (see the file comment) ---
  // kNever when the job is not running or makes no progress.
  Seconds EstimatedFinishTime(JobId id) const;
  // The earliest estimated completion among running jobs (time, job).
  std::optional<std::pair<Seconds, JobId>> NextCompletion() const;
  // Running jobs whose estimated finish time is <= t, earliest first.
  std::vector<JobId> CompletedBy(Seconds t) const;

  // --- Reclaims ---
  const std::vector<ReclaimRecord>& reclaims() const { return reclaims_; }
  // Reclaims whose servers are not all returned yet (draining ones, by their
  // deadline; CheckInvariants fails a reclaim not met once its deadline passed).
  std::vector<const ReclaimRecord*> PendingReclaims() const;

  // Checks: no GPU double-booked (server.used == sum of placements <= gpus), job
  // and server bookkeeping agree (running_slow() too), every running job inside
  // its allowed sizes ([min, max], granularity, inelastic n), workers only on
  // usable servers (loaned servers used only while loaned, none on failed or
  // held servers), every reclaim met. Returns Internal naming the first violation.
  Status CheckInvariants() const;

  // --- Mutators (the Scheduler's code path; each validates first and changes
  // nothing on error) ---
  // Moves time forward to t (progress, checkpoints, usage). Error if t < now.
  Status AdvanceTo(Seconds t);
  // Validates and queues a job. Errors name the job and the field.
  Status AddJob(const JobSpec& spec);
  Status ValidateJob(const JobSpec& spec) const;
  Status FinishJob(JobId id);     // running or queued -> finished, frees its GPUs
  Status CancelJob(JobId id);     // running or queued -> cancelled, frees its GPUs
  Status SetRemainingWork(JobId id, double remaining);
  Status SetRescale(JobId id, Rescale rescale);  // an active job's Rescale kind
  // An active job's measured resize pause (JobInfo::measured_pause); >= 0.
  Status SetMeasuredPause(JobId id, Seconds pause);
  // Re-reads an active job's curves (SchedulerConfig::speed, then the catalog)
  // after its speed model changed; allowed sizes and base are unchanged.
  Status RefreshCurves(JobId id);
  // Whether `action` fits the current state (the checks Apply makes).
  Status CanApply(const Action& action) const;
  Status Apply(const Action& action);
  // Server pool changes: kHeld -> kLoaned (loan); failure and recovery. A server
  // must be empty before it is marked failed.
  Status LoanServer(ServerId id);
  Status MarkFailed(ServerId id);
  Status MarkRecovered(ServerId id);
  Status SetCordoned(ServerId id, bool cordoned);
  // Adds a server, failed (out of service) until MarkRecovered: a cluster
  // that grows without rebuilding the state. Its GPU type must be one the
  // cluster has (FailedPrecondition otherwise: a new type changes every job's
  // throughput curves, so build the state again); the other checks are
  // Create's. Active jobs whose curves were capped by the old GPU count are
  // extended. Cost: O(servers + active jobs whose max exceeded that count).
  Status AddServer(const ServerSpec& spec);
  void RecordReclaim(ReclaimRecord record) { reclaims_.push_back(std::move(record)); }
  // A reclaimed loaned server with jobs left to finish on it: no new workers,
  // returned (kReturnServer, which completes reclaims()[record]) when empty and
  // by `return_by` at the latest.
  Status MarkDraining(ServerId id, Seconds return_by, int record);
  ReclaimRecord& mutable_reclaim(int record) { return reclaims_[record]; }

 private:
  ClusterState() = default;
  // refresh: the job exists already (RefreshCurves); no duplicate-id check.
  Result<JobInfo> BuildJob(const JobSpec& spec, bool refresh = false) const;
  Status ValidatePlacement(const JobInfo& job, const Placement& placement, bool resize) const;
  void SetPlacement(JobInfo& job, const Placement& placement);
  // Ends a running or queued job (finished or cancelled) and frees its GPUs.
  Status EndJob(JobId id, JobStatus status);
  JobInfo* mutable_job(JobId id);
  JobInfo* FindJob(JobId id) const;
  int SparseServerIndex(ServerId id) const;
  void IndexJob(JobInfo* job) const;
  // Puts a job into running_slow_ or takes it out, from its placement and
  // curves now (after every change of either).
  void UpdateSlow(const JobInfo& job);
  bool RunsSlow(const JobInfo& job) const;
  void AdvanceJob(JobInfo& job, Seconds t);
  double RemainingAt(const JobInfo& job, Seconds t) const;

  SchedulerConfig config_;
  std::shared_ptr<const ThroughputCatalog> thr_;
  Seconds now_ = 0;
  std::vector<ServerInfo> servers_;
  std::unordered_map<ServerId, int> server_index_;
  std::vector<int> server_dense_;  // server_index_ by id when the ids are small
  // Job lookup by id without walking jobs_ (every round looks up every active
  // job): a vector by id for small ids, a hash map for the others. Pointers
  // into jobs_ (its nodes never move); a copy of the state starts with an empty
  // index, which FindJob rebuilds when it is not complete.
  struct JobIndex {
    std::vector<JobInfo*> dense;
    std::unordered_map<JobId, JobInfo*> sparse;
    size_t size = 0;
    JobIndex() = default;
    JobIndex(const JobIndex&) {}
    JobIndex& operator=(const JobIndex&) {
      *this = JobIndex();
      return *this;
    }
    JobIndex(JobIndex&&) = default;
    JobIndex& operator=(JobIndex&&) = default;
  };
  mutable JobIndex job_index_;
  std::vector<std::string> type_names_;
  // Per GPU type index: the GPUs of all its servers (failed ones too) and of
  // its largest server. Servers never leave and never change size, so
  // Create and AddServer keep these; BuildJob reads them in O(types).
  std::vector<int> type_gpus_;
  std::vector<int> type_node_;
  std::map<JobId, JobInfo> jobs_;
  IdSet running_;
  IdSet running_elastic_;
  IdSet running_slow_;
  std::set<JobId> queued_;
  std::vector<ReclaimRecord> reclaims_;
  std::vector<ServerId> draining_;
  int cordoned_ = 0;  // servers with ServerInfo::cordoned
  // A number unique to this instance: a copy gets a new one.
  struct InstanceId {
    std::uint64_t value = Next();
    InstanceId() = default;
    InstanceId(const InstanceId&) : value(Next()) {}
    InstanceId& operator=(const InstanceId&) {
      value = Next();
      return *this;
    }
    static std::uint64_t Next();
  };
  InstanceId queue_log_id_;
  std::uint64_t queue_epoch_ = 0;
  std::vector<JobId> queue_log_;
};

}  // namespace aryl::sched
