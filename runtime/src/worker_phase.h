// The life cycle of one worker's Runtime, as named states and one table.
//
// States (WorkerPhase):
//  1. kCreated: Runtime::Create() connected; nothing joined yet.
//  2. kStarting: the first Step() joins the starting generation and
//     synchronizes the state (Start()). No fault recovery from here: a joiner
//     whose generation never formed fails and the planner replaces it.
//  3. kTraining: a member of a generation, in a step whose gradients are not
//     reduced yet. A Step() here is a FailedPrecondition error (the step's
//     batch would be skipped).
//  4. kReduced: AllReduceGradients() summed this step's gradients; the next
//     Step() commits the step (and the step after it starts in kTraining).
//  5. kAbandoned: the step's all-reduce failed with a retryable error (a peer
//     is gone, a timeout); the next Step() recovers. The latest all-reduce of
//     a step decides: one that succeeds after it (kReduced) commits the step.
//  6. kSwitching: a planned resize (PlannedResize()): into an agreed newer
//     generation, or the one a wait found.
//  7. kRecovering: fault recovery (Recover()): the survivors of the failed
//     generation form its successor; entered again on each retry (bounded).
//  8. kWaitingForWorkers: below min_workers after a fault, or too late for
//     the survivors' generation: waits (bounded) for a generation to switch to.
//  9. kStopping: an agreed stop (SIGTERM, RequestStop, the store's stop key)
//     writes its checkpoint.
// 10. kLeft, kStopped, kFailed: terminal; Step() returns false. kLeft: not a
//     member of the generation it switched to. kStopped: stopped after the
//     stop checkpoint. kFailed: a fatal error, or a wait that ran out
//     (status() says which).
//
// Transitions (kTable, from --event--> to):
//  a. kCreated --kStart--> kStarting --kJoin--> kTraining
//  b. kTraining, kReduced, kAbandoned --kReduce--> kReduced
//  c. kTraining, kReduced, kAbandoned --kAbandon--> kAbandoned
//  d. kReduced --kCommit--> kTraining
//  e. kTraining, kWaitingForWorkers --kResize--> kSwitching
//     --kJoin--> kTraining, or --kLeave--> kLeft
//  f. kAbandoned, kSwitching, kRecovering, kWaitingForWorkers --kRecover-->
//     kRecovering: the first attempt after an abandoned step, a planned
//     resize that failed retryably, and each retry of a failed attempt
//  g. kRecovering --kJoin--> kTraining, or --kWait--> kWaitingForWorkers
//  h. kWaitingForWorkers --kTimeOut--> kFailed: recovery stops retrying
//  i. kTraining --kStop--> kStopping --kStopped--> kStopped
//  j. every non-terminal state but kCreated --kFail--> kFailed
// Anything else is refused: Next() answers nullopt and the transition
// functions return false, leaving the phase as it was.
//
// Pure: no clock, no I/O, no threads. Runtime::Impl (runtime_impl.h) holds
// one WorkerPhase and moves it only through these functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace aryl {

enum class WorkerPhase {
  kCreated,
  kStarting,
  kTraining,
  kReduced,
  kAbandoned,
  kSwitching,
  kRecovering,
  kWaitingForWorkers,
  kStopping,
  kLeft,
  kStopped,
  kFailed,
};
inline constexpr std::size_t kWorkerPhaseCount = 12;

enum class WorkerEvent {
  kStart,    // the first Step()
  kJoin,     // in a generation, holding the state: train
  kReduce,   // the step's gradients were summed
  kAbandon,  // the step's all-reduce failed retryably
  kCommit,   // Step() commits a reduced step
  kResize,   // switch to a newer generation (agreed, or found by a wait)
  kRecover,  // regroup the survivors after a retryable failure
  kWait,     // wait (bounded) for a generation to switch to
  kTimeOut,  // that wait ran out
  kLeave,    // not a member of the generation switched to
  kStop,     // an agreed stop: write the stop checkpoint
  kStopped,  // the stop checkpoint is done
  kFail,     // a fatal error
};
inline constexpr std::size_t kWorkerEventCount = 13;

struct WorkerTransition {
  WorkerPhase from;
  WorkerEvent event;
  WorkerPhase to;
};

namespace worker_phase {

using P = WorkerPhase;
using E = WorkerEvent;

// The one table. Next() and every transition function below read it.
inline constexpr WorkerTransition kTable[] = {
    // a. start
    {P::kCreated, E::kStart, P::kStarting},
    {P::kStarting, E::kJoin, P::kTraining},
    // b, c. the step's all-reduce; d. its commit
    {P::kTraining, E::kReduce, P::kReduced},
    {P::kReduced, E::kReduce, P::kReduced},
    {P::kAbandoned, E::kReduce, P::kReduced},
    {P::kTraining, E::kAbandon, P::kAbandoned},
    {P::kReduced, E::kAbandon, P::kAbandoned},
    {P::kAbandoned, E::kAbandon, P::kAbandoned},
    {P::kReduced, E::kCommit, P::kTraining},
    // e. planned resize
    {P::kTraining, E::kResize, P::kSwitching},
    {P::kWaitingForWorkers, E::kResize, P::kSwitching},
    {P::kSwitching, E::kJoin, P::kTraining},
    {P::kSwitching, E::kLeave, P::kLeft},
    // f, g, h. fault recovery
    {P::kAbandoned, E::kRecover, P::kRecovering},
    {P::kSwitching, E::kRecover, P::kRecovering},
    {P::kRecovering, E::kRecover, P::kRecovering},
    {P::kWaitingForWorkers, E::kRecover, P::kRecovering},
    {P::kRecovering, E::kJoin, P::kTraining},
    {P::kRecovering, E::kWait, P::kWaitingForWorkers},
    {P::kWaitingForWorkers, E::kTimeOut, P::kFailed},
    // i. stop
    {P::kTraining, E::kStop, P::kStopping},
    {P::kStopping, E::kStopped, P::kStopped},
    // j. fatal errors
    {P::kStarting, E::kFail, P::kFailed},
    {P::kTraining, E::kFail, P::kFailed},
    {P::kReduced, E::kFail, P::kFailed},
    {P::kAbandoned, E::kFail, P::kFailed},
    {P::kSwitching, E::kFail, P::kFailed},
    {P::kRecovering, E::kFail, P::kFailed},
    {P::kWaitingForWorkers, E::kFail, P::kFailed},
    {P::kStopping, E::kFail, P::kFailed},
};

}  // namespace worker_phase

// The phase `event` leads to from `from`; nullopt when the table has no row.
std::optional<WorkerPhase> Next(WorkerPhase from, WorkerEvent event);
// Moves `phase` by `event` when the table allows it; false (phase unchanged) otherwise.
bool Apply(WorkerPhase& phase, WorkerEvent event);
bool IsTerminal(WorkerPhase phase);             // kLeft, kStopped, kFailed
std::string_view PhaseName(WorkerPhase phase);  // "training", "waiting_for_workers", ...
std::string_view EventName(WorkerEvent event);  // "reduce", "time_out", ...

// One function per event, each the table's rows for it; false refuses.
inline bool StartWorker(WorkerPhase& p) { return Apply(p, WorkerEvent::kStart); }
inline bool JoinGeneration(WorkerPhase& p) { return Apply(p, WorkerEvent::kJoin); }
inline bool ReduceGradients(WorkerPhase& p) { return Apply(p, WorkerEvent::kReduce); }
inline bool AbandonStep(WorkerPhase& p) { return Apply(p, WorkerEvent::kAbandon); }
inline bool CommitStep(WorkerPhase& p) { return Apply(p, WorkerEvent::kCommit); }
inline bool BeginResize(WorkerPhase& p) { return Apply(p, WorkerEvent::kResize); }
inline bool BeginRecovery(WorkerPhase& p) { return Apply(p, WorkerEvent::kRecover); }
inline bool BeginWait(WorkerPhase& p) { return Apply(p, WorkerEvent::kWait); }
inline bool TimeOutWait(WorkerPhase& p) { return Apply(p, WorkerEvent::kTimeOut); }
inline bool LeaveJob(WorkerPhase& p) { return Apply(p, WorkerEvent::kLeave); }
inline bool BeginStop(WorkerPhase& p) { return Apply(p, WorkerEvent::kStop); }
inline bool FinishStop(WorkerPhase& p) { return Apply(p, WorkerEvent::kStopped); }
inline bool FailWorker(WorkerPhase& p) { return Apply(p, WorkerEvent::kFail); }

}  // namespace aryl
