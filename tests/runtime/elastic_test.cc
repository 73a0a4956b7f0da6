// Multi-process tests on loopback: real worker processes (rt_test_worker)
// launched and resized by the LocalCoordinator, which plays the agent's part.
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "aryl/checkpoint.h"
#include "job_run.h"

namespace aryl {
namespace {

using namespace aryl::testing;

// Planned resizes 2 -> 4 -> 3 -> 1 -> 2 while training: every worker that
// stays keeps going, the final parameters equal the fixed-size run, and every
// sample of every epoch is used exactly once.
TEST(ElasticRuntime, Resize2To4To3To1To2MatchesFixedRun) {
  const auto& reference = Reference();
  // 40 ms steps: each grow starts a worker process (1-3 s on a busy machine),
  // and the last one (1 -> 2) must land before the 200 steps are done.
  JobRun run = MakeRun("resize", kSteps, 40);
  ASSERT_TRUE(run.coord->Launch(2).ok());
  ASSERT_NO_FATAL_FAILURE(ResizeThrough(run, {4, 3, 1, 2}, 10, milliseconds(30000)));
  ASSERT_LT(run.coord->Progress(), kSteps) << "training finished before the last resize";
  ASSERT_TRUE(run.coord->WaitAll(milliseconds(60000)).ok()) << Logs(run);
  for (auto& [id, code] : run.coord->exit_codes()) EXPECT_EQ(code, 0) << id << "\n" << Logs(run);
  EXPECT_EQ(run.coord->exit_codes().size(), 5u);  // w0, w1 + joiners w2, w3 + w4
  bool bitwise = false;
  ExpectSameParams(reference, LoadParams(run), &bitwise);
  std::printf("resize run: parameters %s the fixed-size run\n", bitwise ? "bitwise equal to" : "within 1e-4 of");
  ExpectExactlyOnce(run);
  std::string logs = Logs(run);
  EXPECT_NE(logs.find("planned=1"), std::string::npos);
}

// SIGKILL one of three workers mid-training: the other two form a new
// generation, replay the abandoned step and finish; no completed step is lost.
TEST(ElasticRuntime, SigkillOneOfThreeContinuesWithTwo) {
  const auto& reference = Reference();
  JobRun run = MakeRun("sigkill", kSteps, 15);
  ASSERT_TRUE(run.coord->Launch(3).ok());
  ASSERT_TRUE(run.coord->WaitProgress(40, milliseconds(30000)).ok()) << Logs(run);
  ASSERT_TRUE(run.coord->Kill("w2", SIGKILL).ok());
  ASSERT_TRUE(run.coord->WaitAll(milliseconds(60000)).ok()) << Logs(run);
  auto codes = run.coord->exit_codes();
  EXPECT_EQ(codes["w0"], 0) << Logs(run);
  EXPECT_EQ(codes["w1"], 0) << Logs(run);
  EXPECT_EQ(codes["w2"], 128 + SIGKILL);
  bool bitwise = false;
  ExpectSameParams(reference, LoadParams(run), &bitwise);
  std::string logs = Logs(run);
  EXPECT_NE(logs.find("planned=0"), std::string::npos) << logs;
  EXPECT_NE(logs.find("done step=200 world=2"), std::string::npos) << logs;
}

// Checkpoint every 10 steps and stop at 30 with 2 workers; corrupt the newest
// checkpoint; resume with 3 workers: step 20 is restored, the corruption is
// reported, and training ends where the fixed-size run does.
TEST(ElasticRuntime, CheckpointResumeAtAnotherWorldSkipsCorruptNewest) {
  const auto& reference = Reference();
  std::map<std::string, std::string> env{{"ARYL_CHECKPOINT_EVERY", "10"}};
  {
    JobRun first = MakeRun("ckpt", 30, 0, env, true);
    fs::remove_all(first.dir + "/ckpt");
    ASSERT_TRUE(first.coord->Launch(2).ok());
    ASSERT_TRUE(first.coord->WaitAll(milliseconds(60000)).ok()) << Logs(first);
    for (auto& [id, code] : first.coord->exit_codes()) ASSERT_EQ(code, 0) << Logs(first);
    ASSERT_TRUE(fs::exists(first.dir + "/ckpt/ckpt-000000000030.aryl")) << Logs(first);
    fs::resize_file(first.dir + "/ckpt/ckpt-000000000030.aryl", 1000);
    fs::remove_all(first.dir + "/logs");
  }
  JobRun second = MakeRun("ckpt", kSteps, 0, env, true);
  ASSERT_TRUE(second.coord->Launch(3).ok());
  ASSERT_TRUE(second.coord->WaitAll(milliseconds(60000)).ok()) << Logs(second);
  for (auto& [id, code] : second.coord->exit_codes()) EXPECT_EQ(code, 0) << Logs(second);
  std::string logs = Logs(second);
  EXPECT_NE(logs.find("checkpoint skipped: Corruption"), std::string::npos) << logs;
  EXPECT_NE(logs.find("restored checkpoint step=20 saved_world=2 world=3 skipped=1"), std::string::npos) << logs;
  bool bitwise = false;
  ExpectSameParams(reference, LoadParams(second), &bitwise);
}

// With min workers 2, losing one of 2 leaves the survivor below the minimum:
// it checkpoints and waits; when a replacement is announced it moves into the
// larger generation, hands the state over, and the job finishes like the
// fixed-size run.
TEST(ElasticRuntime, BelowMinWorkersCheckpointsAndWaits) {
  const auto& reference = Reference();
  JobRun run = MakeRun("belowmin", kSteps, 15, {{"ARYL_MIN_WORKERS", "2"}}, /*checkpoints=*/true);
  fs::remove_all(run.dir + "/ckpt");
  ASSERT_TRUE(run.coord->Launch(2).ok());
  ASSERT_TRUE(run.coord->WaitProgress(30, milliseconds(30000)).ok()) << Logs(run);
  ASSERT_TRUE(run.coord->Kill("w1", SIGKILL).ok());
  // The survivor forms a generation of one (a fault recovery: collective
  // timeout at most, then the settle time). It must stay alive meanwhile: a
  // survivor that died (say of SIGPIPE from a write to its peer's reset
  // socket) is reported as such, not as a slow recovery.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while (true) {
    auto members = run.coord->Members();
    ASSERT_TRUE(members.ok());
    if (members->size() == 1) break;
    run.coord->Reap();
    ASSERT_EQ(run.coord->exit_codes().count("w0"), 0u)
        << "the survivor w0 exited with " << run.coord->exit_codes().at("w0") << " before regrouping\n"
        << Logs(run);
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "survivor w0 alive but no generation of one\n"
                                                          << Logs(run);
    std::this_thread::sleep_for(milliseconds(10));
  }
  int64_t stalled_at = run.coord->Progress();
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(run.coord->Progress(), stalled_at) << "trained below min workers";
  auto g = run.coord->Resize(2);
  ASSERT_TRUE(g.ok()) << g.status() << "\n" << Logs(run);
  ASSERT_TRUE(run.coord->WaitAll(milliseconds(60000)).ok()) << Logs(run);
  auto codes = run.coord->exit_codes();
  EXPECT_EQ(codes["w0"], 0) << Logs(run);
  EXPECT_EQ(codes["w2"], 0) << Logs(run);
  CheckpointManager ckpt(run.dir + "/ckpt");
  auto latest = ckpt.LoadLatest();
  ASSERT_TRUE(latest.ok()) << "no checkpoint written below min workers\n" << Logs(run);
  EXPECT_EQ(latest->info.world_size, 1);
  bool bitwise = false;
  ExpectSameParams(reference, LoadParams(run), &bitwise);
}

// A preemption notice (SIGTERM) to one worker stops the whole job at the same
// step boundary: the flag rides in the step's all-reduce, rank 0 writes a
// checkpoint, every worker exits 0.
TEST(ElasticRuntime, SigtermStopsAllWithCheckpoint) {
  JobRun run = MakeRun("sigterm", kSteps, 20, {}, /*checkpoints=*/true);
  fs::remove_all(run.dir + "/ckpt");
  ASSERT_TRUE(run.coord->Launch(2).ok());
  ASSERT_TRUE(run.coord->WaitProgress(15, milliseconds(30000)).ok()) << Logs(run);
  ASSERT_TRUE(run.coord->Kill("w1", SIGTERM).ok());
  ASSERT_TRUE(run.coord->WaitAll(milliseconds(30000)).ok()) << Logs(run);
  for (auto& [id, code] : run.coord->exit_codes()) EXPECT_EQ(code, 0) << id << "\n" << Logs(run);
  CheckpointManager ckpt(run.dir + "/ckpt");
  auto latest = ckpt.LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status() << "\n" << Logs(run);
  EXPECT_GE(latest->info.step, 15);
  EXPECT_LT(latest->info.step, kSteps);
  EXPECT_EQ(latest->info.world_size, 2);
}

// The same planned changes driven through the worker <-> agent messages
// (WorkerHello, pushed GenerationAnnounce, WorkerResizeReport, WorkerProgress,
// WorkerLeave over ipc://) instead of store keys: 2 -> 4 -> 3.
TEST(ElasticRuntime, ResizeThroughAgentMessages) {
  const auto& reference = Reference();
  JobRun run = MakeRun("agent", kSteps, 20, {}, false, /*agent=*/true);
  ASSERT_TRUE(run.coord->Launch(2).ok());
  ASSERT_NO_FATAL_FAILURE(ResizeThrough(run, {4, 3}, 10, milliseconds(30000)));
  ASSERT_TRUE(run.coord->WaitAll(milliseconds(60000)).ok()) << Logs(run);
  for (auto& [id, code] : run.coord->exit_codes()) EXPECT_EQ(code, 0) << id << "\n" << Logs(run);
  auto counts = run.coord->agent_counts();
  EXPECT_EQ(counts.hellos, 4);
  EXPECT_GE(counts.resize_reports, 2);
  EXPECT_GT(counts.progress, 0);
  EXPECT_EQ(counts.leaves, 1);
  bool bitwise = false;
  ExpectSameParams(reference, LoadParams(run), &bitwise);
  ExpectExactlyOnce(run);
}

}  // namespace
}  // namespace aryl
