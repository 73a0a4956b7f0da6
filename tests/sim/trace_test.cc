#include "aryl/sim/trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace aryl::sim {
namespace {

constexpr char kItpHeader[] = "job_id,submission_time,duration,num_gpu\n";

TEST(TraceTest, ReadsItpRowsAndSortsBySubmission) {
  // Unsorted ITP rows come back ordered by submission time, with file:line sources.
  auto t = ParseTrace(std::string(kItpHeader) + "b,20,100,2\na,10,50,1\nc,15,5,8", "t.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->jobs.size(), 3u);
  EXPECT_EQ(t->jobs[0].name, "a");
  EXPECT_EQ(t->jobs[1].name, "c");
  EXPECT_EQ(t->jobs[2].name, "b");
  EXPECT_EQ(t->jobs[2].num_gpu, 2);
  EXPECT_DOUBLE_EQ(t->jobs[2].duration, 100);
  EXPECT_EQ(t->jobs[0].source, "t.csv:3");
  EXPECT_FALSE(t->jobs[0].elastic.has_value());
}

TEST(TraceTest, ReadsArylColumnsInAnyOrder) {
  // Aryl's optional columns, in a different order, with CRLF line ends.
  auto t = ParseTrace(
      "model,job_id,num_gpu,submission_time,duration,elastic,min_workers,max_workers,gpu_type\r\n"
      "bert,j1,4,0,60,yes,2,8,A100|T4\r\n"
      "gpt2,j2,2,1,60,0,,,\r\n",
      "aryl.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->jobs.size(), 2u);
  EXPECT_EQ(t->jobs[0].model, "bert");
  EXPECT_TRUE(*t->jobs[0].elastic);
  EXPECT_EQ(*t->jobs[0].min_workers, 2);
  EXPECT_EQ(*t->jobs[0].max_workers, 8);
  EXPECT_EQ(t->jobs[0].gpu_types, (std::vector<std::string>{"A100", "T4"}));
  EXPECT_FALSE(*t->jobs[1].elastic);
  EXPECT_TRUE(t->jobs[1].gpu_types.empty());
}

struct BadRowCase {
  const char* row;
  const char* reason;  // substring of the message
};

class BadRowTest : public ::testing::TestWithParam<BadRowCase> {};

TEST(TraceTest, RescaleColumnMarksRestartJobs) {
  // rescale=restart marks torchrun-style jobs; empty or inplace is the default;
  // anything else is a bad row naming the value.
  auto t = ParseTrace(std::string("job_id,submission_time,duration,num_gpu,elastic,rescale\n") +
                          "a,0,60,2,1,restart\nb,1,60,2,1,inplace\nc,2,60,2,1,\n",
                      "r.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->jobs.size(), 3u);
  EXPECT_TRUE(t->jobs[0].restart);
  EXPECT_FALSE(t->jobs[1].restart);
  EXPECT_FALSE(t->jobs[2].restart);
  auto bad = ParseTrace("job_id,submission_time,duration,num_gpu,rescale\na,0,60,2,torchrun\n", "r.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("r.csv:2: rescale: expected inplace or restart, got 'torchrun'"),
            std::string::npos)
      << bad.status();
}

TEST_P(BadRowTest, IsFatalWithFileLineAndReason) {
  // Each kind of bad row is an error naming file:line and why, by default.
  std::string text = std::string(kItpHeader) + "ok,1,10,1\n" + GetParam().row + "\n";
  auto t = ParseTrace(text, "x.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("x.csv:3"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find(GetParam().reason), std::string::npos) << t.status();
}

TEST_P(BadRowTest, IsSkippedAndCountedWithSkipBadRows) {
  // With skip_bad_rows the same row is dropped and recorded; good rows stay.
  std::string text = std::string(kItpHeader) + "ok,1,10,1\n" + GetParam().row + "\nok2,2,10,1\n";
  auto t = ParseTrace(text, "x.csv", {.skip_bad_rows = true});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->jobs.size(), 2u);
  ASSERT_EQ(t->skipped.size(), 1u);
  EXPECT_EQ(t->skipped[0].where, "x.csv:3");
  EXPECT_NE(t->skipped[0].reason.find(GetParam().reason), std::string::npos) << t->skipped[0].reason;
}

INSTANTIATE_TEST_SUITE_P(Rows, BadRowTest,
                         ::testing::Values(BadRowCase{"a,abc,10,1", "submission_time: not a number"},
                                           BadRowCase{"a,-5,10,1", "submission_time: negative"},
                                           BadRowCase{"a,5,10,0", "num_gpu: must be >= 1"},
                                           BadRowCase{"a,5,10,x", "num_gpu: not an integer"},
                                           BadRowCase{"a,5,0,1", "duration: must be > 0"},
                                           BadRowCase{"a,5,10", "expected 4 columns, got 3"},
                                           BadRowCase{"a,5,10,1,9", "expected 4 columns, got 5"},
                                           BadRowCase{"ok,5,10,1", "duplicate job_id 'ok'"}));

TEST(TraceTest, HeaderErrors) {
  // A missing required column or an unknown one is an error naming the header line.
  auto missing = ParseTrace("job_id,submission_time,duration\n", "h.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("h.csv:1: header: missing column 'num_gpu'"), std::string::npos);
  auto unknown = ParseTrace("job_id,submission_time,duration,num_gpu,colour\n", "h.csv");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown column 'colour'"), std::string::npos);
  EXPECT_FALSE(ParseTrace("", "e.csv").ok());
}

TEST(TraceTest, MinAboveMaxIsBad) {
  // min_workers > max_workers is a bad row.
  auto t = ParseTrace("job_id,submission_time,duration,num_gpu,min_workers,max_workers\na,0,1,4,8,2\n", "m.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("m.csv:2: min_workers 8 > max_workers 2"), std::string::npos) << t.status();
}

TEST(TraceTest, MergesFilesAndRejectsDuplicatesAcrossThem) {
  // Two files merge into one sorted stream; an id repeated in the second file is a bad row there.
  auto dir = std::filesystem::temp_directory_path() / ("aryl_trace_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string a = (dir / "a.csv").string();
  std::string b = (dir / "b.csv").string();
  std::ofstream(a) << kItpHeader << "x,30,1,1\ny,10,1,1\n";
  std::ofstream(b) << kItpHeader << "z,20,1,1\nx,40,1,1\n";
  auto fatal = ReadTraces({a, b});
  ASSERT_FALSE(fatal.ok());
  EXPECT_NE(fatal.status().message().find(b + ":3: duplicate job_id 'x'"), std::string::npos) << fatal.status();
  auto merged = ReadTraces({a, b}, {.skip_bad_rows = true});
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->jobs.size(), 3u);
  EXPECT_EQ(merged->jobs[0].name, "y");
  EXPECT_EQ(merged->jobs[1].name, "z");
  EXPECT_EQ(merged->jobs[2].name, "x");
  EXPECT_EQ(merged->skipped.size(), 1u);
  auto missing = ReadTraces({(dir / "nope.csv").string()});
  EXPECT_TRUE(missing.status().IsNotFound());
  std::filesystem::remove_all(dir);
}

TEST(TraceTest, WindowAndLoad) {
  // --window keeps [start, end); --load 2 halves inter-arrival gaps from the first job.
  auto t = ParseTrace(std::string(kItpHeader) + "a,0,1,1\nb,100,1,1\nc,200,1,1\nd,300,1,1\n", "w.csv");
  ASSERT_TRUE(t.ok());
  auto w = ParseWindow("100:300");
  ASSERT_TRUE(w.ok());
  ApplyWindow(*t, w->first, w->second);
  ASSERT_EQ(t->jobs.size(), 2u);
  ASSERT_TRUE(ApplyLoad(*t, 2.0).ok());
  EXPECT_DOUBLE_EQ(t->jobs[0].submit_time, 100);
  EXPECT_DOUBLE_EQ(t->jobs[1].submit_time, 150);
  EXPECT_FALSE(ApplyLoad(*t, 0).ok());
  EXPECT_FALSE(ParseWindow("5").ok());
  EXPECT_FALSE(ParseWindow("9:3").ok());
  auto open = ParseWindow(":50");
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->first, 0);
}

TEST(TraceTest, ReadsTheShippedItpTraces) {
  // The shipped cluster traces parse without a bad row (they lack a final newline).
  auto t = ReadTraces({std::string(ARYL_SOURCE_DIR) + "/data/traces/itp/cluster10.csv"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->jobs.size(), 260u);
  EXPECT_TRUE(t->skipped.empty());
}

}  // namespace
}  // namespace aryl::sim
