// Fault tests of the runtime with real processes and real signals on loopback:
// rt_test_worker processes driven by the LocalCoordinator, which plays the
// scheduler's and the agent's parts (it plans the replacement of a lost
// worker as the scheduler does). Each test is bounded by its waits.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "aryl/protocol/generation.h"
#include "job_run.h"

namespace aryl {
namespace {

using namespace aryl::testing;

// Committed steps in `worker`'s samples file (one line per committed step).
int64_t CommittedSteps(const JobRun& run, const std::string& worker) {
  std::ifstream in(run.dir + "/samples/" + worker + ".txt");
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}

// A worker is SIGKILLed and, at once, the planner replaces it (a planned
// generation of the others plus a joiner) while the survivors' own fault
// recovery regroups them: both must number their generations so that the
// plan comes after the fault generation, whichever is published first. The
// survivors regroup, then take the joiner in; nothing is lost and the job
// ends like the fixed-size run. Victim w0 holds rank 0: rank 0 moves to w1.
class ReplaceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ReplaceTest, SigkillAndReplacementRaceFaultRecovery) {
  const std::string victim = GetParam();
  const auto& reference = Reference();
  // 50 ms a step: the joiner (a new process loading libtorch on a busy
  // machine) must be up before the other two finish the remaining 170 steps.
  JobRun run = MakeRun("replace_" + victim, kSteps, 50);
  ASSERT_TRUE(run.coord->Launch(3).ok());
  ASSERT_TRUE(run.coord->WaitProgress(30, milliseconds(30000)).ok()) << Logs(run);
  ASSERT_TRUE(run.coord->Kill(victim, SIGKILL).ok());
  auto g = run.coord->Replace(victim);
  ASSERT_TRUE(g.ok()) << g.status() << "\n" << Logs(run);
  EXPECT_EQ(*g, protocol::PlanGeneration(2));
  auto members = run.coord->Members();
  ASSERT_TRUE(members.ok());
  EXPECT_EQ(members->size(), 3u);
  EXPECT_EQ(std::count(members->begin(), members->end(), victim), 0);
  ASSERT_TRUE(run.coord->WaitAll(milliseconds(60000)).ok()) << Logs(run);
  auto codes = run.coord->exit_codes();
  EXPECT_EQ(codes.size(), 4u);
  for (auto& [id, code] : codes) EXPECT_EQ(code, id == victim ? 128 + SIGKILL : 0) << id << "\n" << Logs(run);
  bool bitwise = false;
  ExpectSameParams(reference, LoadParams(run), &bitwise);
  ExpectExactlyOnce(run, /*fault=*/true);
  std::string logs = Logs(run);
  EXPECT_NE(logs.find("planned=0"), std::string::npos) << logs;
  EXPECT_NE(logs.find("done step=200 world=3"), std::string::npos) << logs;
  // Rank 0 (which writes the final parameters and the done line) is a survivor.
  EXPECT_EQ(ReadAll(run.coord->LogPath(victim)).find("done step="), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Victims, ReplaceTest, ::testing::Values("w0", "w1"));

// SIGKILL of the worker holding rank 0, no replacement: the other two regroup
// with a new rank 0 (which reports progress, writes the final parameters).
TEST(FaultRuntime, SigkillRankZeroContinuesWithTwo) {
  const auto& reference = Reference();
  JobRun run = MakeRun("rank0", kSteps, 15);
  ASSERT_TRUE(run.coord->Launch(3).ok());
  ASSERT_TRUE(run.coord->WaitProgress(40, milliseconds(30000)).ok()) << Logs(run);
  int64_t at_kill = run.coord->Progress();
  ASSERT_TRUE(run.coord->Kill("w0", SIGKILL).ok());
  // Progress (stored by rank 0 only) moves on: a new rank 0 exists.
  ASSERT_TRUE(run.coord->WaitProgress(at_kill + 20, milliseconds(40000)).ok()) << Logs(run);
  ASSERT_TRUE(run.coord->WaitAll(milliseconds(60000)).ok()) << Logs(run);
  auto codes = run.coord->exit_codes();
  EXPECT_EQ(codes["w0"], 128 + SIGKILL);
  EXPECT_EQ(codes["w1"], 0) << Logs(run);
  EXPECT_EQ(codes["w2"], 0) << Logs(run);
  bool bitwise = false;
  ExpectSameParams(reference, LoadParams(run), &bitwise);
  EXPECT_NE(ReadAll(run.coord->LogPath("w1")).find("done step=200 world=2"), std::string::npos) << Logs(run);
}

// Gloo writes to peers with writev(): after a peer dies, a write to its
// reset socket raises SIGPIPE, which by default kills the survivor without a
// word. A running worker must ignore it (checked in /proc), and survivors of
// a SIGKILL in the middle of large all-reduces (16 MB a step, no compute to
// speak of, so the kill lands in a transfer) must live, regroup and finish.
bool IgnoresSigpipe(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigIgn:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (SIGPIPE - 1)) & 1;
  }
  return false;
}

TEST(FaultRuntime, SurvivorOfSigkillDuringLargeTransfersLives) {
  for (int round = 0; round < 3; ++round) {
    JobRun run = MakeRun("sigpipe" + std::to_string(round), 30, 0, {}, false, false, "", {"--ballast-mb", "16"});
    ASSERT_TRUE(run.coord->Launch(2).ok());
    ASSERT_TRUE(run.coord->WaitProgress(2 + round, milliseconds(60000)).ok()) << Logs(run);
    auto pid = run.coord->Pid("w0");
    ASSERT_TRUE(pid.ok());
    EXPECT_TRUE(IgnoresSigpipe(*pid)) << "worker w0 does not ignore SIGPIPE";
    ASSERT_TRUE(run.coord->Kill("w1", SIGKILL).ok());
    ASSERT_TRUE(run.coord->WaitAll(milliseconds(90000)).ok()) << Logs(run);
    auto codes = run.coord->exit_codes();
    ASSERT_EQ(codes["w0"], 0) << "round " << round << ": the survivor exited with " << codes["w0"]
                              << (codes["w0"] == 128 + SIGPIPE ? " (SIGPIPE)" : "") << "\n"
                              << Logs(run);
    EXPECT_NE(ReadAll(run.coord->LogPath("w0")).find("done step=30 world=1"), std::string::npos) << Logs(run);
  }
}

// A hung (SIGSTOPped) peer: the survivor's collective returns within the
// collective timeout plus a margin, and it regroups without the peer.
TEST(FaultRuntime, SigstoppedPeerIsDroppedWithinTheTimeout) {
  const auto& reference = Reference();
  JobRun run = MakeRun("sigstop", kSteps, 15, {{"ARYL_COLLECTIVE_TIMEOUT_MS", "4000"}});
  ASSERT_TRUE(run.coord->Launch(2).ok());
  ASSERT_TRUE(run.coord->WaitProgress(30, milliseconds(30000)).ok()) << Logs(run);
  ASSERT_TRUE(run.coord->Kill("w1", SIGSTOP).ok());
  auto t0 = std::chrono::steady_clock::now();
  while (true) {
    auto members = run.coord->Members();
    ASSERT_TRUE(members.ok());
    if (members->size() == 1) break;
    run.coord->Reap();
    ASSERT_EQ(run.coord->exit_codes().count("w0"), 0u) << Logs(run);
    // 4 s collective timeout + its margin (2 s) + 1 s settle; generous under load.
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << Logs(run);
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_TRUE(run.coord->Kill("w1", SIGKILL).ok());
  ASSERT_TRUE(run.coord->WaitAll(milliseconds(60000)).ok()) << Logs(run);
  EXPECT_EQ(run.coord->exit_codes().at("w0"), 0) << Logs(run);
  bool bitwise = false;
  ExpectSameParams(reference, LoadParams(run), &bitwise);
}

// The store in a process of its own, SIGSTOPped for 4 s while two workers
// train: steps go on (each store poll is bounded and backs off; only a
// membership change needs the store), and after SIGCONT the job finishes.
TEST(FaultRuntime, TrainingGoesOnWhileTheStoreIsStopped) {
  int to_store[2], from_store[2];
  ASSERT_EQ(::pipe(to_store), 0);
  ASSERT_EQ(::pipe(from_store), 0);
  pid_t store = ::fork();
  ASSERT_GE(store, 0);
  if (store == 0) {
    ::dup2(to_store[0], 0);
    ::dup2(from_store[1], 1);
    ::close(to_store[1]);
    ::close(from_store[0]);
    ::execl(ARYL_RT_TEST_STORE, ARYL_RT_TEST_STORE, (char*)nullptr);
    ::_exit(127);
  }
  ::close(to_store[0]);
  ::close(from_store[1]);
  std::string endpoint;
  char c;
  while (::read(from_store[0], &c, 1) == 1 && c != '\n') endpoint += c;
  ASSERT_EQ(endpoint.rfind("tcp://", 0), 0u) << "store said '" << endpoint << "'";
  struct StoreGuard {
    pid_t pid;
    int fd;
    ~StoreGuard() {
      ::kill(pid, SIGCONT);
      ::close(fd);  // stdin closes: the store exits
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } guard{store, to_store[1]};

  JobRun run = MakeRun("deadstore", 100000, 10, {}, false, false, endpoint);
  ASSERT_TRUE(run.coord->Launch(2).ok());
  ASSERT_TRUE(run.coord->WaitProgress(20, milliseconds(30000)).ok()) << Logs(run);
  // The rate with the store up, then with it stopped, over 4 s each (a busy
  // machine slows both alike). Stopped, each worker loses about 2 of those
  // 4 s to two bounded polls (1 s each, then 1 s and 2 s of backoff).
  int64_t t0 = CommittedSteps(run, "w0");
  std::this_thread::sleep_for(std::chrono::seconds(4));
  int64_t up = CommittedSteps(run, "w0") - t0;
  ASSERT_EQ(::kill(store, SIGSTOP), 0);
  int64_t t1 = CommittedSteps(run, "w0");
  std::this_thread::sleep_for(std::chrono::seconds(4));
  int64_t stopped = CommittedSteps(run, "w0") - t1;
  ASSERT_EQ(::kill(store, SIGCONT), 0);
  std::printf("steps committed in 4 s: %lld with the store up, %lld with it stopped\n", (long long)up,
              (long long)stopped);
  EXPECT_GE(stopped, std::max<int64_t>(1, up / 5)) << "training stalled while the store was stopped\n" << Logs(run);
  // Store back: a checkpoint-and-stop request through it reaches both workers.
  ASSERT_TRUE(run.coord->RequestStop().ok());
  ASSERT_TRUE(run.coord->WaitAll(milliseconds(60000)).ok()) << Logs(run);
  for (auto& [id, code] : run.coord->exit_codes()) EXPECT_EQ(code, 0) << id << "\n" << Logs(run);
}

}  // namespace
}  // namespace aryl
