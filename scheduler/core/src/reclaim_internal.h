// Internal: the pieces of a reclaim decision shared by reclaim.cc (costs,
// the exact and simple strategies) and reclaim_greedy.cc (the greedy one).
#pragma once

#include <vector>

#include "aryl/sched/reclaim.h"
#include "aryl/sched/state.h"

namespace aryl::sched::internal {

// Largest size <= `limit` the job may run at on every GPU type in `placement`
// (by its curves), or 0 when none >= its base size exists.
int LargestAllowedSize(const ClusterState& state, const JobInfo& job, const Placement& placement, int limit);

// Removes `extra` workers from `placement`, loaned servers first (a later reclaim
// is then cheaper), then servers holding the fewest of the job's workers.
void Trim(const ClusterState& state, Placement& placement, int extra);

// GPU-seconds a preemption with `notice` seconds before the deadline costs the
// job: its work since the last checkpoint and the restart pause, or, when a
// checkpoint on notice fits and is cheaper, that checkpoint and the resume
// pause (no work lost). `*save` says which.
double PreemptLoss(const ClusterState& state, const JobInfo& job, Seconds notice, bool* save = nullptr);

// Whether `job` is left to finish on a reclaimed server: it finishes, with
// time to spare for its checkpoint should the estimate slip, within the notice
// (SchedulerConfig::reclaim_lets_jobs_finish). Costs nothing.
bool LeftToFinish(const ClusterState& state, const JobInfo& job, Seconds notice);

// Calls f(notice) for each notice at which `job`'s cost on a reclaimed server
// changes: its checkpoint time (a checkpoint on notice starts to fit,
// PreemptLoss) and, when jobs may finish (reclaim_lets_jobs_finish), the
// notice from which it is left to finish (LeftToFinish). The same
// expressions as theirs; not filtered.
template <typename F>
void ForCostPoints(const ClusterState& state, const JobInfo& job, F&& f) {
  const SchedulerConfig& c = state.config();
  const Seconds ckpt = c.CheckpointSeconds(job.spec.state_bytes);
  f(ckpt);
  if (!c.reclaim_lets_jobs_finish) return;
  const Seconds finish = state.EstimatedFinishTime(job.spec.id);
  if (finish < kNever) f(finish - state.now() + ckpt);
}

// The notices at which some job's cost on `servers` changes (its checkpoint
// starts to fit, or it is left to finish), ascending, those <= `notice` only.
std::vector<Seconds> CostSteps(const ClusterState& state, const std::vector<ServerId>& servers, Seconds notice);

// What happens to `job` (with current placement `cur`) when it loses its workers
// on `removed`: the new placement (empty = preempted).
template <typename Removed>
Placement AfterRemoval(const ClusterState& state, const JobInfo& job, const Placement& cur,
                       const Removed& removed, bool elastic) {
  if (!elastic || !job.elastic()) return {};  // preempted, whatever it keeps
  Placement rest;
  int left = 0;
  for (const auto& [sid, n] : cur) {
    if (!removed(sid)) {
      rest.emplace_hint(rest.end(), sid, n);
      left += n;
    }
  }
  if (left == 0) return {};
  const int size = LargestAllowedSize(state, job, rest, left);
  if (size == 0) return {};
  Trim(state, rest, left - size);
  return rest;
}

// The greedy strategy's choice of `need` of the `busy` servers to return at
// `notice`, after `chosen` (idle servers already taken): the cheapest of its
// choices at no notice and at each notice step up to `notice`, priced at
// `notice` (so a longer notice never costs more).
// Whether the greedy's scan skips the blocks of candidates that cannot hold
// its next choice (on by default; tests compare it with a scan of every
// candidate). Per thread.
void SetGreedyBlockSkip(bool on);

std::vector<ServerId> GreedyReclaim(const ClusterState& state, const std::vector<ServerId>& busy, int need,
                                    bool elastic, Seconds notice, const std::vector<ServerId>& chosen);

}  // namespace aryl::sched::internal
