// WorkerLife (agent/include/aryl/agent/worker_life.h): each transition of
// its table driven, and what the agent is told to send.
#include "aryl/agent/worker_life.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace aryl::agent {
namespace {

using State = WorkerLife::State;
using Event = WorkerLife::Event;

// Every (state, event) pair: the table's rows and only those.
TEST(WorkerLife, NextFollowsTheTableOnly) {
  std::set<std::pair<State, Event>> rows;
  for (const auto& r : WorkerLife::kTable) {
    EXPECT_TRUE(rows.insert({r.from, r.event}).second) << "two rows for one pair";
    EXPECT_EQ(WorkerLife::Next(r.from, r.event), r.to);
  }
  for (State s : {State::kRunning, State::kLeaving, State::kStopping, State::kKilled, State::kExited})
    for (Event e : {Event::kLeave, Event::kStop, Event::kOverdue, Event::kKill, Event::kExit})
      if (!rows.count({s, e}))
        EXPECT_EQ(WorkerLife::Next(s, e), std::nullopt) << WorkerLife::Name(s) << " " << WorkerLife::Name(e);
  for (Event e : {Event::kLeave, Event::kStop, Event::kOverdue, Event::kKill, Event::kExit})
    EXPECT_EQ(WorkerLife::Next(State::kExited, e), std::nullopt) << "terminal";
}

// a: a leaver keeps its first deadline; d: past it, it is stopping, once.
TEST(WorkerLife, ALeaverKeepsItsFirstDeadlineAndIsStoppedOnceOverdue) {
  WorkerLife w;
  EXPECT_TRUE(w.Leave(50));
  EXPECT_TRUE(w.Leave(80));
  EXPECT_EQ(w.state(), State::kLeaving);
  EXPECT_EQ(w.leave_by(), 50);
  EXPECT_FALSE(w.Overdue(50));
  EXPECT_TRUE(w.Overdue(51));
  EXPECT_EQ(w.state(), State::kStopping);
  EXPECT_EQ(w.kill_at(), 51 + WorkerLife::kOverdueGrace);
  EXPECT_FALSE(w.Overdue(60)) << "stopped once";
  EXPECT_FALSE(w.Leave(90)) << "a leave after a stop";
  EXPECT_EQ(w.state(), State::kStopping);
}

// b, c: SIGTERM once; the kill comes at the earliest deadline asked for.
TEST(WorkerLife, TheFirstStopTermsAndTheEarliestDeadlineKills) {
  WorkerLife w;
  EXPECT_TRUE(w.Stop(10, 600)) << "the first stop sends SIGTERM";
  EXPECT_EQ(w.kill_at(), 610);
  EXPECT_FALSE(w.Stop(20, 5)) << "no second SIGTERM";
  EXPECT_EQ(w.kill_at(), 25) << "the lease's stop brings the kill forward";
  EXPECT_FALSE(w.Stop(30, 600));
  EXPECT_EQ(w.kill_at(), 25) << "never later";
  EXPECT_EQ(w.state(), State::kStopping);
  WorkerLife leaver;
  leaver.Leave(50);
  EXPECT_TRUE(leaver.Stop(40, 5)) << "a leaver stopped before its deadline";
  EXPECT_FALSE(leaver.Overdue(60)) << "no longer leaving";
}

// e, f: a killed worker is asked nothing more; the exit ends it.
TEST(WorkerLife, AKilledWorkerIsAskedNothingMore) {
  WorkerLife w;
  EXPECT_TRUE(w.Kill());
  EXPECT_FALSE(w.Kill()) << "one SIGKILL";
  EXPECT_FALSE(w.Stop(1, 5)) << "no SIGTERM after a SIGKILL";
  EXPECT_EQ(w.state(), State::kKilled);
  EXPECT_FALSE(w.Leave(5));
  EXPECT_TRUE(w.Exit());
  EXPECT_EQ(w.state(), State::kExited);
  EXPECT_FALSE(w.Exit());
  EXPECT_FALSE(w.Stop(2, 5));
  EXPECT_FALSE(w.Kill());
  for (auto start : {State::kRunning, State::kLeaving, State::kStopping}) {
    WorkerLife v;
    if (start == State::kLeaving) v.Leave(9);
    if (start == State::kStopping) v.Stop(0, 9);
    EXPECT_TRUE(v.Kill()) << WorkerLife::Name(start);
    WorkerLife x;
    if (start == State::kLeaving) x.Leave(9);
    if (start == State::kStopping) x.Stop(0, 9);
    EXPECT_TRUE(x.Exit()) << WorkerLife::Name(start);
  }
}

}  // namespace
}  // namespace aryl::agent
