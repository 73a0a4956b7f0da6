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
  std::int64_t formed_ = 0;
  std::int64_t completing_step_ = 0;
  std::vector<Transition> log_;
};

// The forming rule (the scheduler's half of ending a generation that cannot
// form). Worker `lost` ended without being asked while the generation it
// joined was still forming (`lost_joined` > the job's formed generation): the
// other workers that joined that generation are stranded, waiting in its
// rendezvous for a member that will never come, until their timeout (30 s)
// makes them fail and be replaced, again and again while new plans keep
// coming. They are returned here to be stopped at once, so that the next plan
// starts fresh joiners beside the members that train. Nothing is returned
// when no worker of a formed generation stays (a fresh start: the job starts
// again as a whole) or when the lost worker's generation had formed (the
// runtime's fault recovery regroups the survivors).
struct MemberView {
  std::int64_t id = 0;
  std::int64_t joined = 0;  // the generation it was started for
  bool leaving = false;
};
std::vector<std::int64_t> StrandedJoiners(const std::vector<MemberView>& live, std::int64_t lost_joined,
                                          std::int64_t formed);

}  // namespace aryl::daemon
