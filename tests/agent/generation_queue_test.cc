// GenerationQueue (agent/src/generation_queue.h): every transition of the
// table, driven one by one, and the livelock it ends.
#include "aryl/agent/generation_queue.h"

#include <gtest/gtest.h>

namespace aryl::agent {
namespace {

using State = GenerationQueue::State;
using Event = GenerationQueue::Event;

GenerationQueue::Generation Gen(std::int64_t job, std::int64_t g, std::vector<std::int64_t> members) {
  GenerationQueue::Generation out;
  out.job = job;
  out.generation = g;
  out.members = std::move(members);
  out.key = std::to_string(job) + "-1";
  return out;
}

std::vector<std::pair<Event, State>> Moves(GenerationQueue& q) {
  std::vector<std::pair<Event, State>> out;
  for (const auto& t : q.TakeTransitions()) out.push_back({t.event, t.to});
  return out;
}

TEST(GenerationQueue, TableHasOneRowPerStateAndEvent) {
  // No (from, event) pair appears twice, and the final states lead nowhere.
  for (std::size_t i = 0; i < std::size(GenerationQueue::kTable); ++i)
    for (std::size_t k = i + 1; k < std::size(GenerationQueue::kTable); ++k)
      EXPECT_FALSE(GenerationQueue::kTable[i].from == GenerationQueue::kTable[k].from &&
                   GenerationQueue::kTable[i].event == GenerationQueue::kTable[k].event)
          << "rows " << i << " and " << k;
  for (const auto& r : GenerationQueue::kTable) {
    EXPECT_NE(r.from, std::optional<State>(State::kTraining));
    EXPECT_NE(r.from, std::optional<State>(State::kAbandoned));
  }
  EXPECT_EQ(GenerationQueue::Next(State::kAgreed, Event::kAllReady), std::nullopt);
  EXPECT_EQ(GenerationQueue::Next(std::nullopt, Event::kReported), std::nullopt);
}

TEST(GenerationQueue, PlanAllReadyReportedIsTheHappyPath) {
  // T1, T3, T4: a grow forms, is announced once its joiners are ready, and trains.
  GenerationQueue q;
  ASSERT_TRUE(q.Plan(Gen(1, 2000, {0, 1, 2}), 10));
  EXPECT_EQ(q.Current(1)->state, State::kForming);
  auto a = q.AllReady(1, 2000, 11);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->members, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(q.Current(1)->state, State::kAgreed);
  EXPECT_FALSE(q.AllReady(1, 2000, 12).has_value()) << "announced once";
  q.Reported(1, 2000);
  EXPECT_EQ(q.Current(1), nullptr);
  EXPECT_EQ(Moves(q), (std::vector<std::pair<Event, State>>{
                          {Event::kPlan, State::kForming},
                          {Event::kAllReady, State::kAgreed},
                          {Event::kReported, State::kTraining}}));
}

TEST(GenerationQueue, NewerPlanSupersedesOneThatCannotForm) {
  // T2: a joiner of plan 8 died before it was ready; plan 9 replaces it and is
  // announced at once, not after plan 8's 120 s forming deadline.
  GenerationQueue q;
  q.Plan(Gen(1, 8000, {0, 1, 2, 3}), 0);
  q.Plan(Gen(1, 9000, {0, 1, 4, 5}), 1);
  EXPECT_EQ(q.Current(1)->generation, 9000);
  EXPECT_FALSE(q.AllReady(1, 8000, 2).has_value());
  EXPECT_TRUE(q.AllReady(1, 9000, 2).has_value());
  EXPECT_EQ(Moves(q), (std::vector<std::pair<Event, State>>{{Event::kPlan, State::kForming},
                                                             {Event::kSuperseded, State::kAbandoned},
                                                             {Event::kPlan, State::kForming},
                                                             {Event::kAllReady, State::kAgreed}}));
}

TEST(GenerationQueue, NewerPlanDoesNotWaitForAnOlderReport) {
  // T2 from kAgreed: plan 3 was announced but its switch failed (no report);
  // plan 4 is announced without waiting 30 s for plan 3's report.
  GenerationQueue q;
  q.Plan(Gen(1, 3000, {0, 1}), 0);
  q.AllReady(1, 3000, 0.5);
  q.Plan(Gen(1, 4000, {0, 2}), 1);
  EXPECT_TRUE(q.AllReady(1, 4000, 1.1).has_value());
  q.Reported(1, 3000);  // a late report of the older plan changes nothing
  EXPECT_EQ(q.Current(1)->generation, 4000);
  EXPECT_EQ(q.Current(1)->state, State::kAgreed);
}

TEST(GenerationQueue, OlderOrRepeatedPlanIsIgnored) {
  // A plan not newer than one seen is a duplicate or overtaken: no transition.
  GenerationQueue q;
  q.Plan(Gen(1, 5000, {0}), 0);
  (void)q.TakeTransitions();
  EXPECT_FALSE(q.Plan(Gen(1, 5000, {0}), 1));
  EXPECT_FALSE(q.Plan(Gen(1, 4000, {0}), 1));
  EXPECT_TRUE(q.TakeTransitions().empty());
  EXPECT_EQ(q.Current(1)->generation, 5000);
}

TEST(GenerationQueue, MemberEndedWhileFormingAbandons) {
  // T5: a member of the forming plan exited here; a stayer that is not a member is ignored.
  GenerationQueue q;
  q.Plan(Gen(1, 2000, {0, 1, 2}), 0);
  q.MemberEnded(1, 7);
  EXPECT_NE(q.Current(1), nullptr);
  q.MemberEnded(1, 2);
  EXPECT_EQ(q.Current(1), nullptr);
  // Once agreed, a member's end is the runtime's fault recovery, not the queue's.
  q.Plan(Gen(1, 3000, {0, 1}), 1);
  q.AllReady(1, 3000, 1);
  q.MemberEnded(1, 1);
  EXPECT_EQ(q.Current(1)->state, State::kAgreed);
}

TEST(GenerationQueue, DeadlinesExpire) {
  // T6: forming past 120 s, agreed past 30 s without a report.
  GenerationQueue q({.forming = 120, .report = 30});
  q.Plan(Gen(1, 2000, {0, 1}), 0);
  q.Plan(Gen(2, 2000, {0, 1}), 0);
  q.AllReady(2, 2000, 100);
  q.Expire(119);
  EXPECT_NE(q.Current(1), nullptr);
  q.Expire(121);
  EXPECT_EQ(q.Current(1), nullptr);
  EXPECT_NE(q.Current(2), nullptr);
  q.Expire(131);
  EXPECT_EQ(q.Current(2), nullptr);
}

TEST(GenerationQueue, JobEndedDropsEverything) {
  // T7, and a later start of the job is planned afresh.
  GenerationQueue q;
  q.Plan(Gen(1, 9000, {0}), 0);
  q.JobEnded(1);
  EXPECT_EQ(q.Current(1), nullptr);
  EXPECT_TRUE(q.Plan(Gen(1, 1000, {0}), 1)) << "a new start of the job numbers its plans again";
}

TEST(GenerationQueue, ReportBeforeAnnouncementTrains) {
  // T4 from kForming: rank 0's report reached this agent before its own
  // readiness query answered.
  GenerationQueue q;
  q.Plan(Gen(1, 2000, {0, 1}), 0);
  q.Reported(1, 2000);
  EXPECT_EQ(q.Current(1), nullptr);
  EXPECT_EQ(Moves(q).back(), (std::pair<Event, State>{Event::kReported, State::kTraining}));
}

}  // namespace
}  // namespace aryl::agent
