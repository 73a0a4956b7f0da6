#include "failure_tally.h"

#include <gtest/gtest.h>

#include <string>

namespace aryl::daemon {
namespace {

constexpr double kInterval = 30;

// The run: a checkpoint every 5 s fails 101 times from step 200 on.
// The first failure is journaled at once, then one row per 30 s, each standing
// for the failures since the previous one; the success that ends the run
// brings the rest; the rows add up to every failure.
TEST(FailureTally, RowsStandForEveryFailure) {
  FailureTally t;
  int64_t journaled = 0;
  int rows = 0;
  auto row_of = [&](const FailureTally::Row& r) {
    EXPECT_GE(r.failures, 1);
    EXPECT_LE(r.first_step, r.last_step);
    journaled += r.failures;
    ++rows;
  };
  for (int i = 0; i <= 100; ++i) {
    double now = 1000 + 5.0 * i;
    auto row =
        t.Fail(now, 200 + 50 * i, "no space: step " + std::to_string(200 + 50 * i), kInterval);
    if (i == 0) {
      ASSERT_TRUE(row.has_value());
      EXPECT_EQ(row->failures, 1);
      EXPECT_EQ(row->first_step, 200);
    }
    if (i == 1) {
      EXPECT_FALSE(row.has_value());
    }
    if (i == 6) {  // 30 s after the first row: stands for steps 250..500
      ASSERT_TRUE(row.has_value());
      EXPECT_EQ(row->failures, 6);
      EXPECT_EQ(row->first_step, 250);
      EXPECT_EQ(row->first_time, 1005);
      EXPECT_EQ(row->last_step, 500);
      EXPECT_EQ(row->last_error, "no space: step 500");
    }
    if (row) row_of(*row);
  }
  EXPECT_EQ(t.total(), 101);
  EXPECT_EQ(rows, 1 + 100 / 6);  // not one row per failure
  EXPECT_LT(journaled, 101);     // the run's tail is still pending
  auto tail = t.Recovered();
  ASSERT_TRUE(tail.has_value());
  row_of(*tail);
  EXPECT_EQ(tail->last_step, 200 + 50 * 100);
  EXPECT_EQ(journaled, 101);
  EXPECT_EQ(t.total(), 101);
  EXPECT_FALSE(t.Recovered().has_value());  // nothing pending: no row
}

// A success with nothing pending writes nothing; a new run after the interval
// starts with a row of its own, and the total goes on counting.
TEST(FailureTally, ANewRunAfterASuccess) {
  FailureTally t;
  EXPECT_FALSE(t.Recovered().has_value());
  ASSERT_TRUE(t.Fail(0, 10, "e", kInterval).has_value());
  EXPECT_FALSE(t.Recovered().has_value());
  EXPECT_FALSE(t.Fail(10, 20, "e", kInterval).has_value());  // within the interval of the last row
  auto r = t.Recovered();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->failures, 1);
  EXPECT_EQ(r->first_step, 20);
  auto again = t.Fail(100, 30, "e2", kInterval);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->failures, 1);
  EXPECT_EQ(again->last_error, "e2");
  EXPECT_EQ(t.total(), 3);
}

}  // namespace
}  // namespace aryl::daemon
