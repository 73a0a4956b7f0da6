// Scenario tests of the aryl policy. Every Harness checks the state's
// invariants after every action (no GPU double-booked, no job outside its
// sizes, loaned servers used only while loaned, every reclaim met).
#include <gtest/gtest.h>

#include "test_util.h"

namespace aryl::sched {
namespace {

using testing::Count;
using testing::Elastic;
using testing::Harness;
using testing::Inelastic;
using testing::Servers;
using testing::Workers;

constexpr double kLong = 1e9;  // work that outlasts every test

TEST(ScenarioTest, ReclaimThatShrinksCanMeetPreemptsNothing) {
  // An elastic job spread over two loaned servers gives one back by shrinking.
  Harness h(Servers(1, 2));
  h.Loan({1, 2});
  h.Submit(Elastic(1, 8, 24, kLong), 1);
  ASSERT_EQ(h.job(1).workers, 24);
  EXPECT_EQ(h.job(1).placement.at(0), 8);  // base workers on the training server
  Plan plan = h.ReclaimCount(1, 1);
  EXPECT_EQ(Count(plan, ActionType::kPreempt), 0);
  EXPECT_EQ(Count(plan, ActionType::kReturnServer), 1);
  EXPECT_EQ(h.job(1).workers, 16);
  EXPECT_EQ(h.job(1).stats.preemptions, 0);
  ASSERT_EQ(h.state().reclaims().size(), 1u);
  EXPECT_TRUE(h.state().reclaims()[0].met());
  EXPECT_EQ(h.state().reclaims()[0].preemptions, 0);
  EXPECT_EQ(h.state().LoanedServers().size(), 1u);
}

TEST(ScenarioTest, ReclaimOfAServerHoldingAnInelasticJobPreemptsExactlyThatJob) {
  // B runs inelastic on loaned server 1; reclaiming server 1 preempts B and only B.
  Harness h(Servers(1, 2));
  h.Loan({1, 2});
  h.Submit(Inelastic(1, 4, kLong), 1);    // A: half the training server
  h.Submit(Inelastic(2, 8, kLong), 1);    // B: only a loaned server fits
  h.Submit(Elastic(3, 4, 12, kLong), 1);  // C: base on training, flexible on loaned
  ASSERT_EQ(h.job(2).placement, (Placement{{1, 8}}));
  ASSERT_EQ(h.job(3).placement, (Placement{{0, 4}, {2, 8}}));
  const Placement a_before = h.job(1).placement;
  Plan plan = h.ReclaimNamed({1}, 1);
  ASSERT_EQ(Count(plan, ActionType::kPreempt), 1);
  for (const auto& a : plan.actions) {
    if (a.type == ActionType::kPreempt) {
      EXPECT_EQ(a.job, 2u);
    }
  }
  EXPECT_EQ(h.job(2).stats.preemptions, 1);
  // B restarts at once on C's flexible GPUs (base demands come first), never on
  // the returned server.
  EXPECT_EQ(h.job(2).placement, (Placement{{2, 8}}));
  EXPECT_EQ(h.job(3).workers, 4);
  EXPECT_EQ(h.job(1).placement, a_before);
  EXPECT_EQ(h.job(3).stats.preemptions, 0);
  EXPECT_EQ(h.state().server(1)->state, ServerState::kHeld);
}

TEST(ScenarioTest, GreedyReclaimPrefersTheServerThatOnlyNeedsShrinks) {
  // Of two loaned servers, one holds an inelastic job, one only flexible workers:
  // a reclaim of one returns the second.
  Harness h(Servers(1, 2));
  h.Loan({1, 2});
  h.Submit(Inelastic(1, 4, kLong), 1);
  h.Submit(Inelastic(2, 8, kLong), 1);
  h.Submit(Elastic(3, 4, 12, kLong), 1);
  Plan plan = h.ReclaimCount(1, 1);
  EXPECT_EQ(Count(plan, ActionType::kPreempt), 0);
  EXPECT_EQ(h.state().server(2)->state, ServerState::kHeld);
  EXPECT_EQ(h.job(2).status, JobStatus::kRunning);
  EXPECT_EQ(h.job(3).workers, 4);
}

TEST(ScenarioTest, QueuedBaseDemandDisplacesFlexibleWorkers) {
  // An elastic job using the whole server shrinks to admit a queued job's base.
  Harness h(Servers(1, 0));
  h.Submit(Elastic(1, 2, 8, kLong), 0);
  ASSERT_EQ(h.job(1).workers, 8);
  Plan plan = h.Submit(Inelastic(2, 4, kLong), 1);
  ASSERT_EQ(plan.actions.size(), 2u);
  EXPECT_EQ(plan.actions[0].type, ActionType::kResize);  // the shrink comes first
  EXPECT_EQ(plan.actions[0].job, 1u);
  EXPECT_EQ(plan.actions[1].type, ActionType::kStart);
  EXPECT_EQ(plan.actions[1].job, 2u);
  EXPECT_EQ(h.job(1).workers, 4);
  EXPECT_EQ(h.job(2).workers, 4);
}

TEST(ScenarioTest, InelasticJobNeverRunsAtAnotherSize) {
  // With 32 free GPUs and loaned servers an inelastic job of 4 still gets exactly 4.
  Harness h(Servers(2, 2));
  h.Loan({2, 3});
  h.Submit(Inelastic(1, 4, 4000), 1);
  EXPECT_EQ(h.job(1).workers, 4);
  h.Submit(Elastic(2, 1, 16, 1e6), 1);
  h.Send(JobFinished{2}, 10);
  h.Send(Tick{}, 10);
  EXPECT_EQ(h.job(1).workers, 4);
  EXPECT_EQ(h.job(1).stats.rescales, 0);
}

TEST(ScenarioTest, AJobNeverSpansMoreServersThanNeededWhenOneFits) {
  // Best fit: each job lands on one server when one has room.
  Harness h(Servers(3, 0));
  h.Submit(Inelastic(1, 6, kLong), 0);
  h.Submit(Inelastic(2, 4, kLong), 1);
  h.Submit(Inelastic(3, 4, kLong), 1);  // fits the 4 left next to job 2
  h.Submit(Inelastic(4, 8, kLong), 1);
  for (JobId id : {1, 2, 3, 4}) EXPECT_EQ(h.job(id).placement.size(), 1u) << "job " << id;
  EXPECT_EQ(h.job(3).placement, h.job(2).placement);
}

TEST(ScenarioTest, AJobLargerThanAServerUsesTheFewestServers) {
  // 12 workers on 8-GPU servers: two servers (8 + 4), not three.
  Harness h(Servers(3, 0));
  h.Submit(Inelastic(1, 12, kLong), 0);
  EXPECT_EQ(h.job(1).placement.size(), 2u);
}

TEST(ScenarioTest, LoanedServersJoinAtOnceAndTheJobGrows) {
  // A loan is used in the same plan: the elastic job grows onto it.
  Harness h(Servers(1, 1));
  h.Submit(Elastic(1, 4, 16, kLong), 0);
  ASSERT_EQ(h.job(1).workers, 8);
  Plan plan = h.Loan({1}, 1);
  EXPECT_EQ(Count(plan, ActionType::kResize), 1);
  EXPECT_EQ(h.job(1).workers, 16);
  EXPECT_EQ(h.job(1).placement.at(1), 8);
}

TEST(ScenarioTest, FlexibleWorkersGoToTrainingServersBeforeLoanedOnes) {
  // Extra workers stay on the training server while it has room (resize_rule.h, 4).
  Harness h(Servers(1, 1));
  h.Loan({1});
  h.Submit(Elastic(1, 4, 8, kLong), 1);
  EXPECT_EQ(h.job(1).placement, (Placement{{0, 8}}));
}

TEST(ScenarioTest, FinishedJobsFreeGpusForTheQueue) {
  // When a job finishes, the next queued job starts in the same plan.
  Harness h(Servers(1, 0));
  h.Submit(Inelastic(1, 8, 800), 0);  // 8 it/s: done at t = 100
  h.Submit(Inelastic(2, 8, 800), 1);
  EXPECT_EQ(h.job(2).status, JobStatus::kQueued);
  EXPECT_DOUBLE_EQ(h.state().EstimatedFinishTime(1), 100);
  Plan plan = h.Send(JobFinished{1}, 99);
  EXPECT_EQ(Count(plan, ActionType::kStart), 1);
  EXPECT_EQ(h.job(2).status, JobStatus::kRunning);
  EXPECT_EQ(h.job(1).status, JobStatus::kFinished);
}

TEST(ScenarioTest, ServerFailureShrinksElasticAndPreemptsInelastic) {
  // A failed server: the elastic job keeps running smaller, the inelastic one requeues.
  Harness h(Servers(2, 0));
  h.Submit(Elastic(1, 4, 12, kLong), 0);  // 8 on one server + 4 on the other
  h.Submit(Inelastic(2, 4, kLong), 1);
  ServerId shared = 0;
  for (const auto& [sid, n] : h.job(2).placement) shared = sid;
  Plan plan = h.Send(ServerFailed{shared}, 1);
  EXPECT_EQ(h.job(2).stats.preemptions, 1);
  int preempts = 0;
  for (const Action& a : plan.actions)
    if (a.job == 2 && a.type == ActionType::kPreempt) {
      EXPECT_EQ(a.reason, "server failed: preempt");
      ++preempts;
    }
  EXPECT_EQ(preempts, 1);
  EXPECT_EQ(h.job(1).status, JobStatus::kRunning);
  EXPECT_TRUE(h.state().server(shared)->failed);
  h.Send(ServerRecovered{shared}, 1);
  EXPECT_EQ(h.job(2).status, JobStatus::kRunning);
}

TEST(ScenarioTest, CordonedServerLetsItsJobsFinishAndTakesNoNewOnes) {
  // An operator's drain that waits (ServerCordoned): the jobs on the server
  // keep their workers there, nothing new goes there, an elastic job there
  // does not grow; lifting it makes the server schedulable again.
  Harness h(Servers(2, 0));
  h.Submit(Inelastic(1, 4, kLong), 0);
  ServerId cordoned = h.job(1).placement.begin()->first;
  const ServerId other = cordoned == 0 ? 1 : 0;
  Plan plan = h.Send(ServerCordoned{cordoned, true}, 1);
  EXPECT_EQ(plan.actions.size(), 0u);
  EXPECT_TRUE(h.state().server(cordoned)->cordoned);
  EXPECT_EQ(h.job(1).status, JobStatus::kRunning);
  EXPECT_EQ(h.job(1).placement, (Placement{{cordoned, 4}}));
  h.Submit(Inelastic(2, 4, kLong), 2);  // fits beside job 1, but not there
  EXPECT_EQ(h.job(2).placement, (Placement{{other, 4}}));
  h.Submit(Inelastic(3, 8, kLong), 3);  // needs a whole server: waits
  EXPECT_EQ(h.job(3).status, JobStatus::kQueued);
  h.Send(JobFinished{2}, 4);
  EXPECT_EQ(h.job(3).placement, (Placement{{other, 8}}));
  h.Send(ServerCordoned{cordoned, false}, 5);
  h.Submit(Inelastic(4, 4, kLong), 6);
  EXPECT_EQ(h.job(4).placement, (Placement{{cordoned, 4}}));
}

TEST(ScenarioTest, ElasticJobOnACordonedServerDoesNotGrowThere) {
  Harness h(Servers(1, 0));
  h.Submit(Elastic(1, 2, 8, kLong), 0);
  ASSERT_EQ(h.job(1).workers, 8);
  h.Send(ServerCordoned{0, true}, 1);
  h.Send(JobProgress{1, kLong}, 2);
  EXPECT_EQ(h.job(1).placement, (Placement{{0, 8}}));
  // A drain --now still moves its workers off; the actions name the cause.
  Plan off = h.Send(ServerFailed{0, "drained (--now)"}, 3);
  ASSERT_FALSE(off.actions.empty());
  EXPECT_EQ(off.actions[0].type, ActionType::kPreempt);
  EXPECT_EQ(off.actions[0].reason, "drained (--now): preempt");
  EXPECT_EQ(h.job(1).status, JobStatus::kQueued);
  h.Send(ServerRecovered{0}, 4);
  EXPECT_EQ(h.job(1).status, JobStatus::kQueued) << "still cordoned";
  h.Send(ServerCordoned{0, false}, 5);
  EXPECT_EQ(h.job(1).status, JobStatus::kRunning);
}

}  // namespace
}  // namespace aryl::sched
