// StepTimer: the step-time summaries rank 0 (or its agent) reports to the scheduler.
#include "aryl/protocol/step_timer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace aryl::protocol {
namespace {

StepTimer::Options Opts(int warmup, int min_steps, double min_seconds) {
  StepTimer::Options o;
  o.warmup_steps = warmup;
  o.min_steps = min_steps;
  o.min_seconds = min_seconds;
  return o;
}

TEST(StepTimer, MedianAndSpreadOfStepsAfterTheWarmUp) {
  StepTimer t(Opts(2, 5, 0.1));
  double now = 100;
  t.Step(now, 1, 2);  // the first boundary of generation 1: no interval yet
  // Two warm-up steps (slow: a new communicator), then five of 0.1 s with one outlier.
  for (double dt : {2.0, 1.0, 0.1, 0.1, 0.5, 0.1, 0.1}) t.Step(now += dt, 1, 2, 0.01);
  auto s = t.TakeSummary();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->seq, 1);
  EXPECT_EQ(s->generation, 1);
  EXPECT_EQ(s->workers, 2);
  EXPECT_EQ(s->count, 5);
  EXPECT_NEAR(s->median_s, 0.1, 1e-9);
  EXPECT_NEAR(s->spread_s, 0.0, 1e-9);  // the outlier moves the median deviation not at all
  EXPECT_NEAR(s->sync_median_s, 0.01, 1e-12);
  // Every step is in one summary only.
  EXPECT_FALSE(t.TakeSummary());
}

TEST(StepTimer, NoSummaryBeforeEnoughStepsAndTime) {
  StepTimer t(Opts(0, 4, 1.0));
  double now = 0;
  t.Step(now, 3, 1);
  for (int i = 0; i < 5; ++i) t.Step(now += 0.1, 3, 1);
  EXPECT_FALSE(t.TakeSummary()) << "5 steps but 0.5 s";
  for (int i = 0; i < 5; ++i) t.Step(now += 0.11, 3, 1);
  auto s = t.TakeSummary();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->count, 10);
}

TEST(StepTimer, NewGenerationStartsOverAndInterruptSkipsAnInterval) {
  StepTimer t(Opts(1, 3, 0));
  double now = 0;
  t.Step(now, 1, 4);
  for (int i = 0; i < 3; ++i) t.Step(now += 0.2, 1, 4);  // one warm-up, two counted
  t.Step(now += 5, 2, 2);                                 // resize: generation 2 at 2 workers
  for (int i = 0; i < 2; ++i) t.Step(now += 0.3, 2, 2);  // one warm-up, one counted
  t.Interrupt();                                          // a checkpoint was written
  t.Step(now += 9, 2, 2);                                 // not a step's time
  for (int i = 0; i < 2; ++i) t.Step(now += 0.3, 2, 2);
  auto s = t.TakeSummary();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->generation, 2);
  EXPECT_EQ(s->workers, 2);
  EXPECT_EQ(s->count, 3);
  EXPECT_NEAR(s->median_s, 0.3, 1e-9);
}

// The agent's use: step times a program printed, not boundaries it timed.
TEST(StepTimer, PrintedStepTimesWarmUpPerGenerationAndSkipNonsense) {
  StepTimer t(Opts(2, 4, 0));
  for (double s : {3.0, 2.0, 0.25, 0.25}) t.StepTime(s, 7, 2);  // two warm-up steps, two counted
  EXPECT_FALSE(t.TakeSummary()) << "2 of 4 steps";
  t.StepTime(4.0, 8, 4);  // a restart at 4 workers: a warm-up step of the new group
  for (double s : {1.0, 0.125, 0.0, -1.0, std::nan(""), 0.125, 0.5, 0.125}) t.StepTime(s, 8, 4);
  auto s = t.TakeSummary();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->generation, 8);
  EXPECT_EQ(s->workers, 4);
  EXPECT_EQ(s->count, 4) << "the 0, negative and NaN step times are not steps";
  EXPECT_NEAR(s->median_s, 0.125, 1e-12);
  EXPECT_EQ(s->sync_median_s, 0) << "unknown";
}

TEST(StepTimer, MedianOfEvenAndOdd) {
  std::vector<double> a{3, 1, 2};
  EXPECT_EQ(Median(a), 2);
  std::vector<double> b{4, 1, 3, 2};
  EXPECT_EQ(Median(b), 2.5);
  std::vector<double> c;
  EXPECT_EQ(Median(c), 0);
}

}  // namespace
}  // namespace aryl::protocol
