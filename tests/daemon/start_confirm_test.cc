// Start confirmation on the scheduler's side (scheduler/daemon/src/
// start_confirm.h): each rule, and the wire's two cases that the time rule
// got wrong or right.
#include "start_confirm.h"

#include <gtest/gtest.h>

namespace aryl::daemon {
namespace {

constexpr double kConfirm = 6;

StartReport Heartbeat(std::uint64_t seq, std::uint64_t acked) { return {seq, acked, false}; }
StartReport Registration(std::uint64_t seq, std::uint64_t acked) { return {seq, acked, true}; }

// 1. An agent that sends no `acked`: the time rule on heartbeats only.
TEST(StartConfirm, WithoutAckedAHeartbeatGivesUpAfterTheConfirmTime) {
  std::uint64_t floor = 9;
  EXPECT_EQ(JudgeUnlistedStart(floor, 5.9, Heartbeat(12, 0), kConfirm), StartVerdict::kWait);
  EXPECT_EQ(JudgeUnlistedStart(floor, 6.1, Heartbeat(13, 0), kConfirm), StartVerdict::kGone);
  EXPECT_EQ(JudgeUnlistedStart(floor, 60, Registration(14, 0), kConfirm), StartVerdict::kWait);
  EXPECT_EQ(floor, 9u);
}

// 3, 4. Acknowledged up to the floor: the start may still arrive and run,
// however long ago it went out; past the floor it never will.
TEST(StartConfirm, AStartIsGivenUpOnlyOnceAnAckSentAfterItReachedTheAgent) {
  std::uint64_t floor = 9;
  // A wire late by a minute: the time rule would have given it up.
  EXPECT_EQ(JudgeUnlistedStart(floor, 60, Heartbeat(10, 9), kConfirm), StartVerdict::kWait);
  EXPECT_EQ(JudgeUnlistedStart(floor, 61, Heartbeat(11, 9), kConfirm), StartVerdict::kWait);
  // Seen at once: an ack of report 10, sent after the start, arrived first.
  EXPECT_EQ(JudgeUnlistedStart(floor, 0.5, Heartbeat(11, 10), kConfirm), StartVerdict::kGone);
  EXPECT_EQ(JudgeUnlistedStart(floor, 0.5, Registration(11, 10), kConfirm), StartVerdict::kGone);
  EXPECT_EQ(floor, 9u);
}

// 2. A floor not known (a guard: every start the daemon sends is stamped, and
// restored workers are reconciled by their agent's registration instead):
// numbered with the first report that misses it, settled by an ack of a
// later one.
TEST(StartConfirm, AnUnknownFloorIsNumberedWithTheReportThatFirstMissesIt) {
  std::uint64_t floor = 0;
  EXPECT_EQ(JudgeUnlistedStart(floor, 1, Registration(30, 29), kConfirm), StartVerdict::kWait);
  EXPECT_EQ(floor, 30u);
  EXPECT_EQ(JudgeUnlistedStart(floor, 2, Heartbeat(31, 30), kConfirm), StartVerdict::kWait);
  EXPECT_EQ(JudgeUnlistedStart(floor, 3, Heartbeat(32, 31), kConfirm), StartVerdict::kGone);
}

// 0. Reloaded after a failed write gave it up: it may have ended, its exit
// on the way again; acknowledgements say nothing of that.
TEST(StartConfirm, AReloadedStartKeepsTheTimeRule) {
  std::uint64_t floor = kFloorByTime;
  EXPECT_EQ(JudgeUnlistedStart(floor, 1, Heartbeat(40, 39), kConfirm), StartVerdict::kWait);
  EXPECT_EQ(JudgeUnlistedStart(floor, 7, Heartbeat(41, 40), kConfirm), StartVerdict::kGone);
  EXPECT_EQ(floor, kFloorByTime);
}

}  // namespace
}  // namespace aryl::daemon
