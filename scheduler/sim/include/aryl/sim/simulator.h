// Simulator: replays a workload against a simulated training cluster and
// inference cluster, driving the scheduling core through Scheduler::Handle in
// virtual time, exactly as the live daemon drives it in wall time.
//
// Event loop (one run = one policy):
//   1. The next virtual time is the earliest of: the next job arrival, the next
//      estimated completion (kept by the executor in a heap, O(log n), and checked
//      against ClusterState::EstimatedFinishTime when it fires), the next change
//      of inference demand, the next tick (`tick` seconds after the core last
//      received any event, while jobs are queued or running: a policy round runs
//      at least that often), and the next pending reclaim deadline.
//   2. At one time, events go to the core in this order: completions
//      (JobFinished), demand (a Reclaim of the missing servers due by
//      now + reclaim_deadline when demand rises above what inference holds, or
//      ServersLoaned of the surplus when it falls below), arrivals
//      (JobSubmitted, in trace order), then a Tick when one is due.
//   3. Each Plan is executed action by action on the simulator's own model of
//      the cluster (the "executor"): placements per server, server roles, and
//      each job's progress (throughput of its worker count on its slowest GPU
//      type, restart/rescale pauses, checkpoints, work lost on preemption) kept
//      independently of the core's bookkeeping.
//   4. Fidelity checks (any violation fails the run with an Internal error):
//      a GPU is never double-booked and workers sit only on training servers or
//      servers loaned at that instant (checked after every action); every job
//      finishes exactly once, and at the moment the core declares it finished the
//      executor agrees its work is done (and, with SpeedKnowledge::kOracle,
//      the core's estimate of the finish time agrees with the executor's:
//      otherwise the core's speeds are estimates); at the end, work executed - work lost ==
//      work submitted; every reclaim is met (its servers returned empty) by its
//      deadline.
//   5. Without the oracle (speed_knowledge), the policy sees measured step
//      times instead of the true tables: src/speed_feed.h.
// Metrics are computed from the executor, not from the core (metrics.h).
//
// Thread safety: Run() is const and uses only its own state; runs of different
// policies may proceed on different threads.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/config.h"
#include "aryl/sched/types.h"
#include "aryl/sim/cluster_spec.h"
#include "aryl/sim/demand.h"
#include "aryl/sim/metrics.h"

namespace aryl::sched {
class ThroughputCatalog;
}

namespace aryl::sim {

// What the policy knows of each job's speed (docs/simulator.md, "Speed knowledge").
enum class SpeedKnowledge : std::uint8_t {
  kOracle,   // the true tables (the default)
  kLearned,  // noisy step-time samples at the sizes and types a job ran, fitted
             // by the core's SpeedModels; the true tables only say which sizes are allowed
  kLinear,   // the live daemon's model without tables: throughput = workers, on every type
};
const char* SpeedKnowledgeName(SpeedKnowledge k);

struct SimConfig {
  sched::SchedulerConfig scheduler;
  SpeedKnowledge speed_knowledge = SpeedKnowledge::kOracle;
  double speed_noise = 0.05;   // learned: log-space std of a measured median step time
  double speed_window = 60;    // learned: seconds a configuration runs before it is measured
  PoolSpec training;
  PoolSpec inference;
  double reclaim_deadline = 300;    // seconds from the reclaim to its deadline
  double tick = 600;                // longest gap between policy rounds; 0 = none
  double timeline_interval = 3600;  // seconds between timeline samples; 0 = none
  // A run with nothing running, no arrivals left and jobs still queued (they can
  // never fit) fails after this much virtual time.
  double stall_limit = 14 * 86400.0;
  bool progress = true;             // progress bar when stderr is a terminal
  // For tests only: alters each plan before the executor runs it (the core has
  // already applied the original), so tests can show that the fidelity checks
  // catch a scheduler that double-books a GPU or skips a reclaim.
  std::function<void(sched::Plan&)> plan_hook;
};

class Simulator {
 public:
  Simulator(SimConfig config, std::vector<sched::JobSpec> jobs, DemandCurve demand,
            std::shared_ptr<const sched::ThroughputCatalog> catalog);

  // One full run of `policy` (a name accepted by Scheduler::Create).
  Result<RunResult> Run(const std::string& policy) const;

  const SimConfig& config() const { return config_; }
  const std::vector<sched::JobSpec>& jobs() const { return jobs_; }

 private:
  SimConfig config_;
  std::vector<sched::JobSpec> jobs_;
  DemandCurve demand_;
  std::shared_ptr<const sched::ThroughputCatalog> catalog_;
};

}  // namespace aryl::sim
