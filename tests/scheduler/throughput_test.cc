#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "aryl/sched/throughput.h"
#include "test_util.h"

namespace aryl::sched {
namespace {

TEST(ThroughputTest, MeasuredSizesAreExact) {
  // A measured size returns the measured value.
  auto c = testing::Catalog();
  EXPECT_DOUBLE_EQ(c->Throughput("sublinear", "A100", 8), 5.6);
  EXPECT_DOUBLE_EQ(c->Throughput("sublinear", "A100", 1), 1.0);
}

TEST(ThroughputTest, InterpolatesLinearlyBetweenMeasuredSizes) {
  // 6 workers lie halfway between 4 (3.2) and 8 (5.6).
  auto c = testing::Catalog();
  EXPECT_DOUBLE_EQ(c->Throughput("sublinear", "A100", 6), 4.4);
  EXPECT_DOUBLE_EQ(c->Throughput("linear", "A100", 3), 3.0);
}

TEST(ThroughputTest, SizesNextToADisallowedCellAreNotAllowed) {
  // 16 is a 0 cell, so 9..31 (between 8 and 32 via 16) are not allowed; 32 is.
  auto c = testing::Catalog();
  EXPECT_EQ(c->Throughput("holes", "A100", 16), 0);
  EXPECT_EQ(c->Throughput("holes", "A100", 12), 0);
  EXPECT_EQ(c->Throughput("holes", "A100", 20), 0);
  EXPECT_DOUBLE_EQ(c->Throughput("holes", "A100", 32), 30);
}

TEST(ThroughputTest, FlatAboveTheLargestMeasuredSize) {
  // Beyond 64 workers the job does not speed up.
  auto c = testing::Catalog();
  EXPECT_DOUBLE_EQ(c->Throughput("sublinear", "A100", 128), 20);
  EXPECT_EQ(c->Throughput("sublinear", "A100", 0), 0);
}

TEST(ThroughputTest, RelativeSpeedForATypeWithoutATable) {
  // T4 has no table; it runs at half the A100 speed; V100 has neither.
  auto c = testing::Catalog();
  EXPECT_DOUBLE_EQ(c->Throughput("sublinear", "T4", 8), 2.8);
  EXPECT_EQ(c->Throughput("sublinear", "V100", 8), 0);
  EXPECT_EQ(c->Throughput("unknown-model", "A100", 8), 0);
}

TEST(ThroughputTest, ParsesCsvAndPicksARow) {
  // The first row by default; a chosen global batch size otherwise; nan/empty/0 = not allowed.
  const std::string csv =
      "global_batch_size,1,2,4,8\n"
      "64,1.0,2.0,,nan\n"
      "128,0.5,0.9,1.6,0\n";
  auto first = ThroughputCatalog::ParseCsv(csv, "A100/m.csv");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->sizes, (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(first->values, (std::vector<double>{1.0, 2.0, 0, 0}));
  auto second = ThroughputCatalog::ParseCsv(csv, "A100/m.csv", {128});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_DOUBLE_EQ(second->values[2], 1.6);
  auto missing = ThroughputCatalog::ParseCsv(csv, "A100/m.csv", {512});
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("512"), std::string::npos);
}

TEST(ThroughputTest, LargestBatchRowWhateverTheRowOrder) {
  // kLargestBatch keeps the row of the largest global batch and says which.
  const std::string csv =
      "global_batch_size,1,2,4\n"
      "128,0.5,0.9,1.6\n"
      "256,0.25,0.5,0.95\n"
      "64,1.0,1.5,1.8\n";
  auto largest = ThroughputCatalog::ParseCsv(csv, "A100/m.csv", {ThroughputCsvOptions::kLargestBatch});
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_DOUBLE_EQ(largest->batch, 256);
  EXPECT_EQ(largest->values, (std::vector<double>{0.25, 0.5, 0.95}));
  auto first = ThroughputCatalog::ParseCsv(csv, "A100/m.csv");
  ASSERT_TRUE(first.ok());
  EXPECT_DOUBLE_EQ(first->batch, 128);
}

TEST(ThroughputTest, LargestBatchRowsScaleFurtherOnTheShippedTables) {
  // resnet50's smallest-batch row (64) does not scale from 8 to 64 workers
  // (0.99x); its largest-batch row (256) gains 1.82x.
  const std::string dir = std::string(ARYL_SOURCE_DIR) + "/data/throughput";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " not present";
  auto small = ThroughputCatalog::LoadCsvDir(dir);
  auto large = ThroughputCatalog::LoadCsvDir(dir, {ThroughputCsvOptions::kLargestBatch});
  ASSERT_TRUE(small.ok() && large.ok());
  const double s = small->Throughput("resnet50", "A100", 64) / small->Throughput("resnet50", "A100", 8);
  const double l = large->Throughput("resnet50", "A100", 64) / large->Throughput("resnet50", "A100", 8);
  EXPECT_NEAR(s, 20.969147690424624 / 21.265357623184627, 1e-9);
  EXPECT_NEAR(l, 18.845304488737906 / 10.378702644353233, 1e-9);
  EXPECT_GT(l, 1.5 * s);
}

TEST(ThroughputTest, LoadsTheShippedTablesWhenPresent) {
  // The measured tables shipped in data/throughput load without error.
  const std::string dir = std::string(ARYL_SOURCE_DIR) + "/data/throughput";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " not present";
  auto c = ThroughputCatalog::LoadCsvDir(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->HasModel("resnet50"));
  EXPECT_GT(c->Throughput("resnet50", "A100", 8), 0);
  // resnet50_cifar10 has 0 cells from 16 workers on.
  EXPECT_EQ(c->Throughput("resnet50_cifar10", "A100", 16), 0);
}

}  // namespace
}  // namespace aryl::sched
