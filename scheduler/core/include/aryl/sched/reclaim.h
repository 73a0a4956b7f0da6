// Reclaim: choosing which loaned servers to give back, and what that costs.
//
// Cost of returning a set of servers (jointly):
//   - a job with workers there that can drop them and stay at an allowed size
//     >= its base size (an elastic job, under a policy that resizes jobs) is
//     shrunk: no preemption; lost GPU-time = its remaining workers x rescale_pause;
//   - any other job is preempted: lost GPU-time = its workers x (time since its
//     last checkpoint + restart_pause); or, when a checkpoint on notice fits
//     before the deadline (SchedulerConfig::CheckpointSeconds(state_bytes) <=
//     deadline - now) and costs less, it checkpoints first (Action::suspend):
//     lost GPU-time = its workers x (checkpoint time + resume_pause), no work
//     lost;
//   - a job that finishes before the deadline with time to spare for its
//     checkpoint (SchedulerConfig::reclaim_lets_jobs_finish) costs nothing: it
//     is left to finish and its servers are returned when they empty
//     (ReclaimDecision::waiting; the Scheduler returns them, see scheduler.h).
//   The cost of a given set of servers never grows with the notice. Costs
//   compare by (preemptions, lost GPU-time).
//
// Strategies (all return idle loaned servers first, failed ones included):
//   - greedy (Aryl): return the busy server of least cost, apply its shrinks and
//     preemptions (a preempted job frees its workers elsewhere, lowering other
//     servers' costs), recompute, repeat until enough are returned. Run at no
//     notice and at each notice where some job's cost changes (up to
//     kMaxNoticeSteps of them), the cheapest choice at the real notice wins:
//     a longer notice keeps every choice a shorter one had, so it never costs
//     more;
//   - random: busy servers in a seeded random order;
//   - fewest-gpus: busy servers with the fewest used GPUs first;
//   - exact: every subset of the busy servers of the needed size, least joint
//     cost (small instances only; above SchedulerConfig::exact_reclaim_limit
//     subsets it falls back to greedy and says so in the actions' reason).
// A reclaim is never refused or late: its actions are in the plan answering it
// (servers waiting for jobs left to finish are returned later, by the deadline).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/types.h"

namespace aryl::sched {

class ClusterState;

enum class ReclaimStrategy : std::uint8_t { kGreedy, kRandom, kFewestGpus, kExact };
const char* ReclaimStrategyName(ReclaimStrategy strategy);
Result<ReclaimStrategy> ParseReclaimStrategy(const std::string& name);

struct ReclaimCost {
  int preemptions = 0;
  double lost_gpu_seconds = 0;
  friend bool operator<(const ReclaimCost& a, const ReclaimCost& b) {
    if (a.preemptions != b.preemptions) return a.preemptions < b.preemptions;
    return a.lost_gpu_seconds < b.lost_gpu_seconds - 1e-9;
  }
};

// Notice steps the greedy strategy tries beyond no notice (the smallest ones).
inline constexpr std::size_t kMaxNoticeSteps = 16;

struct ReclaimDecision {
  std::vector<ServerId> servers;  // to return, in order
  // Shrinks and preemptions, then one kReturnServer per server that they
  // leave empty.
  std::vector<Action> actions;
  // Chosen servers that still hold jobs left to finish (`left`): returned
  // when they empty, by the deadline.
  std::vector<ServerId> waiting;
  std::vector<JobId> left;
  ReclaimCost cost;               // joint cost of `servers`
  int shrinks = 0;
  bool fell_back = false;         // exact was too large; greedy was used
};

// Checks the reclaim against `state` without deciding it: count <= loaned
// servers not already being reclaimed, named servers loaned and not being
// reclaimed, no duplicates, count > 0 or names given.
Status ValidateReclaim(const ClusterState& state, const Reclaim& reclaim);

// Validates the reclaim (ValidateReclaim) and decides it. `seed` drives
// the random strategy. `elastic` is the policy's (Policy::elastic): when false no
// job is shrunk, every job on a returned server is preempted.
Result<ReclaimDecision> DecideReclaim(const ClusterState& state, const Reclaim& reclaim,
                                      ReclaimStrategy strategy, std::uint64_t seed,
                                      bool elastic = true);

// The joint cost of returning `servers` now with `notice` seconds before the
// deadline, and the shrink/preempt actions it takes (without the kReturnServer
// actions); `left` receives the jobs left to finish.
ReclaimCost CostOfReturning(const ClusterState& state, const std::vector<ServerId>& servers,
                            std::vector<Action>* actions = nullptr, int* shrinks = nullptr,
                            bool elastic = true, Seconds notice = 0,
                            std::vector<JobId>* left = nullptr);

}  // namespace aryl::sched
