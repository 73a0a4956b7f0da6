#include "aryl/duration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace aryl {
namespace {

TEST(FormatDurationTest, SecondsWithoutPaddingDecimals) {
  // The reclaim reply that read "servers are empty within 60.000000 s".
  EXPECT_EQ(FormatDuration(60), "60 s");
  EXPECT_EQ(FormatDuration(1.5), "1.5 s");
  EXPECT_EQ(FormatDuration(1), "1 s");
  EXPECT_EQ(FormatDuration(2.345), "2.35 s");
  EXPECT_EQ(FormatDuration(12.34), "12.3 s");
  EXPECT_EQ(FormatDuration(59.99), "60 s");
  EXPECT_EQ(FormatDuration(90), "90 s");
}

TEST(FormatDurationTest, MillisecondsUnderASecond) {
  EXPECT_EQ(FormatDuration(0), "0 ms");
  EXPECT_EQ(FormatDuration(0.08), "80 ms");
  EXPECT_EQ(FormatDuration(0.2504), "250 ms");
  EXPECT_EQ(FormatDuration(0.9996), "1 s");
}

TEST(FormatDurationTest, TwoUnitsFromAMinuteOn) {
  EXPECT_EQ(FormatDuration(119.96), "2 min");
  EXPECT_EQ(FormatDuration(125), "2 min 5 s");
  EXPECT_EQ(FormatDuration(120.2), "2 min");
  EXPECT_EQ(FormatDuration(3599.6), "1 h");
  EXPECT_EQ(FormatDuration(3900), "1 h 5 min");
  EXPECT_EQ(FormatDuration(86400), "1 d");
  EXPECT_EQ(FormatDuration(97200), "1 d 3 h");
}

TEST(FormatDurationTest, NegativeAndNonFinite) {
  EXPECT_EQ(FormatDuration(-1.5), "-1.5 s");
  EXPECT_EQ(FormatDuration(std::nan("")), "unknown");
  EXPECT_EQ(FormatDuration(std::numeric_limits<double>::infinity()), "unknown");
}

}  // namespace
}  // namespace aryl
