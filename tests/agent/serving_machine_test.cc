// ServingMachine (aryl/agent/serving_machine.h): every transition of its table.
#include "aryl/agent/serving_machine.h"

#include <gtest/gtest.h>

namespace aryl::agent {
namespace {

using State = ServingMachine::State;
using Step = ServingMachine::Step;

// Nothing runs before the first command; serve starts, the start hook's end
// starts probing, ready measures the warm-up (T1, T2).
TEST(ServingMachine, ServeStartsThenReadyMeasuresWarmup) {
  ServingMachine m(/*has_drain=*/true);
  EXPECT_EQ(m.Next(false, 0), Step::kNone);
  m.Want(false);
  EXPECT_EQ(m.Next(true, 1), Step::kNone) << "a step in flight ends first";
  EXPECT_EQ(m.Next(false, 10), Step::kStart);
  EXPECT_EQ(m.state(), State::kStarting);
  EXPECT_EQ(m.Next(false, 11), Step::kNone) << "the start hook has not ended";
  m.StartDone();
  EXPECT_TRUE(m.probing());
  EXPECT_EQ(m.Next(false, 12), Step::kProbe);
  m.Ready(13.5);
  EXPECT_EQ(m.state(), State::kReady);
  EXPECT_DOUBLE_EQ(m.warmup_seconds(), 3.5);
  EXPECT_EQ(m.Next(false, 14), Step::kNone);
}

// Lend drains then stops (T3, T4, T5); serve again starts (T1 from kStopped).
TEST(ServingMachine, LendDrainsStopsAndServeStartsAgain) {
  ServingMachine m(true);
  m.Want(false);
  m.Next(false, 0);
  m.StartDone();
  m.Ready(1);
  m.Want(true);
  EXPECT_EQ(m.Next(false, 2), Step::kDrain);
  EXPECT_EQ(m.state(), State::kDraining);
  m.Want(false);  // changed its mind: the drain ends first
  EXPECT_EQ(m.Next(false, 3), Step::kNone);
  m.Want(true);
  m.Drained();
  EXPECT_EQ(m.state(), State::kStopping);
  m.StoppedOk();
  EXPECT_EQ(m.state(), State::kStopped);
  EXPECT_EQ(m.Next(false, 4), Step::kNone);
  m.Want(false);
  EXPECT_EQ(m.Next(false, 5), Step::kStart);
}

// Without a drain hook, or from kIdle (nothing serves), a lend stops at once.
TEST(ServingMachine, NoDrainHookOrNothingServingStopsDirectly) {
  ServingMachine no_drain(false);
  no_drain.Want(false);
  no_drain.Next(false, 0);
  no_drain.StartDone();
  no_drain.Ready(1);
  no_drain.Want(true);
  EXPECT_EQ(no_drain.Next(false, 2), Step::kStop);
  ServingMachine idle(true);
  idle.Want(true);
  EXPECT_EQ(idle.Next(false, 0), Step::kStop);
  EXPECT_EQ(idle.state(), State::kStopping);
}

// Lent while still warming up: the probe is abandoned (T7).
TEST(ServingMachine, LendWhileStartingAbandonsTheStart) {
  ServingMachine m(true);
  m.Want(false);
  m.Next(false, 0);
  m.StartDone();
  m.Want(true);
  EXPECT_EQ(m.Next(false, 1), Step::kDrain);
  EXPECT_EQ(m.state(), State::kDraining);
}

// A failure names the step and why (T6) and waits for a new command: the
// same wish is not retried in a loop, a fresh command retries it.
TEST(ServingMachine, FailureWaitsForTheNextCommand) {
  ServingMachine m(true);
  m.Want(false);
  m.Next(false, 0);
  m.Failed("start", "'x' exited with code 1");
  EXPECT_EQ(m.state(), State::kFailed);
  EXPECT_EQ(m.step(), "start");
  EXPECT_EQ(m.error(), "'x' exited with code 1");
  EXPECT_EQ(m.Next(false, 1), Step::kNone);
  EXPECT_EQ(m.Next(false, 2), Step::kNone);
  m.Want(false);
  EXPECT_EQ(m.Next(false, 3), Step::kStart);
  EXPECT_TRUE(m.step().empty()) << "a new start clears the failure";
  m.StartDone();
  m.Ready(4);
  m.Failed("serve", "the serving process exited");
  m.Want(true);
  EXPECT_EQ(m.Next(false, 5), Step::kDrain);
}

// The table holds exactly the documented rows, and nothing else is legal.
TEST(ServingMachine, TableIsTheDocumentedOne) {
  EXPECT_EQ(std::size(ServingMachine::kTable), 17u);
  EXPECT_TRUE(ServingMachine::Legal(State::kReady, ServingMachine::Event::kLend, State::kDraining));
  EXPECT_FALSE(ServingMachine::Legal(State::kStopped, ServingMachine::Event::kLend, State::kDraining));
  EXPECT_FALSE(ServingMachine::Legal(State::kIdle, ServingMachine::Event::kLend, State::kDraining));
  EXPECT_FALSE(ServingMachine::Legal(State::kStopped, ServingMachine::Event::kReady, State::kReady));
  for (const auto& r : ServingMachine::kTable) EXPECT_NE(ServingMachine::Name(r.from), "?");
}

}  // namespace
}  // namespace aryl::agent
