#include "aryl/sim/demand.h"

#include <gtest/gtest.h>

#include <cmath>

namespace aryl::sim {
namespace {

TEST(DemandTest, CsvIsAStepFunction) {
  // Unsorted rows form a step function; before the first row its value holds.
  auto d = ParseDemandCsv("time_s,servers\n100,4\n0,2\n200,1\n", "d.csv", 8);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->At(-5), 2);
  EXPECT_EQ(d->At(0), 2);
  EXPECT_EQ(d->At(99.9), 2);
  EXPECT_EQ(d->At(100), 4);
  EXPECT_EQ(d->At(1e9), 1);
  EXPECT_EQ(d->NextChange(0), 100);
  EXPECT_EQ(d->NextChange(100), 200);
  EXPECT_TRUE(std::isinf(d->NextChange(200)));
}

TEST(DemandTest, CsvErrorsNameFileLine) {
  // Bad values, duplicate times and demand above the cluster are errors with file:line.
  auto over = ParseDemandCsv("time_s,servers\n0,2\n10,9\n", "d.csv", 8);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("d.csv:3: servers: 9 > 8"), std::string::npos) << over.status();
  auto neg = ParseDemandCsv("time_s,servers\n-1,2\n", "d.csv", 8);
  EXPECT_NE(neg.status().message().find("d.csv:2: time_s"), std::string::npos) << neg.status();
  auto dup = ParseDemandCsv("time_s,servers\n5,2\n5,3\n", "d.csv", 8);
  EXPECT_NE(dup.status().message().find("given twice"), std::string::npos) << dup.status();
  EXPECT_FALSE(ParseDemandCsv("t,s\n", "d.csv", 8).ok());
  EXPECT_FALSE(ParseDemandCsv("time_s,servers\n1,2,3\n", "d.csv", 8).ok());
}

TEST(DemandTest, DailyFollowsTheCycle) {
  // Without noise: peak at peak_hour, trough 12 h later, weekend scaled, held per step.
  auto p = ParseDailyParams("peak=0.9,trough=0.3,peak_hour=14,weekend=0.5,noise=0,step=300");
  ASSERT_TRUE(p.ok()) << p.status();
  DemandCurve d = DemandCurve::Daily(*p, 100, 1);
  EXPECT_EQ(d.At(14 * 3600), 90);
  EXPECT_EQ(d.At(2 * 3600), 30);
  EXPECT_EQ(d.At(14 * 3600 + 299), 90);
  EXPECT_EQ(d.At(5 * 86400 + 14 * 3600), 45);  // Saturday
  EXPECT_EQ(d.At(7 * 86400 + 14 * 3600), 90);  // Monday again
  EXPECT_EQ(d.NextChange(10), 300);
}

TEST(DemandTest, DailyNoiseIsSeededAndBounded) {
  // Same seed, same curve; another seed differs; values stay within the cluster.
  auto p = ParseDailyParams("noise=0.2");
  ASSERT_TRUE(p.ok());
  DemandCurve a = DemandCurve::Daily(*p, 48, 7);
  DemandCurve b = DemandCurve::Daily(*p, 48, 7);
  DemandCurve c = DemandCurve::Daily(*p, 48, 8);
  int differ = 0;
  for (double t = 0; t < 7 * 86400; t += 300) {
    EXPECT_EQ(a.At(t), b.At(t));
    EXPECT_GE(a.At(t), 0);
    EXPECT_LE(a.At(t), 48);
    differ += a.At(t) != c.At(t);
  }
  EXPECT_GT(differ, 100);
}

TEST(DemandTest, ParseSpecForms) {
  // "daily:..." with defaults, "none", "constant:F", and bad keys and values.
  auto d = ParseDemand("daily", 10, 1);
  ASSERT_TRUE(d.ok()) << d.status();
  auto none = ParseDemand("none", 10, 1);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->At(5), 0);
  auto constant = ParseDemand("constant:0.5", 10, 1);
  ASSERT_TRUE(constant.ok());
  EXPECT_EQ(constant->At(5), 5);
  EXPECT_NE(ParseDemand("daily:colour=3", 10, 1).status().message().find("unknown key 'colour'"), std::string::npos);
  EXPECT_FALSE(ParseDemand("daily:peak=1.5", 10, 1).ok());
  EXPECT_FALSE(ParseDemand("daily:peak=0.2,trough=0.5", 10, 1).ok());
  EXPECT_FALSE(ParseDemand("daily:step=0", 10, 1).ok());
  EXPECT_TRUE(ParseDemand("/no/such/file.csv", 10, 1).status().IsNotFound());
}

}  // namespace
}  // namespace aryl::sim
