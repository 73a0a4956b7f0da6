#include <gtest/gtest.h>

#include "aryl/clock.h"
#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl {
namespace {

Result<int> ParsePositive(int v) {
  if (v <= 0) return Status::OutOfRange("value " + std::to_string(v) + " must be > 0");
  return v;
}

Result<int> Doubled(int v) {
  ARYL_ASSIGN_OR_RETURN(int x, ParsePositive(v));
  return 2 * x;
}

Status Check(int v) {
  ARYL_RETURN_IF_ERROR(ParsePositive(v).status());
  return Status::Ok();
}

TEST(StatusTest, OkHasNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ErrorNamesCodeAndMessage) {
  Status s = Status::NotFound("job 'j7'");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_EQ(s.ToString(), "NotFound: job 'j7'");
  EXPECT_EQ(s.WithContext("cancel").ToString(), "NotFound: cancel: job 'j7'");
}

TEST(StatusTest, RetryableSplit) {
  EXPECT_TRUE(Status::Timeout("t").IsRetryable());
  EXPECT_TRUE(Status::IoError("t").IsRetryable());
  EXPECT_TRUE(Status::Unavailable("t").IsRetryable());
  EXPECT_FALSE(Status::InvalidArgument("t").IsRetryable());
  EXPECT_FALSE(Status::Corruption("t").IsRetryable());
}

TEST(ResultTest, ValueAndErrorPropagate) {
  auto ok = Doubled(4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 8);
  auto bad = Doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kOutOfRange);
  EXPECT_NE(bad.status().message().find("-1"), std::string::npos);
  EXPECT_TRUE(Check(3).ok());
  EXPECT_FALSE(Check(0).ok());
}

TEST(ResultTest, OkStatusIsNotAValue) {
  Result<int> r(Status::Ok());
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInternal);
}

TEST(ClockTest, ManualClockMovesOnlyWhenTold) {
  ManualClock c(10.0);
  EXPECT_DOUBLE_EQ(c.NowSeconds(), 10.0);
  c.Advance(2.5);
  EXPECT_DOUBLE_EQ(c.NowSeconds(), 12.5);
  double a = SystemClock::Default()->NowSeconds();
  double b = SystemClock::Default()->NowSeconds();
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace aryl
