// JobMachine and the forming rule (scheduler/daemon/src/job_machine.h): the
// table, each transition driven on its own, and the life cycles the daemon
// goes through.
#include "aryl/daemon/job_machine.h"

#include <gtest/gtest.h>

#include <set>

namespace aryl::daemon {
namespace {

using P = JobPhase;
using E = JobEvent;

TEST(JobMachine, FinalPhasesLeadNowhereAndEveryLivePhaseCanEnd) {
  for (const auto& r : JobMachine::Table()) EXPECT_FALSE(IsFinal(r.from)) << PhaseName(r.from);
  for (P p : {P::kQueued, P::kStarting, P::kRunning, P::kResizing, P::kRestarting, P::kLeaseWait, P::kCompleting})
    for (P end : {P::kCompleted, P::kFailed, P::kCancelled}) EXPECT_TRUE(JobMachine::Legal(p, E::kEnded, end));
}

TEST(JobMachine, NamesRoundTrip) {
  std::set<std::string_view> names;
  for (P p : {P::kQueued, P::kStarting, P::kRunning, P::kResizing, P::kRestarting, P::kLeaseWait, P::kCompleting,
              P::kCompleted, P::kFailed, P::kCancelled}) {
    EXPECT_EQ(PhaseFromName(PhaseName(p)), p);
    names.insert(PhaseName(p));
  }
  EXPECT_EQ(names.size(), 10u);
  EXPECT_EQ(PhaseFromName("pending"), std::nullopt);
}

TEST(JobMachine, StartFormResizeFormComplete) {
  // The common life: start (generation 1), first step, grow (2), switch, end.
  JobMachine m;
  EXPECT_TRUE(m.Started(1, 10));
  EXPECT_TRUE(m.Is(P::kStarting));
  EXPECT_TRUE(m.Formed(1, 11));
  EXPECT_TRUE(m.Is(P::kRunning));
  EXPECT_TRUE(m.Resized(2, 20));
  EXPECT_TRUE(m.Is(P::kResizing));
  EXPECT_EQ(m.planned(), 2);
  EXPECT_EQ(m.formed(), 1);
  EXPECT_TRUE(m.Formed(1, 21));  // rank 0 still reports generation 1
  EXPECT_TRUE(m.Is(P::kResizing));
  EXPECT_TRUE(m.Formed(2, 22));
  EXPECT_TRUE(m.Is(P::kRunning));
  EXPECT_DOUBLE_EQ(m.since(), 22);
  EXPECT_TRUE(m.WorkerDone(500, 30));
  EXPECT_EQ(m.completing_step(), 500);
  EXPECT_TRUE(m.Ended(P::kCompleted, 31));
  EXPECT_TRUE(m.Is(P::kCompleted));
  auto log = m.TakeTransitions();
  ASSERT_EQ(log.size(), 6u);
  EXPECT_EQ(log[0].event, E::kStarted);
  EXPECT_EQ(log[5].to, P::kCompleted);
}

TEST(JobMachine, EndedIsFinal) {
  // Nothing moves an ended job; a non-final "end" is refused.
  JobMachine m;
  EXPECT_FALSE(m.Ended(P::kRunning, 1));
  EXPECT_TRUE(m.Ended(P::kCancelled, 1));
  EXPECT_FALSE(m.Started(1, 2));
  EXPECT_FALSE(m.RestartBegun(2));
  EXPECT_FALSE(m.WorkerDone(1, 2));
  EXPECT_FALSE(m.Ended(P::kFailed, 2));
  EXPECT_TRUE(m.Is(P::kCancelled));
}

TEST(JobMachine, RestartThenStartAgain) {
  // Restart elasticity: every worker stopped, then a fresh group.
  JobMachine m;
  m.Started(1, 0);
  m.Formed(1, 1);
  EXPECT_TRUE(m.RestartBegun(5));
  EXPECT_TRUE(m.Is(P::kRestarting));
  EXPECT_FALSE(m.Resized(2, 6)) << "no generation with stayers while every worker stops";
  EXPECT_TRUE(m.Started(2, 7));
  EXPECT_TRUE(m.Is(P::kStarting));
}

TEST(JobMachine, LeaseWaitHoldsAFreshStart) {
  // Workers lost with their server: the fresh start waits out the lease.
  JobMachine m;
  m.Started(1, 0);
  m.Formed(1, 1);
  EXPECT_TRUE(m.LeaseWait(2));
  EXPECT_FALSE(m.LeaseWait(3)) << "already waiting: noted once";
  EXPECT_TRUE(m.Started(2, 60));
}

TEST(JobMachine, CompletingJobWhosePeersGoOnRunsAgain) {
  // A rank said "completed" at step 300; its peers trained on: it left.
  JobMachine m;
  m.Started(1, 0);
  m.Formed(1, 1);
  m.WorkerDone(300, 5);
  EXPECT_FALSE(m.Resized(2, 6)) << "a completing job makes no generation with stayers";
  EXPECT_TRUE(m.WentOn(7));
  EXPECT_TRUE(m.Is(P::kRunning));
  EXPECT_FALSE(m.WentOn(8));
}

TEST(JobMachine, PreemptedJobIsQueuedAgain) {
  JobMachine m;
  m.Started(1, 0);
  EXPECT_TRUE(m.Unplaced(3));
  EXPECT_TRUE(m.Is(P::kQueued));
  EXPECT_FALSE(m.Unplaced(4));
}

TEST(JobMachine, RestoreTrustsTheRecord) {
  JobMachine m;
  m.Restore(P::kCompleting, 7, 120, 100);
  EXPECT_TRUE(m.Is(P::kCompleting));
  EXPECT_EQ(m.completing_step(), 120);
  EXPECT_EQ(m.formed(), 7);
  EXPECT_EQ(m.planned(), 7);
  EXPECT_TRUE(m.TakeTransitions().empty());
}

TEST(FormingRule, NothingFormsAfterAFormedGeneration) {
  // Generation 2 trains (formed == planned): any change is planned at once.
  JobMachine m;
  m.Started(1, 0);
  m.Formed(1, 1);
  m.Resized(2, 5);
  m.Formed(2, 6);
  EXPECT_EQ(WhileForming(m, /*forced=*/false, 7, 40), FormingDecision::kPlan);
}

TEST(FormingRule, AVoluntaryChangeWaitsWhileAGenerationForms) {
  // A grow (generation 2) forms since t=5: another voluntary change waits,
  // up to the forming timeout; then it abandons generation 2.
  JobMachine m;
  m.Started(1, 0);
  m.Formed(1, 1);
  m.Resized(2, 5);
  EXPECT_EQ(WhileForming(m, false, 6, 40), FormingDecision::kWait);
  EXPECT_EQ(WhileForming(m, false, 44.9, 40), FormingDecision::kWait);
  EXPECT_EQ(WhileForming(m, false, 45.1, 40), FormingDecision::kAbandonThenPlan);
}

TEST(FormingRule, AForcedChangeAbandonsTheFormingGeneration) {
  // A worker was lost (or a reclaim takes workers) while generation 2 forms.
  JobMachine m;
  m.Started(1, 0);
  m.Formed(1, 1);
  m.Resized(2, 5);
  EXPECT_EQ(WhileForming(m, /*forced=*/true, 6, 40), FormingDecision::kAbandonThenPlan);
  // A fresh start forms too: its first step has not been seen.
  JobMachine fresh;
  fresh.Started(1, 0);
  EXPECT_EQ(WhileForming(fresh, true, 1, 40), FormingDecision::kAbandonThenPlan);
  EXPECT_EQ(WhileForming(fresh, false, 1, 40), FormingDecision::kWait);
}

TEST(FormingRule, UnformedJoinersAreThoseStartedForANewerGeneration) {
  // Workers 0, 1 joined generation 1 (formed); 3, 4 joined generation 2
  // (forming); 5 is already leaving.
  std::vector<MemberView> live = {{0, 1, false}, {1, 1, false}, {3, 2, false}, {4, 2, false}, {5, 2, true}};
  EXPECT_EQ(UnformedJoiners(live, /*formed=*/1), (std::vector<std::int64_t>{3, 4}));
  EXPECT_TRUE(UnformedJoiners(live, 2).empty());
  // A fresh start that never formed: every worker is a joiner.
  EXPECT_EQ(UnformedJoiners(live, 0).size(), 4u);
}

}  // namespace
}  // namespace aryl::daemon
