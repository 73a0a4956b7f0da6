// examples/elastic_mlp with dropout (aryl::SampleDropout after each hidden
// layer), real worker processes resized by the LocalCoordinator: the final
// parameters match a fixed-size run within the tolerance of the runs without
// dropout (job_run.h's ExpectSameParams), because each sample's masks come
// from its random key, not from the rank's generator.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "job_run.h"

namespace aryl {
namespace {

using namespace aryl::testing;

constexpr int64_t kExampleSteps = 300;

JobRun MakeExampleRun(const std::string& name, int sleep_ms) {
  JobRun run;
  run.dir = (fs::temp_directory_path() / ("aryl_rt_dropout_" + name + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(run.dir);
  fs::create_directories(run.dir + "/logs");
  CoordinatorOptions opt;
  opt.job_id = "dropout_" + name;
  opt.worker_argv = {ARYL_ELASTIC_MLP, "--steps", std::to_string(kExampleSteps), "--dataset", "200",
                     "--global-batch", "24", "--features", "16", "--hidden", "32", "--layers", "2",
                     "--classes", "4", "--lr", "0.01", "--dropout", "0.3", "--log-every", "1000",
                     "--sleep-ms", std::to_string(sleep_ms), "--out", run.dir + "/final.pt"};
  opt.log_dir = run.dir + "/logs";
  opt.timeout = milliseconds(30000);
  opt.env = {{"ARYL_FAULT_SETTLE_MS", "1000"}, {"ARYL_COLLECTIVE_TIMEOUT_MS", "30000"},
             {"ARYL_RENDEZVOUS_TIMEOUT_MS", "20000"}};
  auto c = LocalCoordinator::Start(opt);
  EXPECT_TRUE(c.ok()) << c.status();
  if (c.ok()) run.coord = std::move(*c);
  return run;
}

// Fixed at 2 workers vs resized 2 -> 4 -> 3 -> 1 -> 2 while training.
TEST(ExampleDropout, Resize2To4To3To1To2MatchesFixedRun) {
  JobRun fixed = MakeExampleRun("fixed", 0);
  ASSERT_TRUE(fixed.coord);
  ASSERT_TRUE(fixed.coord->Launch(2).ok());
  ASSERT_TRUE(fixed.coord->WaitAll(milliseconds(120000)).ok()) << Logs(fixed);
  for (auto& [id, code] : fixed.coord->exit_codes()) ASSERT_EQ(code, 0) << id << "\n" << Logs(fixed);

  JobRun run = MakeExampleRun("resized", 25);
  ASSERT_TRUE(run.coord);
  ASSERT_TRUE(run.coord->Launch(2).ok());
  ASSERT_NO_FATAL_FAILURE(ResizeThrough(run, {4, 3, 1, 2}, 10, milliseconds(60000)));
  ASSERT_LT(run.coord->Progress(), kExampleSteps) << "training finished before the last resize";
  ASSERT_TRUE(run.coord->WaitAll(milliseconds(120000)).ok()) << Logs(run);
  for (auto& [id, code] : run.coord->exit_codes()) EXPECT_EQ(code, 0) << id << "\n" << Logs(run);
  EXPECT_EQ(run.coord->exit_codes().size(), 5u);  // w0, w1 + joiners w2, w3 + w4
  bool bitwise = false;
  ExpectSameParams(LoadParams(fixed), LoadParams(run), &bitwise);
  std::printf("dropout resize run: parameters %s the fixed-size run\n",
              bitwise ? "bitwise equal to" : "within 1e-4 of");
  fs::remove_all(fixed.dir);
  fs::remove_all(run.dir);
}

}  // namespace
}  // namespace aryl
