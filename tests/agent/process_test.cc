// Process launcher: real /bin/sh children, real signals.
#include "aryl/agent/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "aryl/agent/gpu.h"

namespace aryl::agent {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls until every child has ended or `timeout_s` passes.
std::vector<ExitInfo> WaitAll(ProcessLauncher& l, double timeout_s = 10) {
  std::vector<ExitInfo> out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (l.size() > 0 && std::chrono::steady_clock::now() < deadline) {
    auto d = l.Poll();
    out.insert(out.end(), d.begin(), d.end());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return out;
}

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("aryl-proc-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// The child sees its environment, its working directory and writes to its own logs.
TEST_F(ProcessTest, EnvironmentCwdAndLogs) {
  ProcessLauncher l;
  LaunchSpec spec;
  spec.argv = {"sh", "-c", "echo rank=$ARYL_RANK gpus=$CUDA_VISIBLE_DEVICES; pwd; echo oops >&2; exit 3"};
  spec.env = {{"ARYL_RANK", "2"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
  spec.cwd = dir_.string();
  spec.stdout_path = (dir_ / "rank2.out").string();
  spec.stderr_path = (dir_ / "rank2.err").string();
  auto pid = l.Launch(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  auto done = WaitAll(l);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].pid, *pid);
  EXPECT_EQ(done[0].exit_code, 3);
  EXPECT_EQ(done[0].signal, 0);
  EXPECT_EQ(ReadFile(dir_ / "rank2.out"), "rank=2 gpus=0,1\n" + fs::canonical(dir_).string() + "\n");
  EXPECT_EQ(ReadFile(dir_ / "rank2.err"), "oops\n");
}

// Each worker leads its own process group.
TEST_F(ProcessTest, OwnProcessGroup) {
  ProcessLauncher l;
  LaunchSpec spec;
  spec.argv = {"sh", "-c", "cut -d' ' -f5 /proc/$$/stat; echo $$"};
  spec.stdout_path = (dir_ / "out").string();
  ASSERT_TRUE(l.Launch(spec).ok());
  WaitAll(l);
  std::istringstream is(ReadFile(dir_ / "out"));
  std::string pgid, pid;
  is >> pgid >> pid;
  EXPECT_EQ(pgid, pid);
  EXPECT_NE(pgid, std::to_string(::getpgrp()));
}

// A missing binary is an error from Launch, not an exit code.
TEST_F(ProcessTest, MissingExecutableIsAnError) {
  ProcessLauncher l;
  LaunchSpec spec;
  spec.argv = {"/nonexistent/train"};
  auto r = l.Launch(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/train"), std::string::npos);
  spec.argv = {"no-such-command-aryl"};
  r = l.Launch(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not found in PATH"), std::string::npos);
  EXPECT_EQ(l.size(), 0u);
}

// A bad working directory is reported with the exec failure.
TEST_F(ProcessTest, BadCwdIsAnError) {
  ProcessLauncher l;
  LaunchSpec spec;
  spec.argv = {"true"};
  spec.cwd = "/nonexistent-dir";
  auto r = l.Launch(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("chdir"), std::string::npos) << r.status();
}

// A worker that handles SIGTERM exits gracefully within the grace period.
TEST_F(ProcessTest, SigtermIsGraceful) {
  ProcessLauncher l;
  LaunchSpec spec;
  spec.argv = {"sh", "-c", "trap 'echo bye; exit 0' TERM; echo up; while true; do sleep 0.05; done"};
  spec.stdout_path = (dir_ / "out").string();
  auto pid = l.Launch(spec);
  ASSERT_TRUE(pid.ok());
  // Wait until the trap is installed.
  for (int i = 0; i < 200 && ReadFile(dir_ / "out").empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  l.RequestStop(*pid, 5.0);
  auto done = WaitAll(l, 10);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].exit_code, 0) << done[0].Describe();
  EXPECT_FALSE(done[0].killed_by_us);
  EXPECT_NE(ReadFile(dir_ / "out").find("bye"), std::string::npos);
}

// A worker that ignores SIGTERM is SIGKILLed after the grace period, children included.
TEST_F(ProcessTest, SigkillAfterGrace) {
  ProcessLauncher l;
  LaunchSpec spec;
  spec.argv = {"sh", "-c", "trap '' TERM; (trap '' TERM; sleep 30) & echo $! > child.pid; wait"};
  spec.cwd = dir_.string();
  auto pid = l.Launch(spec);
  ASSERT_TRUE(pid.ok());
  for (int i = 0; i < 200 && ReadFile(dir_ / "child.pid").empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  pid_t grandchild = std::atoi(ReadFile(dir_ / "child.pid").c_str());
  ASSERT_GT(grandchild, 0);
  auto t0 = std::chrono::steady_clock::now();
  l.RequestStop(*pid, 0.3);
  auto done = WaitAll(l, 10);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].signal, SIGKILL);
  EXPECT_TRUE(done[0].killed_by_us);
  EXPECT_GE(took, 0.25);
  EXPECT_LT(took, 5.0);
  // The grandchild in the same group is gone too (allow the kernel a moment).
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    // Dead means no such process, or a zombie waiting for init to reap it.
    std::string stat = ReadFile("/proc/" + std::to_string(grandchild) + "/stat");
    auto paren = stat.rfind(')');
    gone = stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z");
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
}

// A second stop with a shorter grace (the agent's lease ran out while a job's
// long stop grace ran) brings the SIGKILL forward: the first grace does not
// hold it back.
TEST_F(ProcessTest, AShorterSecondStopBringsTheKillForward) {
  ProcessLauncher l;
  LaunchSpec spec;
  spec.argv = {"sh", "-c", "trap '' TERM; echo up; while true; do sleep 0.05; done"};
  spec.stdout_path = (dir_ / "out").string();
  auto pid = l.Launch(spec);
  ASSERT_TRUE(pid.ok());
  for (int i = 0; i < 200 && ReadFile(dir_ / "out").empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto t0 = std::chrono::steady_clock::now();
  l.RequestStop(*pid, 600);
  l.RequestStop(*pid, 0.3);
  l.RequestStop(*pid, 600);  // a later, longer one does not push it back
  auto done = WaitAll(l, 10);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(done.size(), 1u) << "still running after 10 s: the 600 s grace held the kill back";
  EXPECT_EQ(done[0].signal, SIGKILL);
  EXPECT_TRUE(done[0].killed_by_us);
  EXPECT_LT(took, 5.0);
}

// An external SIGKILL is reported as such, not as "killed by us".
TEST_F(ProcessTest, ExternalKillReported) {
  ProcessLauncher l;
  LaunchSpec spec;
  spec.argv = {"sleep", "30"};
  auto pid = l.Launch(spec);
  ASSERT_TRUE(pid.ok());
  ::kill(*pid, SIGKILL);
  auto done = WaitAll(l);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].signal, SIGKILL);
  EXPECT_EQ(done[0].exit_code, 128 + SIGKILL);
  EXPECT_FALSE(done[0].killed_by_us);
}

// StopAll is bounded and leaves nothing behind.
TEST_F(ProcessTest, StopAllManyChildren) {
  ProcessLauncher l;
  for (int i = 0; i < 8; ++i) {
    LaunchSpec spec;
    spec.argv = {"sleep", "30"};
    ASSERT_TRUE(l.Launch(spec).ok());
  }
  auto t0 = std::chrono::steady_clock::now();
  auto done = l.StopAll(1.0);
  EXPECT_EQ(done.size(), 8u);
  EXPECT_EQ(l.size(), 0u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
}

// Bad environment names are refused before anything runs.
TEST_F(ProcessTest, BadEnvName) {
  ProcessLauncher l;
  LaunchSpec spec;
  spec.argv = {"true"};
  spec.env = {{"A=B", "x"}};
  EXPECT_TRUE(l.Launch(spec).status().IsInvalidArgument());
}

// GPU names shorten to the type the scheduler matches on.
TEST(GpuTest, ShortNames) {
  EXPECT_EQ(ShortGpuType("NVIDIA H200"), "H200");
  EXPECT_EQ(ShortGpuType("Tesla T4"), "T4");
  EXPECT_EQ(ShortGpuType("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(ShortGpuType(""), "unknown");
  // Discovery never crashes; on a machine without GPUs it says how to declare slots.
  auto inv = DiscoverGpus();
  if (!inv.ok()) {
    EXPECT_NE(inv.status().message().find("--slots"), std::string::npos);
  }
}

}  // namespace
}  // namespace aryl::agent
