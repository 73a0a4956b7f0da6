// The progress line the agent reads from rank 0's stdout (stdout_progress.h).
#include "stdout_progress.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace aryl::agent {
namespace {

TEST(StdoutProgress, ParsesTheDocumentedLine) {
  auto p = ParseProgressLine("step=120 loss=0.41230 world=4 gen=3 rate=1843.2 step_s=0.0125 t=12.345");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 120);
  EXPECT_DOUBLE_EQ(p->loss, 0.4123);
  EXPECT_DOUBLE_EQ(p->step_s, 0.0125);
  EXPECT_DOUBLE_EQ(p->rate, 80) << "step_s wins over rate (which may count samples)";
  p = ParseProgressLine("epoch 2 step: 7 steps/s 3.5");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 7);
  EXPECT_TRUE(std::isnan(p->loss));
  EXPECT_DOUBLE_EQ(p->rate, 3.5);
  EXPECT_LT(p->step_s, 0) << "no step time: the job's speed stays unknown";
  EXPECT_FALSE(ParseProgressLine("loss=0.5"));
  EXPECT_FALSE(ParseProgressLine("substep=4 step_s=0.1")) << "a field name is a whole word";
  EXPECT_FALSE(ParseProgressLine("step=99999999999999999999999")) << "out of range";
  p = ParseProgressLine("step=3 step_s=-1 rate=9");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->rate, 0);
  EXPECT_LT(p->step_s, 0);
}

// Lines appended between reads; a partial line waits; the step times become a
// summary at the worker's generation and world size once past the warm-up.
TEST(StdoutProgress, ReadsNewLinesAndSummarisesStepTimes) {
  namespace fs = std::filesystem;
  fs::path path = fs::temp_directory_path() / ("aryl_stdout_progress_" + std::to_string(::getpid()));
  std::ofstream out(path);
  StdoutProgress progress;
  EXPECT_FALSE(progress.Read(path.string(), 2, 4)) << "nothing written yet";
  out << "starting\nstep=1 loss=2 step_s=0.9\nstep=2 loss=1.5 step_s=0.5\nstep=3 lo" << std::flush;
  auto p = progress.Read(path.string(), 2, 4);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 2) << "the partial line is not read yet";
  out << "ss=1.2 step_s=0.25\n" << std::flush;
  p = progress.Read(path.string(), 2, 4);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 3);
  EXPECT_DOUBLE_EQ(p->loss, 1.2);
  EXPECT_FALSE(progress.TakeSummary()) << "two warm-up steps and one counted";
  for (int i = 4; i <= 10; ++i) out << "step=" << i << " step_s=" << (i == 7 ? 1.0 : 0.25) << "\n";
  out << std::flush;
  ASSERT_TRUE(progress.Read(path.string(), 2, 4));
  auto s = progress.TakeSummary();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->generation, 2);
  EXPECT_EQ(s->workers, 4);
  EXPECT_EQ(s->count, 8);
  EXPECT_DOUBLE_EQ(s->median_s, 0.25);
  EXPECT_FALSE(progress.TakeSummary()) << "each step in one summary";
  fs::remove(path);
}

}  // namespace
}  // namespace aryl::agent
