// Scheduler: the one entry point drivers (aryl-sim, aryl-scheduler) use.
//
// A Scheduler owns the cluster state and a Policy. Handle(event):
//   1. validates the event against the state; a bad event (unknown job id, a
//      reclaim of more servers than are loaned, min > max, ...) returns an error
//      that names it and leaves the state unchanged;
//   2. advances the state to event.time (running jobs progress, see state.h);
//   3. applies the event itself (a new job is queued, a finished job frees its
//      GPUs, loaned servers join, a reclaim's shrinks/preemptions/returns, a failed
//      server's jobs shrink or are preempted);
//   4. returns reclaimed servers that emptied, and makes jobs left to finish on
//      them that will not make the deadline leave (before and after step 5);
//   5. asks the policy for the round's changes (admission, elastic allocation,
//      placement) and applies them;
// and returns every action of steps 3-5 as one Plan, in an order the driver can
// execute (see the ordering contract in types.h). Every action goes through
// ClusterState::Apply, the one code path that mutates placements.
// Deterministic: the same sequence of events gives the same plans.
//
// Policy names: PolicyNames(); a reclaim strategy other than the policy's own can
// be chosen with a suffix: "aryl:random", "aryl:fewest-gpus", "aryl:exact",
// "aryl:greedy" (the default for every policy that loans).
//
// Thread safety: not thread-safe; a driver calls it from one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/config.h"
#include "aryl/sched/pending.h"
#include "aryl/sched/state.h"
#include "aryl/sched/types.h"

namespace aryl::sched {

class ClusterState;       // state.h
class Policy;             // policy.h
class ThroughputCatalog;  // throughput.h

class Scheduler {
 public:
  // `policy` names one of PolicyNames(), optionally with ":<reclaim strategy>".
  // Errors: unknown policy, no servers, a server with 0 GPUs, duplicate ids/names.
  static Result<std::unique_ptr<Scheduler>> Create(const std::string& policy,
                                                   std::vector<ServerSpec> servers,
                                                   std::shared_ptr<const ThroughputCatalog> thr,
                                                   SchedulerConfig config = {});
  ~Scheduler();

  // Snapshot and restore (a driver's journal keeps a snapshot and the events
  // after it, not the whole history). Restore(policy, Snapshot(), ...) gives a
  // scheduler that plans exactly as this one would from here on; it forgets the
  // jobs that ended (StateImage). Errors: Create's, and Corruption naming what
  // in the image or the policy state is inconsistent.
  struct Image {
    StateImage state;
    std::string policy_state;  // Policy::SaveState
  };
  Image Snapshot() const;
  // The same into `image`, reusing its memory (ClusterState::ImageInto).
  void SnapshotInto(Image& image) const;
  static Result<std::unique_ptr<Scheduler>> Restore(const std::string& policy, Image image,
                                                    std::shared_ptr<const ThroughputCatalog> thr,
                                                    SchedulerConfig config = {});
  // In place, the scheduler that Restore(policy_name(), Snapshot(), catalog,
  // config()) would build: the state's ended jobs forgotten
  // (ClusterState::ForgetEnded) and the policy rebuilt from its saved state,
  // without copying the state. The action observer stays. A driver that
  // replaces its scheduler by the restored copy at every snapshot, so that it
  // is exactly what a restart builds, does this instead (at 100,000 jobs the
  // copy and the restore cost hundreds of milliseconds). Returns the policy
  // it replaced, for the caller to free where its caches cost nothing (a
  // driver's helper thread). Errors: the policy's LoadState (then nothing
  // changed).
  Result<std::unique_ptr<Policy>> ForgetEnded();

  Result<Plan> Handle(const Event& event);
  // Steps 1-3 of Handle without the policy's round: the plan holds only the
  // event's own actions (a reclaim's, a failed server's). A driver that takes
  // many events per moment applies each and runs one round for all of them
  // with a later Handle (a Tick), so the round's cost (every running job) is
  // paid per round, not per event. Deterministic like Handle: a journal that
  // records which events were applied replays to the same state.
  Result<Plan> Apply(const Event& event);
  // A new server joins, failed until a ServerRecovered event (see
  // ClusterState::AddServer); runs no round. Deterministic like Handle, so a
  // driver that journals it can replay it.
  Status AddServer(const ServerSpec& spec);
  // The job's speed model (SchedulerConfig::speed) changed: advances the state
  // to `time` (as Handle does) and re-reads the job's curves, so that the next
  // round decides with them (knapsack values, reclaim costs, finish estimates,
  // migrations). Runs no round. Errors: a time before now, an unknown or ended
  // job. Deterministic like Handle.
  Status RefreshSpeed(Seconds time, JobId job);
  const ClusterState& state() const;
  const std::string& policy_name() const;
  const SchedulerConfig& config() const;
  // Whether the policy resizes jobs (Policy::elastic).
  bool elastic() const;
  // Why each of `jobs` waits, if it is queued (pending.h: WhyPending with
  // this scheduler's policy). One answer per id, in order.
  std::vector<PendingReason> WhyPending(const std::vector<JobId>& jobs) const;
  // When the core next needs a round without an event: the policy's
  // (Policy::next_wakeup) or the time a job left to finish on a reclaimed
  // server must leave should it not be done (deadline - its checkpoint time);
  // infinity when none. A driver sends a Tick at that time.
  Seconds NextWakeup() const;

  // Called after every action is applied, with the state it left. For tests
  // (invariant checks after every action) and tracing; not needed by drivers.
  using ActionObserver = std::function<void(const Action&, const ClusterState&)>;
  void set_action_observer(ActionObserver observer);

 private:
  Scheduler();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "aryl", "baseline", "loan-only", "elastic-only", "optimus", "afs", "tiresias".
std::vector<std::string> PolicyNames();
// "greedy", "random", "fewest-gpus", "exact".
std::vector<std::string> ReclaimStrategyNames();

}  // namespace aryl::sched
