// Policy: one scheduling policy, a synchronous and deterministic function of the
// state (no sockets, threads or clock).
//
// The Scheduler applies the event to the state first (a queued job, freed GPUs,
// loaned servers), then calls the policy. A policy never mutates the state: it
// returns the actions it wants; the Scheduler orders them (frees before uses),
// applies them through ClusterState::Apply and returns them as the plan. A
// policy may remember what it derived from earlier states (tiresias remembers
// where it promoted a starved job), so replaying the same events rebuilds it.
// Implementations: one file per policy under scheduler/core/policy/.
#pragma once

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/config.h"
#include "aryl/sched/reclaim.h"
#include "aryl/sched/types.h"

namespace aryl::sched {

class ClusterState;

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const std::string& name() const = 0;

  // The round's changes after an event: admissions (kStart), elastic
  // reallocation (kResize), and, for preemptive policies, kPreempt.
  virtual std::vector<Action> Schedule(const ClusterState& state) = 0;

  // Whether training may place workers on loaned servers. Policies that do not
  // loan still answer reclaims (their loaned servers are idle).
  virtual bool uses_loaned_servers() const = 0;

  // The reclaim strategy used to choose servers (see reclaim.h).
  virtual ReclaimStrategy reclaim_strategy() const = 0;

  // Whether jobs may run at sizes other than their requested one. When false,
  // a reclaim or a server failure preempts a job instead of shrinking it, and
  // every job always runs at JobInfo::requested_workers.
  virtual bool elastic() const = 0;

  // The time of the next round this policy needs even if no event arrives
  // (tiresias: the next demotion or starvation promotion), as of its last
  // Schedule call; infinity when none. Drivers send a Tick then.
  virtual Seconds next_wakeup() const { return std::numeric_limits<double>::infinity(); }

  // The queued jobs in the order this policy tries them, first first (what
  // WhyPending counts as ahead of a job, pending.h). By default by submit
  // time, then id.
  virtual std::vector<JobId> QueueOrder(const ClusterState& state) const;

  // What the policy remembers across rounds, as text, for a driver's snapshot
  // (Scheduler::Snapshot); "" for a policy that remembers nothing. LoadState
  // takes what SaveState wrote; Corruption when it cannot.
  virtual std::string SaveState() const { return ""; }
  virtual Status LoadState(const std::string& text) {
    return text.empty() ? Status::Ok() : Status::Corruption("policy " + name() + " keeps no state, got '" + text.substr(0, 80) + "'");
  }
};

// `name` is one of PolicyNames() with an optional ":<strategy>" suffix.
Result<std::unique_ptr<Policy>> MakePolicy(const std::string& name, const SchedulerConfig& config);

}  // namespace aryl::sched
