// The resize rule: when a running elastic job may change size, and where its
// flexible workers go. Every resize pauses the job (SchedulerConfig::
// RescalePause, or what the driver measured), so a resize must pay for that
// pause, and a job must not swing back and forth on every event.
//
// Contract (every elastic round policy: aryl, elastic-only, optimus, afs; the
// simulator and the daemon drive the same code, so both follow it):
//  1. Forced changes are always made, whatever 2 and 3 say: a reclaim's
//     shrinks and preemptions (by its deadline), those of a server that
//     failed or was drained --now (ServerFailed: an agent lost, an
//     operator), a job left to finish on a reclaimed server leaving by the
//     deadline, the job's end, and the admission of a queued job: its base
//     takes GPUs that flexible workers hold, and a round that starts a job
//     with extra workers may shrink jobs in their dwell for them. Flexible
//     workers are lent; a queued job waiting out a dwell would lose more
//     than the shrink's pause costs, and a job started small to wait out
//     another's dwell would grow later, a resize of its own. A worker the
//     runtime loses is regrouped by the runtime, not decided here.
//  2. Dwell: a running job keeps its size for SchedulerConfig::resize_dwell
//     seconds after its last resize, forced or not (JobInfo::last_resize).
//     A start is not a resize: a job may grow onto a loan that arrives just
//     after it started (the grow must still pay, 3). When the dwell holds a
//     job the allocation wanted to change, the GPUs it wanted beyond its
//     current ones stay free (given to another job, they would be taken back
//     when the dwell ends), and the policy asks for a round then
//     (Policy::next_wakeup), so no event is needed to lift it.
//  3. Pays: a voluntary grow of a running job from rate r0 (iterations/s at
//     its placement now) to r1 is made only when
//         (r1 - r0) x H  >  r0 x (P + resize_margin),
//     H = min(resize_horizon, remaining work / r1): the progress it adds
//     before the job ends or the horizon passes (a size rarely lasts longer:
//     loans are reclaimed, jobs arrive) must beat the progress the pause P
//     (ResizePause) costs, plus a margin for warm-up steps and a noisy
//     measurement. The allocation is offered only the grows that pass. A
//     voluntary shrink is made only where the allocation gives the GPUs to a
//     use it values more: the knapsack charges the job's pause to every size
//     but its current one, so a shrink happens when what the GPUs buy
//     elsewhere beats the job's loss plus its pause; optimus and afs shrink
//     by their own priority, held by the dwell only.
//  4. Placement (elastic_alloc.cc): a job keeps its flexible workers where
//     they are; new ones go to its own training servers, then other training
//     servers (best fit), then its own loaned servers, then other loaned ones
//     (best fit): a worker on a training server stays until the policy moves
//     it, one on a loaned server is the first a reclaim takes. A shrink gives
//     back workers on loaned servers first.
// A job just admitted, or migrated to a faster type, starts at the size the
// allocation gives it: its start pays no resize pause.
#pragma once

#include "aryl/sched/config.h"
#include "aryl/sched/state.h"

namespace aryl::sched {

// The pause one resize costs `job`: the driver's measurement when it sent
// one (JobResizeMeasured), SchedulerConfig::RescalePause otherwise.
Seconds ResizePause(const SchedulerConfig& config, const JobInfo& job);

// When `job`'s dwell ends (2): its last resize + resize_dwell; -kNever when
// it was never resized.
Seconds DwellEnd(const SchedulerConfig& config, const JobInfo& job);
inline bool InDwell(const SchedulerConfig& config, const JobInfo& job, Seconds now) {
  return now < DwellEnd(config, job);
}

// Rule 3 in numbers, in iterations: what running at `rate_after` instead of
// `rate_before` adds over the horizon, and what the pause and margin cost.
struct GrowValue {
  double gain = 0;
  double cost = 0;
  bool pays() const { return gain > cost; }
};
// A job that makes no progress now (rate_before <= 0) gains from any rate
// after; a rate after no higher than before never pays.
GrowValue ValueOfGrow(const SchedulerConfig& config, const JobInfo& job, double rate_before,
                      double rate_after);
inline bool GrowPays(const SchedulerConfig& config, const JobInfo& job, double rate_before,
                     double rate_after) {
  return ValueOfGrow(config, job, rate_before, rate_after).pays();
}

}  // namespace aryl::sched
