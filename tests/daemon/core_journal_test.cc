// The core journal's speed rows (scheduler/daemon/src/core_journal.h): a fit
// row gives back the very parameters, so replay installs the fit the
// scheduler decided on.
#include "core_journal.h"

#include <gtest/gtest.h>

#include <variant>

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

}  // namespace
}  // namespace aryl::daemon
