// Fault tests on a real network: every agent in its own network namespace
// with its own address on a bridge (tests/system/netns.h), the scheduler on
// the bridge's address, links cut with `ip link set ... down`. What holds on
// one machine's loopback must hold here too (docs/architecture.md, "Leases
// and fencing"): a two-host job needs no environment set by hand; a job never
// trains twice, whether its rank-0 agent is cut off or also paused; a paused
// scheduler kills nothing.
//
// Needs root for the namespaces: elsewhere each test skips and says why.
// `./dev chaos N` repeats them with the loopback fault tests.
#include "chaos_fixture.h"
#include "netns.h"

namespace aryl {
namespace {

using namespace aryl::chaostest;  // NOLINT

class NetnsChaos : public ChaosTest {
 protected:
  void SetUp() override {
    ChaosTest::SetUp();
    if (auto why = Netns::Unavailable()) {
      std::printf("SKIPPED: %s\n", why->c_str());
      result_recorded_ = true;
      GTEST_SKIP() << *why;
    }
    net_ = std::make_unique<Netns>(2);
    ASSERT_TRUE(net_->ok()) << "could not set up the namespaces and the bridge";
    listen_host_ = net_->SchedulerAddress();
    endpoint_ = "tcp://" + listen_host_ + ":" + std::to_string(port_);
  }
  void TearDown() override {
    ChaosTest::TearDown();  // stops the agents before their namespaces go
    net_.reset();
  }

  // An agent in host i's namespace, with no --host and nothing in its
  // environment: it must find the address its peers reach it at by itself.
  pid_t StartHostAgent(int i, const std::string& id, int slots) {
    agent::LaunchSpec spec;
    spec.argv = net_->Exec(i);
    for (const std::string& a : {std::string(ARYL_AGENT_BIN), std::string("--scheduler"), endpoint_,
                                 std::string("--id"), id, std::string("--pool"), std::string("training"),
                                 std::string("--slots"), std::to_string(slots), std::string("--gpu-type"),
                                 std::string("cpu"), std::string("--log-dir"), (dir_ / ("logs-" + id)).string(),
                                 std::string("--log-level"), std::string("debug")})
      spec.argv.push_back(a);
    spec.cwd = dir_.string();
    spec.stdout_path = (dir_ / ("agent-" + id + ".log")).string();
    auto pid = launcher_.Launch(spec);
    EXPECT_TRUE(pid.ok()) << pid.status();
    return pid.ok() ? *pid : 0;
  }

  // What the workers of agent `id` wrote to stderr for the job.
  std::string WorkerErrors(const std::string& id, p::JobId job) {
    std::string out;
    fs::path jd = dir_ / ("logs-" + id) / ("job-" + std::to_string(job));
    if (!fs::exists(jd)) return out;
    for (const auto& f : fs::directory_iterator(jd))
      if (f.path().extension() == ".err") out += ReadFile(f.path());
    return out;
  }

  std::unique_ptr<Netns> net_;
};

// Two hosts, two workers each: the agents give their workers the address the
// other host reaches them at (ARYL_GLOO_HOST, the store, MASTER_ADDR), so the
// job trains on all four without anything set by hand. (Before: the workers
// bound 127.0.0.1 and failed within 35 s, "gloo connect [127.0.0.1]:...:
// Connection refused".)
TEST_F(NetnsChaos, TwoHostJobNeedsNoEnvironment) {
  auto c = Client();
  StartScheduler({"--insecure"});
  StartHostAgent(0, "a1", 2);
  StartHostAgent(1, "a2", 2);
  ASSERT_TRUE(WaitAgents(*c, 2, 20)) << Logs();
  auto job = SubmitTraining(*c, 4, 4);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitTraining(*c, *job, 4, 50, 60)) << "never trained on 4 workers across the two hosts\n" << Logs();
  ExpectCompletedOnce(*c, *job, 150);
  for (const auto& id : {"a1", "a2"}) {
    std::string log = ReadFile(dir_ / (std::string("agent-") + id + ".log"));
    EXPECT_NE(log.find("peers reach this server at " + net_->Address(id == std::string("a1") ? 0 : 1)),
              std::string::npos)
        << log;
  }
}

// The agent of rank 0 (and the job's store) is cut off for longer than its
// lease. Inside the cut, rank 0 and its local peer could regroup through their
// own store and train on; the agent's lease stops them, and the scheduler
// starts the job on the other host only once that lease has run out. Exactly
// one copy finishes. (Before: the cut-off copy trained 2,210 more steps and
// both printed "done steps=3000".)
TEST_F(NetnsChaos, PartitionedRankZeroAgentStopsItsCopy) {
  auto c = Client();
  StartScheduler({"--insecure"});
  StartHostAgent(0, "a1", 2);
  StartHostAgent(1, "a2", 2);
  ASSERT_TRUE(WaitAgents(*c, 2, 20)) << Logs();
  auto job = SubmitTraining(*c, 1, 4, /*sleep_ms=*/20);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitTraining(*c, *job, 4, 100, 90)) << Logs();
  std::string rank0 = RankZeroAgent(*job);
  int victim = rank0 == "a1" ? 0 : 1;
  ASSERT_TRUE(net_->Cut(victim));
  std::this_thread::sleep_for(milliseconds(20000));  // lease 8 s + its 5 s stop grace, and more
  ASSERT_TRUE(net_->Heal(victim));
  ExpectCompletedOnce(*c, *job, 180);
  std::string agent_log = ReadFile(dir_ / ("agent-" + rank0 + ".log"));
  EXPECT_NE(agent_log.find("(the lease): stopping the"), std::string::npos)
      << "the cut-off agent did not stop its workers\n" << agent_log;
  EXPECT_NE(ReadFile(dir_ / "scheduler.log").find("once the lease of " + rank0), std::string::npos) << Logs();
}

// The same agent is also paused (SIGSTOP, as a frozen VM): its lease cannot
// act, so its workers train on alone. When the job starts again elsewhere,
// rank 0 there raises the checkpoint fence; the stale copy is refused at its
// next fence check or checkpoint ("fenced: ... is stale") and stops before it
// can finish or replace a checkpoint.
TEST_F(NetnsChaos, PausedAndCutAgentIsFenced) {
  auto c = Client();
  StartScheduler({"--insecure"});
  pid_t a1 = StartHostAgent(0, "a1", 2);
  ASSERT_TRUE(WaitAgents(*c, 1, 20)) << Logs();
  auto job = SubmitTraining(*c, 1, 2, /*sleep_ms=*/20);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitTraining(*c, *job, 2, 100, 90)) << Logs();
  StartHostAgent(1, "a2", 2);
  ASSERT_TRUE(WaitAgents(*c, 2, 20)) << Logs();
  ASSERT_EQ(::kill(a1, SIGSTOP), 0);
  ASSERT_TRUE(net_->Cut(0));
  // The job starts again on a2 once a1's lease has surely run out (~14 s).
  bool moved = WaitFor([&] {
    for (const auto& path : WorkerOutputs(*job))
      if (path.string().find("logs-a2") != std::string::npos && ReadFile(path).find("start worker=") != std::string::npos)
        return true;
    return false;
  }, 60);
  EXPECT_TRUE(moved) << Logs();
  bool fenced = WaitFor([&] { return WorkerErrors("a1", *job).find("fenced:") != std::string::npos; }, 20);
  ::kill(a1, SIGCONT);
  ASSERT_TRUE(net_->Heal(0));
  EXPECT_TRUE(fenced) << "the stale copy on a1 was not fenced\n" << WorkerErrors("a1", *job) << Logs();
  ExpectCompletedOnce(*c, *job, 180, fenced);
}

// The scheduler is stopped (SIGSTOP) for 20 s, then flaps (CONT 0.05 s, STOP
// 7 s, four times). The heartbeats queued meanwhile are read before anyone is
// judged, and the agents' lease (60 s, the default) outlasts the pauses: no
// agent is declared dead, no worker is stopped or started again. (Before: at
// SIGCONT both agents were marked dead in the same millisecond and the job
// retrained from its checkpoint.)
TEST_F(NetnsChaos, PausedSchedulerKillsNoWorker) {
  agent_lease_ = "60";
  auto c = Client();
  StartScheduler({"--insecure"});
  StartHostAgent(0, "a1", 2);
  StartHostAgent(1, "a2", 2);
  ASSERT_TRUE(WaitAgents(*c, 2, 20)) << Logs();
  auto job = SubmitTraining(*c, 4, 4, /*sleep_ms=*/20);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitTraining(*c, *job, 4, 50, 90)) << Logs();
  int starts = WorkerStarts(*job);
  ASSERT_EQ(::kill(scheduler_pid_, SIGSTOP), 0);
  std::this_thread::sleep_for(milliseconds(20000));
  for (int i = 0; i < 4; ++i) {
    ::kill(scheduler_pid_, SIGCONT);
    std::this_thread::sleep_for(milliseconds(50));
    ::kill(scheduler_pid_, SIGSTOP);
    std::this_thread::sleep_for(milliseconds(7000));
  }
  ::kill(scheduler_pid_, SIGCONT);
  ExpectCompletedOnce(*c, *job, 180);
  EXPECT_EQ(WorkerStarts(*job), starts) << "workers were started again after the pause\n" << Logs();
  std::string log = ReadFile(dir_ / "scheduler.log");
  EXPECT_EQ(log.find("stopped heartbeating"), std::string::npos) << Logs();
  EXPECT_EQ(ReadOutcome(*job).steps_lost, 0) << Logs();
}

// The agent of rank 0 (and the job's store) crashes and is restarted at once,
// as systemd's Restart= does. The other agent's loop never waits on the dead
// store (its queries run off the loop), so it keeps heartbeating and is never
// declared dead; the restarted agent reports that it runs none of the job's
// workers, so the job starts again without waiting out the lease, once, and
// finishes once. (Before: the other agent's loop blocked 5 s per store call,
// both agents were declared dead in turn for two minutes, and one slot was
// started three times, with 7 "done" lines.)
TEST_F(NetnsChaos, RestartedRankZeroAgentDuplicatesNothing) {
  auto c = Client();
  StartScheduler({"--insecure"});
  pid_t a1 = StartHostAgent(0, "a1", 2);
  pid_t a2 = StartHostAgent(1, "a2", 2);
  ASSERT_TRUE(WaitAgents(*c, 2, 20)) << Logs();
  auto job = SubmitTraining(*c, 1, 4, /*sleep_ms=*/20);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitTraining(*c, *job, 4, 100, 90)) << Logs();
  std::string rank0 = RankZeroAgent(*job);
  int host = rank0 == "a1" ? 0 : 1;
  std::string other = rank0 == "a1" ? "a2" : "a1";
  Kill(rank0 == "a1" ? a1 : a2);
  fs::rename(dir_ / ("agent-" + rank0 + ".log"), dir_ / ("agent-" + rank0 + "-before.log"));
  StartHostAgent(host, rank0, 2);
  ExpectCompletedOnce(*c, *job, 180);
  std::string log = ReadFile(dir_ / "scheduler.log");
  EXPECT_EQ(log.find("agent " + other + " stopped heartbeating"), std::string::npos)
      << "the agent that lost its peer's store stopped heartbeating\n" << Logs();
}

}  // namespace
}  // namespace aryl
