#include "aryl/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "aryl/sched/scheduler.h"
#include "aryl/sched/state.h"
#include "aryl/sched/throughput.h"
#include "aryl/sim/progress.h"
#include "aryl/sim/teams.h"
#include "speed_feed.h"

namespace aryl::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string Num(double v) {
  std::ostringstream os;
  os.precision(12);
  os << v;
  return os.str();
}

// The executor's view of one job.
struct ExecJob {
  const sched::JobSpec* spec = nullptr;
  enum class Status : std::uint8_t { kNotSubmitted, kQueued, kRunning, kFinished } status = Status::kNotSubmitted;
  sched::Placement placement;
  int workers = 0;
  double remaining = 0;
  double rate = 0;  // iterations/s at the current placement
  double paused_until = 0;
  double last_update = 0;
  double ckpt_time = 0;
  double ckpt_remaining = 0;
  double executed = 0;  // iterations of progress, including those later lost
  double lost = 0;      // iterations lost to preemptions
  int preemptions = 0;
  int rescales = 0;
  double held = 0;          // seconds it held workers, up to run_since
  double run_since = 0;     // when its current placement started
  double norm_per_iter = 0; // training-type GPU-seconds per iteration at its size
  std::string gpu_types;    // types it ran on, '|'-separated
  bool suspended = false;  // its last stop saved a checkpoint (Action::suspend)
  std::uint32_t version = 0;  // bumped whenever the finish estimate changes
  double first_start = -1;
  double finish = -1;
};

struct ExecServer {
  sched::ServerSpec spec;
  sched::ServerState role = sched::ServerState::kAvailable;  // kAvailable, kHeld or kLoaned
  int used = 0;
};

// A job's estimated finish time; stale when the job's version has moved on.
struct Completion {
  double time = 0;
  sched::JobId job = 0;
  std::uint32_t version = 0;
  // Min-heap on (time, job): the same order as ClusterState::NextCompletion.
  bool operator<(const Completion& o) const { return time != o.time ? time > o.time : job > o.job; }
};

struct PendingReclaim {
  double deadline = 0;
  int outstanding = 0;
};

// One run of one policy: the event loop, the executor and the measurements.
class Run {
 public:
  Run(const SimConfig& config, const std::vector<sched::JobSpec>& jobs, const DemandCurve& demand,
      const sched::ThroughputCatalog& catalog, std::unique_ptr<sched::Scheduler> scheduler,
      std::vector<sched::ServerSpec> servers, std::unique_ptr<internal::SpeedFeed> feed)
      : config_(config), demand_(demand), catalog_(catalog), scheduler_(std::move(scheduler)),
        elastic_(scheduler_->elastic()), feed_(std::move(feed)) {
    jobs_.resize(jobs.size());
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      jobs_[i].spec = &jobs[i];
      jobs_[i].remaining = jobs[i].total_work;
      jobs_[i].ckpt_remaining = jobs[i].total_work;
      index_.emplace(jobs[i].id, i);
    }
    for (auto& s : servers) {
      ExecServer e;
      e.role = s.pool == sched::Pool::kTraining ? sched::ServerState::kAvailable : sched::ServerState::kHeld;
      if (s.pool == sched::Pool::kTraining) {
        training_gpus_ += s.gpus;
      } else {
        inference_gpus_ += s.gpus;
        ++inference_servers_;
        ++held_servers_;
      }
      server_index_.emplace(s.id, servers_.size());
      e.spec = std::move(s);
      servers_.push_back(std::move(e));
    }
    if (!jobs.empty()) {
      span_lo_ = jobs.front().submit_time;
      span_hi_ = jobs.back().submit_time;
    }
    if (const sched::QueueConfig* queues = config_.scheduler.queues.get()) {
      meter_ = std::make_unique<QueueMeter>(*queues, config_.training.groups.front().gpu_type,
                                            config_.scheduler.quota_reclaim_deadline, span_lo_);
      for (const auto& j : jobs) queue_of_.push_back(queues->Find(j.queue));
    }
  }

  Result<RunResult> Execute(const std::string& policy);

 private:
  Status Send(sched::Event event);
  Status ExecuteAction(const sched::Action& action, double t);
  // The plan hook (tests), then every action in order.
  Status ExecutePlan(sched::Plan& plan, double t);
  Status Place(ExecJob& job, const sched::Placement& placement, const char* what);
  void Release(ExecJob& job);
  void AdvanceJob(ExecJob& job, double t);
  void AdvanceClock(double t);
  Status HandleDemand(double t);
  Status FinishJob(sched::JobId id, double t);
  Status CheckDeadlines(double t);
  // Without the oracle: the measurements due by t (speed_feed.h), each with
  // the job's progress, then the refitted curves to the core.
  Status MeasureSpeeds(double t);
  void Sample(double t);
  // Re-estimates a running job's finish time after its placement changed.
  void Reestimate(ExecJob& job);
  // The executor's earliest estimated completion (stale entries dropped).
  const Completion* NextCompletion();
  ExecJob* Find(sched::JobId id) {
    auto it = index_.find(id);
    return it == index_.end() ? nullptr : &jobs_[it->second];
  }
  // Teams: the job's queue index (-1 without queues), and the GPUs it waits
  // for while queued (teams.h).
  int QueueOf(const ExecJob& j) const { return meter_ ? queue_of_[&j - jobs_.data()] : -1; }
  void Waiting(const ExecJob& j, int sign) {
    if (!meter_) return;
    const sched::JobSpec& s = *j.spec;
    const int requested = s.kind == sched::JobKind::kInelastic ? s.min_workers
                          : s.requested_workers > 0            ? s.requested_workers
                                                               : s.max_workers;
    meter_->Waiting(QueueOf(j), sign * (elastic_ && s.kind == sched::JobKind::kElastic ? s.min_workers : requested));
  }
  std::string JobName(const ExecJob& j) const {
    return "job " + std::to_string(j.spec->id) + " ('" + j.spec->name + "')";
  }

  const SimConfig& config_;
  const DemandCurve& demand_;
  const sched::ThroughputCatalog& catalog_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  const bool elastic_;  // the policy resizes jobs (Scheduler::elastic)
  std::unique_ptr<internal::SpeedFeed> feed_;  // null with the oracle

  std::vector<ExecJob> jobs_;
  std::unordered_map<sched::JobId, std::size_t> index_;
  std::vector<ExecServer> servers_;
  std::unordered_map<sched::ServerId, std::size_t> server_index_;
  int training_gpus_ = 0;
  int inference_gpus_ = 0;
  int inference_servers_ = 0;

  // Current state.
  double now_ = 0;
  int held_servers_ = 0;
  int loaned_servers_ = 0;
  int demand_servers_ = 0;
  int busy_training_ = 0;
  int busy_loaned_ = 0;
  int queued_ = 0;
  int running_ = 0;
  std::int64_t finished_ = 0;
  std::deque<PendingReclaim> pending_reclaims_;
  std::priority_queue<Completion> completions_;

  // Measurements.
  double span_lo_ = 0;
  double span_hi_ = 0;
  double train_busy_span_ = 0;     // GPU-s on training servers within the span
  double all_busy_span_ = 0;       // GPU-s of training jobs anywhere within the span
  double served_span_ = 0;         // GPU-s of inference servers serving demand within the span
  double train_busy_total_ = 0;    // the same over the whole run
  double all_busy_total_ = 0;
  double served_total_ = 0;
  double loaned_busy_total_ = 0;   // GPU-s of training jobs on loaned servers
  double useful_gpu_s_ = 0;        // GPU-s of progress kept
  double norm_gpu_s_ = 0;          // the same at training-GPU speed
  double lost_gpu_s_ = 0;          // GPU-s of progress lost to preemptions
  double rescale_pause_gpu_s_ = 0; // GPU-s of the pauses resizes added
  std::int64_t preemptions_ = 0;
  std::int64_t rescales_ = 0;
  std::int64_t reclaims_ = 0;
  std::int64_t reclaims_late_ = 0;
  double next_sample_ = kInf;
  double last_event_time_ = -kInf;  // when the core last heard of anything
  std::vector<TimelineSample> timeline_;
  std::unique_ptr<QueueMeter> meter_;  // with queues only
  std::vector<int> queue_of_;          // per job (jobs_ order): its queue index
};

void Run::AdvanceJob(ExecJob& job, double t) {
  if (job.status != ExecJob::Status::kRunning || t <= job.last_update) {
    job.last_update = std::max(job.last_update, t);
    return;
  }
  const double from = std::max(job.last_update, job.paused_until);
  auto remaining_at = [&](double when) {
    return std::max(0.0, job.remaining - job.rate * std::max(0.0, when - from));
  };
  const double interval = config_.scheduler.checkpoint_interval;
  if (interval > 0 && t >= job.ckpt_time + interval) {
    const double n = std::floor((t - job.ckpt_time) / interval);
    const double ck = job.ckpt_time + n * interval;
    job.ckpt_remaining = remaining_at(ck);
    job.ckpt_time = ck;
  }
  const double after = remaining_at(t);
  const double done = job.remaining - after;
  useful_gpu_s_ += done / job.rate * job.workers;
  norm_gpu_s_ += done * job.norm_per_iter;
  job.executed += done;
  job.remaining = after;
  job.last_update = t;
}

void Run::Reestimate(ExecJob& job) {
  ++job.version;
  if (job.status != ExecJob::Status::kRunning || !(job.rate > 0)) return;
  const double t = std::max(job.last_update, job.paused_until) + job.remaining / job.rate;
  completions_.push({t, job.spec->id, job.version});
}

const Completion* Run::NextCompletion() {
  while (!completions_.empty()) {
    const Completion& c = completions_.top();
    const ExecJob* job = Find(c.job);
    if (job != nullptr && job->version == c.version && job->status == ExecJob::Status::kRunning) return &c;
    completions_.pop();
  }
  return nullptr;
}

void Run::Sample(double t) {
  TimelineSample s;
  s.time = t;
  s.queued_jobs = queued_;
  s.running_jobs = running_;
  s.busy_training_gpus = busy_training_;
  s.busy_loaned_gpus = busy_loaned_;
  s.loaned_servers = loaned_servers_;
  s.demand_servers = demand_servers_;
  s.held_servers = held_servers_;
  timeline_.push_back(s);
}

void Run::AdvanceClock(double t) {
  if (t <= now_) return;
  while (next_sample_ < t) {
    Sample(next_sample_);
    next_sample_ += config_.timeline_interval;
  }
  const double per_server = inference_servers_ > 0 ? static_cast<double>(inference_gpus_) / inference_servers_ : 0;
  const double served = std::min(demand_servers_, held_servers_) * per_server;
  const double dt = t - now_;
  if (meter_) meter_->Advance(t);
  train_busy_total_ += busy_training_ * dt;
  all_busy_total_ += (busy_training_ + busy_loaned_) * dt;
  served_total_ += served * dt;
  loaned_busy_total_ += busy_loaned_ * dt;
  const double lo = std::max(now_, span_lo_);
  const double hi = std::min(t, span_hi_);
  if (hi > lo) {
    const double sdt = hi - lo;
    train_busy_span_ += busy_training_ * sdt;
    all_busy_span_ += (busy_training_ + busy_loaned_) * sdt;
    served_span_ += served * sdt;
  }
  now_ = t;
}

Status Run::Place(ExecJob& job, const sched::Placement& placement, const char* what) {
  const sched::JobSpec& spec = *job.spec;
  int workers = 0;
  double rate = kInf;
  for (const auto& [sid, n] : placement) {
    auto it = server_index_.find(sid);
    if (it == server_index_.end())
      return Status::Internal(std::string(what) + " " + JobName(job) + " on unknown server " + std::to_string(sid));
    const ExecServer& s = servers_[it->second];
    if (n <= 0)
      return Status::Internal(std::string(what) + " " + JobName(job) + ": " + std::to_string(n) + " workers on " +
                              s.spec.name);
    if (s.role != sched::ServerState::kAvailable && s.role != sched::ServerState::kLoaned)
      return Status::Internal("fidelity: " + std::string(what) + " " + JobName(job) + " on " + s.spec.name +
                              ", which is held by inference, at t=" + Num(now_));
    if (s.used + n > s.spec.gpus)
      return Status::Internal("fidelity: GPU double-booked: " + std::string(what) + " " + JobName(job) + " puts " +
                              std::to_string(n) + " workers on " + s.spec.name + " (" + std::to_string(s.used) +
                              " of " + std::to_string(s.spec.gpus) + " GPUs in use) at t=" + Num(now_));
    workers += n;
  }
  if (config_.scheduler.hetero_dp) {
    // Batch shares proportional to speed (SchedulerConfig::hetero_dp).
    rate = 0;
    for (const auto& [sid, n] : placement) {
      const double t = catalog_.Throughput(spec.model, servers_[server_index_[sid]].spec.gpu_type, workers);
      if (!(t > 0)) {
        rate = 0;
        break;
      }
      rate += n * t / workers;
    }
  } else {
    for (const auto& [sid, n] : placement) {
      rate = std::min(rate, catalog_.Throughput(spec.model, servers_[server_index_[sid]].spec.gpu_type, workers));
    }
  }
  if (placement.empty() || !(rate > 0) || !std::isfinite(rate))
    return Status::Internal(std::string(what) + " " + JobName(job) + " at " + std::to_string(workers) +
                            " workers, a size its model '" + spec.model + "' does not allow");
  if (workers < spec.min_workers || workers > spec.max_workers)
    return Status::Internal("fidelity: " + std::string(what) + " " + JobName(job) + " at " + std::to_string(workers) +
                            " workers, outside [" + std::to_string(spec.min_workers) + ", " +
                            std::to_string(spec.max_workers) + "]");
  // Without elasticity every job runs at the size its user asked for, always.
  const int requested = spec.kind == sched::JobKind::kInelastic ? spec.min_workers
                        : spec.requested_workers > 0            ? spec.requested_workers
                                                                : spec.max_workers;
  if (!elastic_ && workers != requested)
    return Status::Internal("fidelity: " + std::string(what) + " " + JobName(job) + " at " + std::to_string(workers) +
                            " workers under a non-elastic policy; it asked for " + std::to_string(requested));
  for (const auto& [sid, n] : placement) {
    ExecServer& s = servers_[server_index_[sid]];
    s.used += n;
    (s.role == sched::ServerState::kLoaned ? busy_loaned_ : busy_training_) += n;
    if (meter_) {
      const bool loaned = s.role == sched::ServerState::kLoaned;
      meter_->Held(QueueOf(job), loaned ? 0 : n, loaned ? n : 0);
    }
    const std::string& type = s.spec.gpu_type;
    if (("|" + job.gpu_types + "|").find("|" + type + "|") == std::string::npos)
      job.gpu_types += (job.gpu_types.empty() ? "" : "|") + type;
  }
  job.placement = placement;
  job.workers = workers;
  job.rate = rate;
  // The same iterations on training GPUs at this size (its own rate where the
  // training type does not allow the size).
  const double ref = catalog_.Throughput(spec.model, config_.training.groups.front().gpu_type, workers);
  job.norm_per_iter = workers / (ref > 0 ? ref : rate);
  job.run_since = now_;
  return Status::Ok();
}

void Run::Release(ExecJob& job) {
  job.held += now_ - job.run_since;
  for (const auto& [sid, n] : job.placement) {
    ExecServer& s = servers_[server_index_[sid]];
    s.used -= n;
    (s.role == sched::ServerState::kLoaned ? busy_loaned_ : busy_training_) -= n;
    if (meter_) {
      const bool loaned = s.role == sched::ServerState::kLoaned;
      meter_->Held(QueueOf(job), loaned ? 0 : -n, loaned ? -n : 0);
    }
  }
  job.placement.clear();
  job.workers = 0;
  job.rate = 0;
}

Status Run::ExecuteAction(const sched::Action& a, double t) {
  using sched::ActionType;
  if (a.type == ActionType::kReturnServer) {
    auto it = server_index_.find(a.server);
    if (it == server_index_.end()) return Status::Internal("return of unknown server " + std::to_string(a.server));
    ExecServer& s = servers_[it->second];
    if (s.role != sched::ServerState::kLoaned)
      return Status::Internal("fidelity: return of " + s.spec.name + ", which is not loaned, at t=" + Num(t));
    if (s.used != 0)
      return Status::Internal("fidelity: " + s.spec.name + " returned to inference with " + std::to_string(s.used) +
                              " GPUs still in use at t=" + Num(t));
    s.role = sched::ServerState::kHeld;
    --loaned_servers_;
    ++held_servers_;
    if (!pending_reclaims_.empty()) {
      if (--pending_reclaims_.front().outstanding == 0) pending_reclaims_.pop_front();
    }
    return Status::Ok();
  }
  ExecJob* job = Find(a.job);
  if (job == nullptr) return Status::Internal("action on unknown job " + std::to_string(a.job));
  switch (a.type) {
    case ActionType::kStart: {
      if (job->status != ExecJob::Status::kQueued)
        return Status::Internal("fidelity: start of " + JobName(*job) + ", which is not queued, at t=" + Num(t));
      ARYL_RETURN_IF_ERROR(Place(*job, a.placement, "start of"));
      job->status = ExecJob::Status::kRunning;
      job->last_update = t;
      job->paused_until = t + (job->preemptions == 0 ? 0
                               : job->suspended   ? config_.scheduler.resume_pause
                                                  : config_.scheduler.restart_pause);
      job->ckpt_time = t;
      job->ckpt_remaining = job->remaining;
      if (job->first_start < 0) job->first_start = t;
      Waiting(*job, -1);
      Reestimate(*job);
      if (feed_) feed_->Placed(a.job, job->paused_until + config_.speed_window);
      --queued_;
      ++running_;
      return Status::Ok();
    }
    case ActionType::kResize: {
      if (job->status != ExecJob::Status::kRunning)
        return Status::Internal("fidelity: resize of " + JobName(*job) + ", which is not running, at t=" + Num(t));
      AdvanceJob(*job, t);
      sched::Placement old = job->placement;
      Release(*job);
      Status placed = Place(*job, a.placement, "resize of");
      if (!placed.ok()) return placed;
      ++job->rescales;
      {
        const double paused_from = std::max(job->paused_until, t);
        job->paused_until = std::max(job->paused_until, t + config_.scheduler.RescalePause(*job->spec));
        rescale_pause_gpu_s_ += (job->paused_until - paused_from) * job->workers;
      }
      job->ckpt_time = t;
      job->ckpt_remaining = job->remaining;
      Reestimate(*job);
      if (feed_) feed_->Placed(a.job, job->paused_until + config_.speed_window);
      ++rescales_;
      return Status::Ok();
    }
    case ActionType::kPreempt: {
      if (job->status != ExecJob::Status::kRunning)
        return Status::Internal("fidelity: preemption of " + JobName(*job) + ", which is not running, at t=" + Num(t));
      AdvanceJob(*job, t);
      job->suspended = a.suspend;
      if (a.suspend) job->ckpt_remaining = job->remaining;  // checkpointed as it stops
      const double lost = std::max(0.0, job->ckpt_remaining - job->remaining);
      // The placement has not changed since the checkpoint (starts and resizes
      // checkpoint), so the lost iterations ran at the current rate and size.
      useful_gpu_s_ -= lost / job->rate * job->workers;
      lost_gpu_s_ += lost / job->rate * job->workers;
      norm_gpu_s_ -= lost * job->norm_per_iter;
      job->lost += lost;
      Release(*job);
      job->remaining = std::max(job->remaining, job->ckpt_remaining);
      job->status = ExecJob::Status::kQueued;
      Waiting(*job, +1);
      job->paused_until = t;
      ++job->preemptions;
      ++job->version;
      if (feed_) feed_->Stopped(a.job);
      ++preemptions_;
      --running_;
      ++queued_;
      return Status::Ok();
    }
    case ActionType::kReturnServer:
      break;
  }
  return Status::Internal("unknown action type");
}

Status Run::Send(sched::Event event) {
  const double t = event.time;
  last_event_time_ = t;
  Result<sched::Plan> plan = scheduler_->Handle(event);
  if (!plan.ok()) return plan.status().WithContext("scheduler at t=" + Num(t));
  return ExecutePlan(*plan, t);
}

Status Run::ExecutePlan(sched::Plan& plan, double t) {
  if (config_.plan_hook) config_.plan_hook(plan);
  for (const sched::Action& a : plan.actions) {
    Status s = ExecuteAction(a, t);
    if (!s.ok()) return s.WithContext("plan action '" + a.reason + "'");
  }
  return Status::Ok();
}

Status Run::FinishJob(sched::JobId id, double t) {
  ExecJob* job = Find(id);
  if (job == nullptr) return Status::Internal("core reports completion of unknown job " + std::to_string(id));
  if (job->status != ExecJob::Status::kRunning)
    return Status::Internal("fidelity: " + JobName(*job) + " finishes but is not running (finished twice?) at t=" +
                            Num(t));
  AdvanceJob(*job, t);
  const double tolerance = 1e-6 * job->spec->total_work + 1e-6;
  if (job->remaining > tolerance)
    return Status::Internal("fidelity: the core finishes " + JobName(*job) + " at t=" + Num(t) + " but " +
                            Num(job->remaining) + " of " + Num(job->spec->total_work) +
                            " iterations remain by the simulator's account");
  // The core's own estimate must agree with the executor's (with the oracle:
  // otherwise the core's speeds are estimates).
  const double core_estimate = scheduler_->state().EstimatedFinishTime(id);
  if (!feed_ && !(std::fabs(core_estimate - t) <= 1e-3 + 1e-9 * std::fabs(t)))
    return Status::Internal("fidelity: the simulator finishes " + JobName(*job) + " at t=" + Num(t) +
                            " but the core estimates t=" + Num(core_estimate));
  Release(*job);
  ++job->version;
  job->status = ExecJob::Status::kFinished;
  job->finish = t;
  --running_;
  ++finished_;
  ARYL_RETURN_IF_ERROR(Send({t, sched::JobFinished{id}}));
  if (feed_) feed_->Finished(id);
  return Status::Ok();
}

Status Run::MeasureSpeeds(double t) {
  for (sched::JobId id : feed_->Due(t)) {
    ExecJob* job = Find(id);
    if (job == nullptr || job->status != ExecJob::Status::kRunning) continue;
    AdvanceJob(*job, t);
    if (feed_->learning()) {
      // The slowest type sets the pace (hetero_dp: single-type placements only).
      std::string type;
      double slowest = kInf;
      bool mixed = false;
      for (const auto& [sid, n] : job->placement) {
        const std::string& name = servers_[server_index_[sid]].spec.gpu_type;
        mixed = mixed || (!type.empty() && name != type);
        const double r = catalog_.Throughput(job->spec->model, name, job->workers);
        if (r < slowest) {
          slowest = r;
          type = name;
        }
      }
      if (!(config_.scheduler.hetero_dp && mixed)) {
        ARYL_ASSIGN_OR_RETURN(bool refit, feed_->Measure(id, type, job->workers,
                                                         static_cast<int>(job->placement.size()), 1.0 / job->rate));
        if (refit) {
          Status st = scheduler_->RefreshSpeed(t, id);
          if (!st.ok()) return st.WithContext("speed refresh at t=" + Num(t));
        }
      }
    }
    // Apply, not Handle: no round per report (the next event has one), but
    // the report's own actions (a job left to finish that now will not) run.
    Result<sched::Plan> p = scheduler_->Apply({t, sched::JobProgress{id, job->remaining}});
    if (!p.ok()) return p.status().WithContext("progress at t=" + Num(t));
    ARYL_RETURN_IF_ERROR(ExecutePlan(*p, t));
  }
  return Status::Ok();
}

Status Run::HandleDemand(double t) {
  demand_servers_ = std::min(demand_.At(t), inference_servers_);
  int pending = 0;
  for (const auto& p : pending_reclaims_) pending += p.outstanding;
  const int want_back = demand_servers_ - held_servers_ - pending;
  if (want_back > 0) {
    const int k = std::min(want_back, loaned_servers_ - pending);
    if (k <= 0) return Status::Ok();
    ++reclaims_;
    pending_reclaims_.push_back({t + config_.reclaim_deadline, k});
    sched::Reclaim r;
    r.count = k;
    r.deadline = t + config_.reclaim_deadline;
    return Send({t, r});
  }
  const int surplus = held_servers_ - demand_servers_;
  if (surplus > 0 && pending == 0) {
    sched::ServersLoaned loan;
    for (auto it = servers_.rbegin(); it != servers_.rend() && static_cast<int>(loan.servers.size()) < surplus; ++it) {
      if (it->role == sched::ServerState::kHeld) loan.servers.push_back(it->spec.id);
    }
    std::sort(loan.servers.begin(), loan.servers.end());
    last_event_time_ = t;
    Result<sched::Plan> plan = scheduler_->Handle({t, loan});
    if (!plan.ok()) return plan.status().WithContext("scheduler at t=" + Num(t) + " (loan)");
    if (config_.plan_hook) config_.plan_hook(*plan);
    // Roles change before the plan runs: the plan may already use the loaned servers.
    for (sched::ServerId id : loan.servers) {
      servers_[server_index_[id]].role = sched::ServerState::kLoaned;
      --held_servers_;
      ++loaned_servers_;
    }
    for (const sched::Action& a : plan->actions) {
      Status s = ExecuteAction(a, t);
      if (!s.ok()) return s.WithContext("plan action '" + a.reason + "'");
    }
  }
  return Status::Ok();
}

Status Run::CheckDeadlines(double t) {
  for (const auto& p : pending_reclaims_) {
    if (p.deadline <= t && p.outstanding > 0) {
      ++reclaims_late_;
      return Status::Internal("fidelity: a reclaim due at t=" + Num(p.deadline) + " still misses " +
                              std::to_string(p.outstanding) + " servers at t=" + Num(t));
    }
  }
  return Status::Ok();
}

Result<RunResult> Run::Execute(const std::string& policy) {
  const auto wall_start = std::chrono::steady_clock::now();
  const std::size_t n = jobs_.size();
  ProgressBar bar(policy, static_cast<double>(n), config_.progress);
  std::size_t next_arrival = 0;
  now_ = n > 0 ? jobs_.front().spec->submit_time : 0;
  if (config_.timeline_interval > 0) next_sample_ = now_;
  double stall_since = -1;

  ARYL_RETURN_IF_ERROR(HandleDemand(now_));
  while (true) {
    if (next_arrival == n && finished_ == static_cast<std::int64_t>(n)) break;
    const double t_arrival = next_arrival < n ? jobs_[next_arrival].spec->submit_time : kInf;
    double t_completion = kInf;
    if (const Completion* c = NextCompletion()) t_completion = std::max(now_, c->time);
    const double t_demand = inference_servers_ > 0 ? demand_.NextChange(now_) : kInf;
    // A tick is due `tick` seconds after the core last heard of anything, while jobs
    // are queued or running: rounds happen at least that often, never in between.
    const bool active = queued_ > 0 || running_ > 0;
    const double t_tick = active && config_.tick > 0 ? last_event_time_ + config_.tick : kInf;
    const double t_deadline = pending_reclaims_.empty() ? kInf : pending_reclaims_.front().deadline;
    // A round the policy asked for (tiresias: the next demotion or promotion),
    // as of the last event; one not after it would never be sent (no spin).
    const double wakeup = scheduler_->NextWakeup();
    const double t_wakeup = active && wakeup > last_event_time_ ? std::max(now_, wakeup) : kInf;
    const double t = std::min({t_arrival, t_completion, t_demand, t_tick, t_deadline, t_wakeup});
    if (!std::isfinite(t)) break;

    AdvanceClock(t);
    if (feed_) ARYL_RETURN_IF_ERROR(MeasureSpeeds(t));
    // 1. Completions due now (each may start others; re-ask the core every time).
    while (true) {
      const Completion* c = NextCompletion();
      if (c == nullptr || c->time > t) break;
      const sched::JobId id = c->job;
      completions_.pop();
      ARYL_RETURN_IF_ERROR(FinishJob(id, t));
    }
    // 2. Inference demand.
    if (t_demand <= t) ARYL_RETURN_IF_ERROR(HandleDemand(t));
    // 3. Arrivals.
    while (next_arrival < n && jobs_[next_arrival].spec->submit_time <= t) {
      ExecJob& job = jobs_[next_arrival++];
      job.status = ExecJob::Status::kQueued;
      job.last_update = t;
      Waiting(job, +1);
      ++queued_;
      if (feed_) ARYL_RETURN_IF_ERROR(feed_->Submitted(*job.spec));
      ARYL_RETURN_IF_ERROR(Send({t, sched::JobSubmitted{*job.spec}}));
    }
    // 4. Periodic rebalancing.
    if ((t_tick <= t || t_wakeup <= t) && last_event_time_ < t) ARYL_RETURN_IF_ERROR(Send({t, sched::Tick{}}));
    ARYL_RETURN_IF_ERROR(CheckDeadlines(t));
    bar.Update(static_cast<double>(finished_));

    // A queue that can never drain (nothing running, nothing arriving).
    if (running_ == 0 && next_arrival == n && queued_ > 0) {
      if (stall_since < 0) stall_since = t;
      if (t - stall_since > config_.stall_limit) break;
    } else {
      stall_since = -1;
    }
  }
  bar.Finish();

  // --- End-of-run fidelity checks ---
  if (finished_ != static_cast<std::int64_t>(n)) {
    for (const ExecJob& j : jobs_) {
      if (j.status != ExecJob::Status::kFinished) {
        return Status::Internal("fidelity: " + std::to_string(n - finished_) + " of " + std::to_string(n) +
                                " jobs never finished under " + policy + "; first: " + JobName(j) + " (" +
                                std::to_string(j.spec->min_workers) + ".." + std::to_string(j.spec->max_workers) +
                                " GPUs, submitted at t=" + Num(j.spec->submit_time) + ")");
      }
    }
  }
  long double submitted = 0;
  long double done = 0;
  for (const ExecJob& j : jobs_) {
    submitted += j.spec->total_work;
    done += j.executed - j.lost;
  }
  if (std::fabs(static_cast<double>(done - submitted)) > 1e-6 * static_cast<double>(submitted) + 1e-6)
    return Status::Internal("fidelity: work done " + Num(static_cast<double>(done)) + " != work submitted " +
                            Num(static_cast<double>(submitted)) + " iterations");
  for (const ExecServer& s : servers_) {
    if (s.used != 0) return Status::Internal("fidelity: " + s.spec.name + " still has GPUs in use after the run");
  }
  if (!pending_reclaims_.empty())
    return Status::Internal("fidelity: " + std::to_string(pending_reclaims_.size()) + " reclaims still open at the end");
  if (config_.timeline_interval > 0) Sample(now_);

  RunResult result;
  RunMetrics& m = result.metrics;
  m.policy = policy;
  std::vector<JobOutcome> outcomes;
  outcomes.reserve(n);
  for (const ExecJob& j : jobs_) {
    outcomes.push_back({j.spec->submit_time, j.first_start, j.finish, j.held, j.spec->name, j.preemptions,
                        j.rescales, j.gpu_types});
  }
  result.jcts = SummarizeJobs(outcomes, m);
  if (meter_) m.queues = meter_->Finish(outcomes, queue_of_);
  result.jobs = std::move(outcomes);
  const double span = span_hi_ - span_lo_;
  const double total = now_ - span_lo_;
  const bool use_span = span > 0;
  const double duration = use_span ? span : total;
  if (duration > 0) {
    m.training_usage = training_gpus_ > 0 ? (use_span ? train_busy_span_ : train_busy_total_) /
                                                 (static_cast<double>(training_gpus_) * duration)
                                           : 0;
    m.overall_usage = ((use_span ? all_busy_span_ + served_span_ : all_busy_total_ + served_total_)) /
                      (static_cast<double>(training_gpus_ + inference_gpus_) * duration);
  }
  m.loaned_gpu_hours = loaned_busy_total_ / 3600.0;
  m.allocated_gpu_hours = all_busy_total_ / 3600.0;
  m.useful_gpu_hours = useful_gpu_s_ / 3600.0;
  m.useful_norm_gpu_hours = norm_gpu_s_ / 3600.0;
  m.wasted_gpu_hours = (all_busy_total_ - useful_gpu_s_) / 3600.0;
  m.lost_gpu_hours = lost_gpu_s_ / 3600.0;
  m.preemptions = preemptions_;
  m.rescales = rescales_;
  m.rescale_pause_gpu_hours = rescale_pause_gpu_s_ / 3600.0;
  m.reclaims = reclaims_;
  m.reclaims_late = reclaims_late_;
  m.end_time_s = now_;
  m.sim_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.timeline = std::move(timeline_);
  return result;
}

}  // namespace

Simulator::Simulator(SimConfig config, std::vector<sched::JobSpec> jobs, DemandCurve demand,
                     std::shared_ptr<const sched::ThroughputCatalog> catalog)
    : config_(std::move(config)), jobs_(std::move(jobs)), demand_(std::move(demand)), catalog_(std::move(catalog)) {
  std::stable_sort(jobs_.begin(), jobs_.end(),
                   [](const sched::JobSpec& a, const sched::JobSpec& b) { return a.submit_time < b.submit_time; });
}

Result<RunResult> Simulator::Run(const std::string& policy) const {
  std::vector<sched::ServerSpec> servers = BuildServers(config_.training, config_.inference);
  // Without the oracle the policy sees the linear catalog (which sizes are
  // allowed), and, when learning, the fitted curves over it.
  std::shared_ptr<const sched::ThroughputCatalog> seen = catalog_;
  sched::SchedulerConfig core = config_.scheduler;
  std::unique_ptr<internal::SpeedFeed> feed;
  if (config_.speed_knowledge != SpeedKnowledge::kOracle) {
    seen = internal::LinearCatalog(*catalog_, servers);
    std::shared_ptr<sched::SpeedModels> models;
    if (config_.speed_knowledge == SpeedKnowledge::kLearned) {
      sched::SpeedModelOptions options;
      options.reference_type = config_.training.groups.front().gpu_type;
      models = std::make_shared<sched::SpeedModels>(std::move(options));
      core.speed = models;
    }
    feed = std::make_unique<internal::SpeedFeed>(config_, std::move(models));
  }
  ARYL_ASSIGN_OR_RETURN(std::unique_ptr<sched::Scheduler> scheduler,
                        sched::Scheduler::Create(policy, servers, seen, core));
  class Run run(config_, jobs_, demand_, *catalog_, std::move(scheduler), std::move(servers), std::move(feed));
  return run.Execute(policy);
}

}  // namespace aryl::sim
