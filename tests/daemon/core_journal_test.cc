// The core journal's speed rows (scheduler/daemon/src/core_journal.h): a fit
// row gives back the very parameters, so replay installs the fit the
// scheduler decided on.
#include "core_journal.h"

#include <gtest/gtest.h>

#include <atomic>
#include <variant>

#include "../scheduler/test_util.h"

namespace aryl::daemon {
namespace {

TEST(CoreJournalTest, SpeedFitRowGivesBackTheExactFit) {
  // Parameters without a short decimal form survive the row bit for bit.
  SpeedFitRow row;
  row.job = 42;
  sched::SpeedParams& q = row.fit.params;
  q.alpha_c = 0.1 + 0.2;
  q.beta_c = 1.0 / 3;
  q.alpha_r = 3.141592653589793e-7;
  q.beta_r = 2.718281828459045e-3;
  q.alpha_n = 1e-7;
  q.beta_n = 0.017320508075688773;
  q.gamma = 1.0000000000000002;
  q.type_speed["T4"] = 0.30000000000000004;
  row.fit.fitted_count = {20, 0, 1 << 30};
  Result<JournalRow> back = RowFromJson(SpeedFitToJson(row));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto* got = std::get_if<SpeedFitRow>(&*back);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->job, 42);
  const sched::SpeedParams& g = got->fit.params;
  EXPECT_EQ(g.alpha_c, q.alpha_c);
  EXPECT_EQ(g.beta_c, q.beta_c);
  EXPECT_EQ(g.alpha_r, q.alpha_r);
  EXPECT_EQ(g.beta_r, q.beta_r);
  EXPECT_EQ(g.alpha_n, q.alpha_n);
  EXPECT_EQ(g.beta_n, q.beta_n);
  EXPECT_EQ(g.gamma, q.gamma);
  EXPECT_EQ(g.type_speed, q.type_speed);
  EXPECT_EQ(got->fit.fitted_count, row.fit.fitted_count);
  EXPECT_TRUE(RowFromJson(R"({"type":"speed_fit","job":1,"fit":{}})").status().IsCorruption());
  row.fit.params.gamma = -1;
  EXPECT_TRUE(RowFromJson(SpeedFitToJson(row)).status().IsCorruption());
}

TEST(CoreJournalTest, SampleRowsSayWhetherTheirFitIsDeferred) {
  // The daemon's sample rows are deferred; a row of an older journal (no
  // flag) is not, so replay fits it inline as it was.
  SpeedSampleRow row{7, sched::StepSample{"A100", 2, 1, 0.5, 0.25, 0.01, 30}, true};
  Result<JournalRow> back = RowFromJson(SpeedSampleToJson(row));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto* got = std::get_if<SpeedSampleRow>(&*back);
  ASSERT_NE(got, nullptr);
  EXPECT_TRUE(got->deferred);
  EXPECT_EQ(got->sample.step_time, 0.25);
  row.deferred = false;
  const std::string old = SpeedSampleToJson(row);
  EXPECT_EQ(old.find("deferred"), std::string::npos);
  back = RowFromJson(old);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(std::get<SpeedSampleRow>(*back).deferred);
}

TEST(CoreJournalTest, AServerFailuresCauseSurvivesItsRow) {
  // drain --now's cause is kept (its actions' reasons name it on replay too);
  // a plain failure's row is as before causes existed, and reads back as one.
  const std::string drained = EventToJson(sched::ServerFailed{3, "drained (--now)"});
  auto back = EventFromJson(drained);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(std::get<sched::ServerFailed>(*back).server, 3);
  EXPECT_EQ(std::get<sched::ServerFailed>(*back).cause, "drained (--now)");
  const std::string lost = EventToJson(sched::ServerFailed{4});
  EXPECT_EQ(lost, R"({"server":4,"type":"failed"})");
  back = EventFromJson(lost);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(std::get<sched::ServerFailed>(*back).cause, "server failed");
}

TEST(CoreJournalTest, AMeasuredResizePauseSurvivesItsRow) {
  // The pause the resize rule weighs is journaled exactly, so a replayed core
  // decides as the live one did.
  const std::string row = EventToJson(sched::JobResizeMeasured{7, 0.1234567890123});
  auto back = EventFromJson(row);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(std::get<sched::JobResizeMeasured>(*back).job, 7u);
  EXPECT_EQ(std::get<sched::JobResizeMeasured>(*back).pause, 0.1234567890123);
}

// 300 jobs in varied states (elastic and inelastic, three models, running,
// queued, some finished, a failed server, a cordoned one, a reclaim under
// way): the snapshot read back is the image it was written from, byte for
// byte when written again.
TEST(CoreSnapshotTest, ARestoredImageEqualsTheSavedOne) {
  namespace t = aryl::sched::testing;
  t::Harness h(t::Servers(30, 4));
  const char* models[] = {"linear", "sublinear", "holes"};
  for (sched::JobId id = 1; id <= 300; ++id) {
    sched::JobSpec spec = id % 3 ? t::Elastic(id, 1, 1 + id % 8, 500.0 + id, models[id % 3])
                                 : t::Inelastic(id, 1 + id % 4, 800, models[id % 3]);
    h.Submit(spec, 0.5);
    if (id % 40 == 0) h.Send(sched::JobFinished{id - 30}, 0.1);
  }
  h.Send(sched::ServerFailed{3}, 1);
  h.Send(sched::ServerCordoned{5, true}, 1);
  h.Loan({31}, 1);
  h.ReclaimNamed({31}, 1);
  const auto image = h.scheduler().Snapshot();
  int running = 0;
  for (const auto& j : image.state.jobs) running += j.status == sched::JobStatus::kRunning;
  ASSERT_GT(running, 10);
  ASSERT_GT(static_cast<int>(image.state.jobs.size()) - running, 10);  // some queued

  auto text = SnapshotToJson(image);
  ASSERT_TRUE(text.ok()) << text.status();
  auto back = SnapshotFromJson(*text);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->state.jobs.size(), image.state.jobs.size());
  ASSERT_EQ(back->state.servers.size(), image.state.servers.size());
  for (size_t i = 0; i < image.state.jobs.size(); ++i) {
    const auto &a = image.state.jobs[i], &b = back->state.jobs[i];
    EXPECT_EQ(a.spec.id, b.spec.id);
    EXPECT_EQ(a.status, b.status);
    EXPECT_EQ(a.placement, b.placement);
    EXPECT_EQ(a.curves, b.curves);
    EXPECT_EQ(a.remaining_work, b.remaining_work);
  }
  for (size_t i = 0; i < image.state.servers.size(); ++i) {
    EXPECT_EQ(image.state.servers[i].jobs, back->state.servers[i].jobs);
    EXPECT_EQ(image.state.servers[i].cordoned, back->state.servers[i].cordoned);
  }
  EXPECT_EQ(back->state.now, image.state.now);
  EXPECT_EQ(back->state.reclaims.size(), image.state.reclaims.size());
  auto again = SnapshotToJson(*back);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *text);
  // And a restore of what was read back is the core the image restores to.
  auto restored = sched::Scheduler::Restore("aryl", std::move(*back), t::Catalog());
  ASSERT_TRUE(restored.ok()) << restored.status();
  auto round = SnapshotToJson((*restored)->Snapshot());
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(*round, *text);
}

// A snapshot whose job or server is not an object is refused, not skipped.
TEST(CoreSnapshotTest, AJobThatIsNotAnObjectIsCorruption) {
  namespace t = aryl::sched::testing;
  t::Harness h(t::Servers(2, 0));
  h.Submit(t::Inelastic(1, 1));
  auto text = SnapshotToJson(h.scheduler().Snapshot());
  ASSERT_TRUE(text.ok());
  for (const std::string member : {"\"jobs\":[", "\"servers\":["}) {
    std::string bad = *text;
    auto at = bad.find(member);
    ASSERT_NE(at, std::string::npos) << member;
    bad.insert(at + member.size(), "7,");
    auto back = SnapshotFromJson(bad);
    EXPECT_EQ(back.status().code(), Status::Code::kCorruption) << member << ": " << back.status();
  }
}

// An encoding whose snapshot was dropped stops and says so.
TEST(CoreSnapshotTest, ACancelledEncodingStops) {
  namespace t = aryl::sched::testing;
  t::Harness h(t::Servers(2, 0));
  h.Submit(t::Inelastic(1, 1));
  std::atomic<bool> cancel{true};
  auto text = SnapshotToJson(h.scheduler().Snapshot(), &cancel);
  EXPECT_EQ(text.status().code(), Status::Code::kCancelled) << text.status();
  cancel = false;
  EXPECT_TRUE(SnapshotToJson(h.scheduler().Snapshot(), &cancel).ok());
}

}  // namespace
}  // namespace aryl::daemon
