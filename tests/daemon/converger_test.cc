// PlanConverge (converger.h): each step C1-C9 driven on its own, in process.
#include "aryl/daemon/converger.h"

#include <gtest/gtest.h>

namespace aryl::daemon {
namespace {

// A job of `workers` (node, rank, slot; all members of generation `gen`) on
// training node "t" (4 slots) and loaned node "l" (4 slots).
struct Fixture {
  JobMachine life;
  ConvergeInput in;
  Fixture() {
    in.life = &life;
    in.nodes["t"] = {4, true, {}};
    in.nodes["l"] = {4, false, {}};
    in.forming_timeout = 40;
    in.now = 100;
  }
  void Running(std::vector<std::tuple<std::string, int, int>> workers, std::int64_t gen = 1) {
    ASSERT_TRUE(life.Started(gen, 10));
    ASSERT_TRUE(life.Formed(gen, 11));
    in.generation = gen;
    for (const auto& [node, rank, slot] : workers) {
      const std::int64_t id = in.next_worker++;
      in.workers[id] = {id, node, rank, slot, gen, gen, false};
    }
    in.members_announced = workers.size();
    in.in_place = true;
  }
};

TEST(Converger, AFreshStartPlacesTrainingServersFirstAndRanksInThatOrder) {
  Fixture f;
  f.in.desired = {{"l", 1}, {"t", 2}};
  f.in.nodes["t"].used_by_others = {0};  // another job holds slot 0
  ConvergeResult r = PlanConverge(f.in);
  ASSERT_EQ(r.step, ConvergeStep::kGeneration);
  EXPECT_TRUE(r.fresh);
  EXPECT_EQ(r.generation, 1);
  ASSERT_EQ(r.joiners.size(), 3u);
  EXPECT_EQ(r.joiners[0].node, "t");
  EXPECT_EQ(r.joiners[0].slot, 1);
  EXPECT_EQ(r.joiners[1].node, "t");
  EXPECT_EQ(r.joiners[1].slot, 2);
  EXPECT_EQ(r.joiners[2].node, "l");
  EXPECT_EQ(r.members, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(r.next_worker, 3);
  EXPECT_FALSE(r.again);
}

TEST(Converger, WhatRunsIsLeftAlone) {
  Fixture f;
  f.Running({{"t", 0, 0}, {"t", 1, 1}});
  f.in.desired = {{"t", 2}};
  EXPECT_EQ(PlanConverge(f.in).step, ConvergeStep::kNone);
}

TEST(Converger, AGrowKeepsTheStayersRanksAndAddsJoinersAfterThem) {
  Fixture f;
  f.Running({{"t", 1, 3}, {"t", 0, 2}});  // ids 0 (rank 1) and 1 (rank 0)
  f.in.desired = {{"t", 2}, {"l", 2}};
  ConvergeResult r = PlanConverge(f.in);
  ASSERT_EQ(r.step, ConvergeStep::kGeneration);
  EXPECT_FALSE(r.fresh);
  EXPECT_EQ(r.generation, 2);
  EXPECT_TRUE(r.leavers.empty());
  EXPECT_EQ(r.members, (std::vector<std::int64_t>{1, 0, 2, 3}));
  EXPECT_EQ(r.joiners[0].slot, 0);
  EXPECT_EQ(r.joiners[1].slot, 1);
}

TEST(Converger, AShrinkTakesTheHighestRanksOfANode) {
  Fixture f;
  f.Running({{"t", 0, 0}, {"l", 2, 0}, {"l", 1, 1}});
  f.in.desired = {{"t", 1}, {"l", 1}};  // a reclaim takes one of l's
  ConvergeResult r = PlanConverge(f.in);
  ASSERT_EQ(r.step, ConvergeStep::kGeneration);
  EXPECT_EQ(r.leavers, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(r.members, (std::vector<std::int64_t>{0, 2}));
  EXPECT_TRUE(r.joiners.empty());
}

TEST(Converger, ARestartUnderWayWaitsForItsOldWorkers) {
  Fixture f;
  f.Running({{"t", 0, 0}});
  ASSERT_TRUE(f.life.RestartBegun(50));
  f.in.workers.at(0).leaving = true;
  f.in.desired = {{"t", 2}};
  EXPECT_EQ(PlanConverge(f.in).step, ConvergeStep::kNone);
  f.in.workers.clear();  // the last old worker is gone: the fresh group starts
  ConvergeResult r = PlanConverge(f.in);
  EXPECT_EQ(r.step, ConvergeStep::kGeneration);
  EXPECT_TRUE(r.fresh);
}

TEST(Converger, AFreshGroupWaitsOutAFailedNodesLease) {
  Fixture f;
  f.in.desired = {{"t", 1}};
  f.in.restart_not_before = 130;
  ConvergeResult r = PlanConverge(f.in);
  EXPECT_EQ(r.step, ConvergeStep::kLeaseWait);
  EXPECT_DOUBLE_EQ(r.lease_left, 30);
  EXPECT_TRUE(r.again);
  f.in.now = 130.5;
  EXPECT_EQ(PlanConverge(f.in).step, ConvergeStep::kGeneration);
}

TEST(Converger, AStayerNeedsNoLeaseWait) {
  Fixture f;
  f.Running({{"t", 0, 0}});
  f.in.restart_not_before = 130;
  f.in.desired = {{"t", 1}, {"l", 1}};
  EXPECT_EQ(PlanConverge(f.in).step, ConvergeStep::kGeneration);
}

TEST(Converger, AVoluntaryGrowWaitsWhileAGenerationForms) {
  Fixture f;
  f.Running({{"t", 0, 0}});
  ASSERT_TRUE(f.life.Resized(2, 95));  // generation 2 forms since t=95
  f.in.generation = 2;
  f.in.workers[1] = {1, "l", 1, 0, 2, 2, false};  // its joiner
  f.in.next_worker = 2;
  f.in.desired = {{"t", 1}, {"l", 2}};
  ConvergeResult r = PlanConverge(f.in);
  EXPECT_EQ(r.step, ConvergeStep::kWaitForming);
  EXPECT_TRUE(r.again);
  EXPECT_TRUE(r.abandoned.empty());
  // Past the forming timeout the generation is abandoned and the grow planned
  // without its joiner: it is stopped, and a fresh joiner takes its place.
  f.in.now = 95 + 41;
  r = PlanConverge(f.in);
  EXPECT_EQ(r.abandoned, (std::vector<std::int64_t>{1}));
  ASSERT_EQ(r.step, ConvergeStep::kGeneration);
  EXPECT_EQ(r.generation, 3);
  EXPECT_EQ(r.members, (std::vector<std::int64_t>{0, 2, 3}));
  EXPECT_EQ(r.joiners[0].slot, 0);  // the abandoned joiner's slot: it leaves
}

TEST(Converger, ALossAbandonsTheFormingGenerationAtOnce) {
  Fixture f;
  f.Running({{"t", 0, 0}, {"t", 1, 1}});
  ASSERT_TRUE(f.life.Resized(2, 95));
  f.in.generation = 2;
  f.in.workers[2] = {2, "l", 2, 0, 2, 2, false};
  f.in.next_worker = 3;
  f.in.workers.erase(1);     // a stayer was SIGKILLed during the grow
  f.in.last_loss_time = 96;  // after the plan
  f.in.members_announced = 3;
  f.in.desired = {{"t", 2}, {"l", 1}};
  ConvergeResult r = PlanConverge(f.in);
  EXPECT_EQ(r.abandoned, (std::vector<std::int64_t>{2}));
  ASSERT_EQ(r.step, ConvergeStep::kGeneration);
  EXPECT_EQ(r.members, (std::vector<std::int64_t>{0, 3, 4}));
  EXPECT_EQ(r.joiners[0].node, "t");
}

TEST(Converger, NoStayerMeansTheOldWorkersStopFirst) {
  Fixture f;
  f.Running({{"l", 0, 0}});
  f.in.desired = {{"t", 1}};  // the loaned server is taken; the job moves
  ConvergeResult r = PlanConverge(f.in);
  EXPECT_EQ(r.step, ConvergeStep::kRestart);
  EXPECT_TRUE(r.restart_planned);
  f.in.last_loss_time = 60;  // a loss since the plan: not a planned restart
  EXPECT_FALSE(PlanConverge(f.in).restart_planned);
}

TEST(Converger, AStartWithEverySlotHeldIsNoGeneration) {
  Fixture f;
  f.in.nodes["t"].used_by_others = {0, 1, 2, 3};
  f.in.desired = {{"t", 2}};
  ConvergeResult r = PlanConverge(f.in);
  EXPECT_EQ(r.step, ConvergeStep::kPending);
  EXPECT_EQ(r.short_nodes.at("t"), 2);
  EXPECT_TRUE(r.again);
}

TEST(Converger, ALostMemberMakesAGenerationEvenWithNothingToPlace) {
  Fixture f;
  f.Running({{"t", 0, 0}, {"t", 1, 1}});
  f.in.nodes["t"].used_by_others = {2, 3};
  f.in.workers.erase(1);
  f.in.desired = {{"t", 2}};  // slot 1 is free again but another job got it
  f.in.nodes["t"].used_by_others.insert(1);
  ConvergeResult r = PlanConverge(f.in);
  ASSERT_EQ(r.step, ConvergeStep::kGeneration);
  EXPECT_EQ(r.members, (std::vector<std::int64_t>{0}));
  EXPECT_EQ(r.short_nodes.at("t"), 1);
  f.in.members_announced = 1;  // once announced, nothing more to do
  EXPECT_EQ(PlanConverge(f.in).step, ConvergeStep::kNone);
}

TEST(Converger, PickLeaversLeavesLeaversAlone) {
  std::map<std::int64_t, ConvergeWorker> w;
  w[0] = {0, "t", 0, 0, 1, 1, false};
  w[1] = {1, "t", 1, 1, 1, 1, true};
  w[2] = {2, "t", 2, 2, 1, 1, false};
  EXPECT_EQ(PickLeavers(w, {{"t", 1}}), (std::vector<std::int64_t>{2}));
  EXPECT_EQ(PickLeavers(w, {}), (std::vector<std::int64_t>{2, 0}));
}

}  // namespace
}  // namespace aryl::daemon
