// SchedulerConfig: the knobs of the scheduling core, shared by the state's cost
// model (pauses, checkpoints) and the policies.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "aryl/sched/types.h"

namespace aryl::sched {

class JobSpeedSource;  // speed_models.h
struct QueueConfig;    // queues.h

struct SchedulerConfig {
  Seconds rescale_pause = 30;          // an in-place rescale stops the job this long (s); no work lost
  Seconds restart_pause = 60;          // a restart after preemption stops the job this long (s),
                                       // and so does a rescale of a Rescale::kRestart job
  // A start after a suspension (a kPreempt with Action::suspend: the job saved a
  // checkpoint as it stopped) stops the job this long while it reloads (s).
  Seconds resume_pause = 10;
  Seconds checkpoint_interval = 1800;  // a running job checkpoints this often (s of wall time
                                       // since its last start or rescale); a preemption loses
                                       // the work done since the last checkpoint
  // A checkpoint on a reclaim's notice takes checkpoint_base + state_bytes /
  // checkpoint_bandwidth seconds. A job that must leave a reclaimed server is
  // checkpointed first (Action::suspend, no work lost) when that fits before the
  // deadline and costs less than losing its work since the last checkpoint.
  Seconds checkpoint_base = 5;
  double checkpoint_bandwidth = 1e9;  // bytes/s
  Seconds CheckpointSeconds(double state_bytes) const {
    return checkpoint_base + (checkpoint_bandwidth > 0 ? state_bytes / checkpoint_bandwidth : 0);
  }
  // A job on a reclaimed server whose estimated finish leaves time for its
  // checkpoint before the deadline (finish + CheckpointSeconds <= deadline)
  // costs nothing and is left to finish: the server is returned when it
  // empties, or, should the job not be done by deadline - its checkpoint time
  // (a slipped estimate), the job leaves then (checkpointed) and the server is
  // returned by the deadline. Needs a driver that sends a Tick at
  // Scheduler::NextWakeup (the simulator does). false: every reclaimed server
  // is returned in the plan answering the reclaim.
  bool reclaim_lets_jobs_finish = true;
  // What one rescale of the job costs it: a kRestart job is stopped and started
  // again (restart_pause), a kInPlace one pauses (rescale_pause).
  Seconds RescalePause(const JobSpec& spec) const {
    return spec.rescale == Rescale::kRestart ? restart_pause : rescale_pause;
  }
  // The resize rule (resize_rule.h; docs/scheduler.md, "Resizes pay for
  // themselves"), for every elastic policy. A voluntary grow of a running job
  // is made only when the progress it adds over min(resize_horizon, the job's
  // remaining time at the new size) beats the progress its pause costs,
  // (pause + resize_margin) x its rate now; the pause is the job's measured
  // one (JobResizeMeasured) when the driver sent it, RescalePause otherwise.
  // A job keeps its size for resize_dwell seconds after a resize unless a
  // forced change (reclaim, failure, drain, a queued job's base demand)
  // moves it. resize_dwell = 0 and resize_margin = 0 with an infinite
  // horizon leave only the knapsack's own pause charge.
  Seconds resize_horizon = 600;  // s: about how long a size lasts (the simulator's round tick)
  Seconds resize_dwell = 60;     // s: >= 2 x the simulated rescale pause, many x a live one
  Seconds resize_margin = 10;    // s of progress on top of the pause (warm-up steps, noise)
  bool fifo = false;                   // admission order: SJF (default) or FIFO
  bool inelastic_on_loaned = true;     // inelastic jobs may use loaned servers when no
                                       // training server fits
  // Admission places a job only on GPU types whose throughput at its size is at
  // least this fraction of its fastest allowed type's (0 = any type). Loaned
  // inference GPUs much slower than the training ones can cost a job more than
  // waiting for a training server (see docs/scheduler.md, "Observed behaviour").
  double min_type_speed = 0;
  // aryl, loan-only, elastic-only: start a job on a slower GPU type only when the
  // estimated completion there beats waiting for its fastest type, and migrate
  // it to the fast type when that frees up and the move pays (docs/scheduler.md,
  // "Slow GPU types"). Other policies ignore it.
  bool type_aware = true;
  // Heterogeneity-aware data parallelism (docs/evaluation.md, "Idle loaned
  // GPUs"): a job may mix GPU types, each worker taking a share of the global
  // batch proportional to its speed (the runtime's weighted gradient average),
  // so a placement runs at sum over types of n_t x thr_t(w) / w instead of the
  // slowest type's thr(w); aryl then gives the loaned GPUs its knapsack leaves
  // idle to elastic jobs of another home type. Off: one type per job.
  bool hetero_dp = false;
  std::uint64_t seed = 1;              // for the `random` reclaim strategy
  // The knapsack is solved exactly (DP over capacity) while groups x capacity x
  // options stays under this many steps; above it, the convex-hull greedy (see
  // knapsack.h) is used.
  std::int64_t knapsack_exact_budget = 20'000'000;
  // The `exact` reclaim strategy enumerates at most this many server subsets;
  // larger instances fall back to the greedy strategy (the action reason says so).
  std::int64_t exact_reclaim_limit = 200'000;
  // tiresias: attained-service thresholds (GPU-seconds) between its priority
  // queues, and the starvation factor (a job that has run and then waited longer
  // than this factor times its running time since it last entered the top queue
  // is promoted back to it; 0 = never). The defaults are the reference
  // simulator's (SymbioticLab/Tiresias, dlas-gpu-2); see docs/scheduler.md.
  std::vector<double> tiresias_thresholds = {3250.0, 7200.0};
  double tiresias_starve_factor = 2.0;
  // Per-job measured speed (speed_models.h): when set, an allowed size's
  // throughput is the source's where it has an opinion, the catalog's
  // otherwise; which sizes are allowed stays the catalog's. The driver owns
  // and updates it, then calls Scheduler::RefreshSpeed. Null: the catalog only.
  std::shared_ptr<const JobSpeedSource> speed;
  // Teams (queues.h): quotas, borrowing, fair share and priority classes for
  // the round-based policies. Null: one implicit queue, no quota rules.
  std::shared_ptr<const QueueConfig> queues;
  // Getting quota back (queues.h, rule 4): a job is not preempted to give
  // quota back within quota_min_runtime seconds of its start, unless the job
  // waiting for its quota has waited quota_reclaim_deadline seconds, which
  // bounds how long a queue under quota with pending work waits for it.
  Seconds quota_min_runtime = 300;
  Seconds quota_reclaim_deadline = 600;
};

}  // namespace aryl::sched
