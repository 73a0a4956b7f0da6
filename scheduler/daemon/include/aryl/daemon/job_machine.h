// JobMachine: the life cycle of a live job in the scheduler daemon, written
// down once, as Slurm names its job states. Daemon::Impl::Job holds one; the
// daemon changes a job's phase only through the transition functions below,
// and each of them is checked against kTable.
//
// Phases (a job in the store is queued, running or ended; the phase is the
// daemon's finer view of a live job, in memory, rebuilt on restore):
//   kQueued      no worker; waiting for the core to place it (again, after a
//                preemption or when its workers were all lost)
//   kStarting    a fresh group was started (generation P); no step of it seen
//   kRunning     its workers train in a generation that formed
//   kResizing    a newer generation was planned than the one that trains
//                (in place: stayers keep training until they switch)
//   kRestarting  every worker is being stopped to start the group again
//                (restart elasticity, or a failure of a restart-kind job)
//   kLeaseWait   a fresh start is held until a lost server's lease has run
//                out, so two copies of the job never train at once
//   kCompleting  a worker finished the job's work; the job ends once the
//                other workers are gone (unless they go on: a leave)
//   kCompleted, kFailed, kCancelled   ends
//
// Generations: `planned` is the newest generation the daemon made (Converge),
// `formed` the newest the runtime was seen training in (a resize report or
// rank 0's progress). planned > formed while a generation forms.
//
// Transitions (one function each; kTable lists every legal one):
//   T1 Started      kQueued|kLeaseWait|kRestarting|kStarting|kRunning|kResizing -> kStarting
//                   a fresh group (no worker stays) was planned
//   T2 Resized      kStarting|kRunning|kResizing -> kResizing|kStarting
//                   a generation with stayers was planned (kStarting stays)
//   T3 Formed       kStarting|kResizing -> kRunning (once formed >= planned); kRunning stays
//   T4 RestartBegun kStarting|kRunning|kResizing|kQueued -> kRestarting
//   T5 LeaseWait    kQueued|kRestarting|kStarting|kRunning|kResizing -> kLeaseWait
//   T6 WorkerDone   every live phase -> kCompleting (the program said it finished)
//   T7 WentOn       kCompleting -> kRunning (its peers trained past that worker's end: a leave)
//   T8 Unplaced     kStarting|kRunning|kResizing|kLeaseWait|kRestarting -> kQueued
//                   (no worker left and none planned: preempted or lost)
//   T9 Ended        every live phase -> kCompleted|kFailed|kCancelled
//
// Pure: no clock, no I/O; times are arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace aryl::daemon {

enum class JobPhase {
  kQueued,
  kStarting,
  kRunning,
  kResizing,
  kRestarting,
  kLeaseWait,
  kCompleting,
  kCompleted,
  kFailed,
  kCancelled,
};
enum class JobEvent { kStarted, kResized, kFormed, kRestartBegun, kLeaseWait, kWorkerDone, kWentOn, kUnplaced, kEnded };

std::string_view PhaseName(JobPhase p);
std::string_view EventName(JobEvent e);
std::optional<JobPhase> PhaseFromName(std::string_view name);
inline bool IsFinal(JobPhase p) {
  return p == JobPhase::kCompleted || p == JobPhase::kFailed || p == JobPhase::kCancelled;
}

class JobMachine {
 public:
  struct Row {
    JobPhase from;
    JobEvent event;
    JobPhase to;
  };
  // Every legal transition. Rows of one (from, event) pair may name more than
  // one `to` only for T2 and T9, whose function picks among them.
  static const std::vector<Row>& Table();
  static bool Legal(JobPhase from, JobEvent event, JobPhase to);

  JobPhase phase() const { return phase_; }
  bool Is(JobPhase p) const { return phase_ == p; }
  double since() const { return since_; }  // when the phase began
  std::int64_t planned() const { return planned_; }
  double planned_at() const { return planned_at_; }  // when `planned` was made
  std::int64_t formed() const { return formed_; }
  // The step a worker ended at when it said it finished (kCompleting).
  std::int64_t completing_step() const { return completing_step_; }

  // T1..T9. Each returns false, changing nothing, when kTable has no row for
  // it from the current phase (the daemon logs that as a bug).
  bool Started(std::int64_t generation, double now);
  bool Resized(std::int64_t generation, double now);
  bool Formed(std::int64_t generation, double now);
  bool RestartBegun(double now);
  bool LeaseWait(double now);
  bool WorkerDone(std::int64_t step, double now);
  bool WentOn(double now);
  bool Unplaced(double now);
  bool Ended(JobPhase end, double now);

  // A restored job: its phase as the store implies it (no check; restore is
  // not a transition).
  void Restore(JobPhase p, std::int64_t generation, std::int64_t completing_step, double now);

  // Transitions made, for the daemon's log and tests.
  struct Transition {
    JobPhase from;
    JobEvent event;
    JobPhase to;
  };
  std::vector<Transition> TakeTransitions();

 private:
  bool Move(JobEvent e, JobPhase to, double now);

  JobPhase phase_ = JobPhase::kQueued;
  double since_ = 0;
  std::int64_t planned_ = 0;
  double planned_at_ = 0;
  std::int64_t formed_ = 0;
  std::int64_t completing_step_ = 0;
  std::vector<Transition> log_;
};

// The forming rule: what the scheduler does with a generation that has not
// formed yet when the job must change again.
//
// A joiner is committed to the generation it was started for: it waits in
// that generation's rendezvous (runtime.h, step 4) and hears of no other
// until it has formed or its rendezvous timed out (30 s). So a new plan that
// counted such a joiner as a stayer could only form after the older one did,
// and never when the older one lost a member: then every later plan's joiners
// waited for members that never came, timed out, were replaced, and the job
// livelocked (a SIGKILL during a grow; a loan reclaimed while a grow formed).
// Hence:
//  1. A voluntary change (a grow, or a shrink that no deadline forces) waits
//     while a generation forms, up to `forming_timeout`.
//  2. A forced change (a worker of the job was lost, a reclaim or drain takes
//     workers away, or the forming generation is past its timeout) abandons
//     the forming generation: its joiners (started for a generation newer
//     than the formed one) are stopped and the new plan counts only members of
//     a formed generation, with fresh joiners beside them. The agents drop the
//     abandoned generation when the new plan reaches them (generation_queue.h, T2).
enum class FormingDecision { kPlan, kWait, kAbandonThenPlan };
FormingDecision WhileForming(const JobMachine& life, bool forced, double now, double forming_timeout);

struct MemberView {
  std::int64_t id = 0;
  std::int64_t joined = 0;  // the generation it was started for
  bool leaving = false;
};
// The workers, not leaving, that were started for a generation newer than `formed`.
std::vector<std::int64_t> UnformedJoiners(const std::vector<MemberView>& live, std::int64_t formed);

}  // namespace aryl::daemon
