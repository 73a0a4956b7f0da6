// Scheduler: the one entry point drivers (aryl-sim, aryl-scheduler) use.
//
// A Scheduler owns the cluster state and a Policy. Handle(event) validates the
// event (a bad event returns an error and leaves the state unchanged), asks the
// policy for a Plan, applies every action through ClusterState::Apply (the one
// code path that mutates state) and returns the plan for the driver to execute.
// Deterministic: the same sequence of events gives the same plans.
//
// Thread safety: not thread-safe; a driver calls it from one thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/types.h"

namespace aryl::sched {

class ClusterState;     // state.h
class Policy;           // policy.h
class ThroughputCatalog;  // throughput.h

struct SchedulerConfig {
  Seconds rescale_pause = 30;       // cost of one rescale (s)
  Seconds restart_pause = 60;       // cost of a restart after preemption (s)
  Seconds checkpoint_interval = 1800;  // work since the last checkpoint is lost on preemption
  bool fifo = false;                // admission order: SJF (default) or FIFO
  bool inelastic_on_loaned = true;  // inelastic jobs may use loaned servers when no training server fits
};

class Scheduler {
 public:
  // `policy` names one of PolicyNames().
  static Result<std::unique_ptr<Scheduler>> Create(const std::string& policy,
                                                   std::vector<ServerSpec> servers,
                                                   std::shared_ptr<const ThroughputCatalog> thr,
                                                   SchedulerConfig config = {});
  ~Scheduler();

  Result<Plan> Handle(const Event& event);
  const ClusterState& state() const;
  const std::string& policy_name() const;

 private:
  Scheduler();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "aryl", "baseline", "loan-only", "elastic-only", "optimus", "afs", "tiresias", ...
std::vector<std::string> PolicyNames();

}  // namespace aryl::sched
