// The worker life cycle (runtime/src/worker_phase.h): every row of the table,
// every refused transition, and the paths the runtime takes through it.
#include "worker_phase.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace aryl {
namespace {

using P = WorkerPhase;
using E = WorkerEvent;

std::vector<P> AllPhases() {
  std::vector<P> all;
  for (std::size_t i = 0; i < kWorkerPhaseCount; ++i) all.push_back(static_cast<P>(i));
  return all;
}

std::vector<E> AllEvents() {
  std::vector<E> all;
  for (std::size_t i = 0; i < kWorkerEventCount; ++i) all.push_back(static_cast<E>(i));
  return all;
}

// The transition function of each event, as the runtime calls it.
bool Drive(P& p, E e) {
  switch (e) {
    case E::kStart:
      return StartWorker(p);
    case E::kJoin:
      return JoinGeneration(p);
    case E::kReduce:
      return ReduceGradients(p);
    case E::kAbandon:
      return AbandonStep(p);
    case E::kCommit:
      return CommitStep(p);
    case E::kResize:
      return BeginResize(p);
    case E::kRecover:
      return BeginRecovery(p);
    case E::kWait:
      return BeginWait(p);
    case E::kTimeOut:
      return TimeOutWait(p);
    case E::kLeave:
      return LeaveJob(p);
    case E::kStop:
      return BeginStop(p);
    case E::kStopped:
      return FinishStop(p);
    case E::kFail:
      return FailWorker(p);
  }
  ADD_FAILURE() << "no transition function for event " << int(e);
  return false;
}

bool InTable(P from, E event) {
  for (const auto& t : worker_phase::kTable) {
    if (t.from == from && t.event == event) return true;
  }
  return false;
}

// Each row, through Next() and through its event's function.
TEST(WorkerPhase, EveryRowMovesToItsTarget) {
  for (const auto& t : worker_phase::kTable) {
    SCOPED_TRACE(std::string(PhaseName(t.from)) + " --" + std::string(EventName(t.event)) + "-->");
    ASSERT_TRUE(Next(t.from, t.event).has_value());
    EXPECT_EQ(*Next(t.from, t.event), t.to);
    P p = t.from;
    EXPECT_TRUE(Drive(p, t.event));
    EXPECT_EQ(p, t.to);
  }
}

// One row per (phase, event) at most: the machine is deterministic.
TEST(WorkerPhase, TableHasNoDuplicateRows) {
  std::set<std::pair<int, int>> seen;
  for (const auto& t : worker_phase::kTable) {
    EXPECT_TRUE(seen.insert({int(t.from), int(t.event)}).second)
        << PhaseName(t.from) << " on " << EventName(t.event) << " appears twice";
  }
}

// Every (phase, event) the table lacks is refused and leaves the phase as it was.
TEST(WorkerPhase, EverythingElseIsRefused) {
  int refused = 0;
  for (P from : AllPhases()) {
    for (E e : AllEvents()) {
      if (InTable(from, e)) continue;
      SCOPED_TRACE(std::string(PhaseName(from)) + " on " + std::string(EventName(e)));
      EXPECT_FALSE(Next(from, e).has_value());
      P p = from;
      EXPECT_FALSE(Drive(p, e));
      EXPECT_EQ(p, from);
      ++refused;
    }
  }
  EXPECT_EQ(refused + int(std::size(worker_phase::kTable)),
            int(kWorkerPhaseCount * kWorkerEventCount));
}

// Terminal phases accept nothing; every other phase has a way out, and only
// kCreated cannot fail (nothing runs there).
TEST(WorkerPhase, TerminalPhasesAreFinal) {
  for (P p : AllPhases()) {
    bool has_exit = false;
    for (E e : AllEvents()) has_exit = has_exit || Next(p, e).has_value();
    EXPECT_EQ(IsTerminal(p), !has_exit) << PhaseName(p);
    EXPECT_EQ(Next(p, E::kFail).has_value(), !IsTerminal(p) && p != P::kCreated) << PhaseName(p);
  }
  EXPECT_TRUE(IsTerminal(P::kLeft));
  EXPECT_TRUE(IsTerminal(P::kStopped));
  EXPECT_TRUE(IsTerminal(P::kFailed));
}

// Names are distinct (they go into logs and errors).
TEST(WorkerPhase, NamesAreDistinct) {
  std::set<std::string_view> phases, events;
  for (P p : AllPhases()) EXPECT_TRUE(phases.insert(PhaseName(p)).second) << PhaseName(p);
  for (E e : AllEvents()) EXPECT_TRUE(events.insert(EventName(e)).second) << EventName(e);
  EXPECT_EQ(PhaseName(P::kWaitingForWorkers), "waiting_for_workers");
  EXPECT_EQ(EventName(E::kTimeOut), "time_out");
}

// Drives `events` from kCreated; returns the phase after each.
std::vector<P> DriveFromCreated(const std::vector<E>& events) {
  P p = P::kCreated;
  std::vector<P> seen;
  for (E e : events) {
    EXPECT_TRUE(Drive(p, e)) << PhaseName(p) << " refused " << EventName(e);
    seen.push_back(p);
  }
  return seen;
}

// A worker starts, trains two steps, is resized, trains on, and is stopped.
TEST(WorkerPhase, PlannedResizeThenStop) {
  auto seen =
      DriveFromCreated({E::kStart, E::kJoin, E::kReduce, E::kCommit, E::kReduce, E::kCommit,
                        E::kResize, E::kJoin, E::kReduce, E::kCommit, E::kStop, E::kStopped});
  EXPECT_EQ(seen[6], P::kSwitching);
  EXPECT_EQ(seen.back(), P::kStopped);
}

// A shrink that drops this worker: it leaves.
TEST(WorkerPhase, ResizeWithoutThisWorkerLeaves) {
  auto seen =
      DriveFromCreated({E::kStart, E::kJoin, E::kReduce, E::kCommit, E::kResize, E::kLeave});
  EXPECT_EQ(seen.back(), P::kLeft);
}

// A peer dies mid-step: the step is abandoned, the next Step() recovers, one
// retry, back to training.
TEST(WorkerPhase, FaultRecoveryWithARetry) {
  auto seen = DriveFromCreated(
      {E::kStart, E::kJoin, E::kAbandon, E::kRecover, E::kRecover, E::kJoin, E::kReduce});
  EXPECT_EQ(seen[2], P::kAbandoned);
  EXPECT_EQ(seen[3], P::kRecovering);
  EXPECT_EQ(seen.back(), P::kReduced);
}

// Too few survivors: wait, a large enough generation forms, switch into it.
TEST(WorkerPhase, BelowMinWorkersWaitsThenSwitches) {
  auto seen = DriveFromCreated(
      {E::kStart, E::kJoin, E::kReduce, E::kAbandon, E::kRecover, E::kWait, E::kResize, E::kJoin});
  EXPECT_EQ(seen[5], P::kWaitingForWorkers);
  EXPECT_EQ(seen.back(), P::kTraining);
}

// The wait runs out: recovery stops retrying and the worker has failed.
TEST(WorkerPhase, WaitThatRunsOutFails) {
  auto seen =
      DriveFromCreated({E::kStart, E::kJoin, E::kAbandon, E::kRecover, E::kWait, E::kTimeOut});
  EXPECT_EQ(seen.back(), P::kFailed);
  P p = P::kFailed;
  EXPECT_FALSE(BeginRecovery(p));
  EXPECT_FALSE(FailWorker(p));
  EXPECT_EQ(p, P::kFailed);
}

// A planned resize that fails retryably falls back to fault recovery.
TEST(WorkerPhase, FailedResizeRecovers) {
  auto seen = DriveFromCreated(
      {E::kStart, E::kJoin, E::kReduce, E::kCommit, E::kResize, E::kRecover, E::kJoin});
  EXPECT_EQ(seen[5], P::kRecovering);
  EXPECT_EQ(seen.back(), P::kTraining);
}

// Step() without AllReduceGradients(): no commit from kTraining; a fatal error.
TEST(WorkerPhase, CommitNeedsReducedGradients) {
  P p = P::kTraining;
  EXPECT_FALSE(CommitStep(p));
  EXPECT_EQ(p, P::kTraining);
  EXPECT_TRUE(FailWorker(p));
  EXPECT_EQ(p, P::kFailed);
}

}  // namespace
}  // namespace aryl
