// The daemon's handlers and tick, driven in this process on virtual time
// (driven_cluster.h): the life cycles that the real-process tests cover with
// agents and sleeps, here in milliseconds and in one deterministic order.
#include <gtest/gtest.h>

#include "driven_test_util.h"

namespace aryl::daemon::testing {
namespace {

// A two-worker job starts on the one agent, and completes once both of its
// workers exit 0; every exit the agent reported is acknowledged.
TEST(DrivenDaemon, FixedJobRunsAndCompletes) {
  TestCluster c;
  c.AddAgent("t1", p::Pool::kTraining, 2);
  auto job = c.Submit(Fixed(2));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(c.RunUntil([&] { return c.CountWorkers(*job) == 2; }, 5)) << Kinds(c, *job);
  EXPECT_EQ(StateOf(c, *job), JobState::kRunning);
  c.Progress("t1", *job, p::PlanGeneration(1), 10);
  const auto workers = c.WorkersOf(*job)["t1"];
  for (const auto& w : workers) c.Exit("t1", w.worker, 0);
  ASSERT_TRUE(c.RunUntil([&] { return StateOf(c, *job) == JobState::kCompleted; }, 5)) << Kinds(c, *job);
  EXPECT_TRUE(c.agent("t1").exits().empty()) << c.agent("t1").exits().Unacked().size() << " exits never acknowledged";
}

// An agent that stops heartbeating fails after agent_timeout; its job starts
// again on the other server, but only once the lost agent's lease has surely
// run out (its workers may still run until then): never two copies at once.
TEST(DrivenDaemon, SilentAgentsJobRestartsOnlyAfterItsLease) {
  TestCluster c;  // agent_timeout 3 s, agent_lease 20 s
  c.AddAgent("t1", p::Pool::kTraining, 2);
  auto job = c.Submit(Fixed(2));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(c.RunUntil([&] { return c.CountWorkers(*job) == 2; }, 5));
  c.AddAgent("t2", p::Pool::kTraining, 2);
  c.Run(1);
  const double silent_from = c.now();
  c.agent("t1").silent = true;
  const auto t2_before = c.agent("t2").received.size();
  auto started_on_t2 = [&] {
    const auto& got = c.agent("t2").received;
    return std::any_of(got.begin() + static_cast<long>(t2_before), got.end(),
                       [](const p::Message& m) { return std::holds_alternative<p::StartWorkers>(m); });
  };
  ASSERT_TRUE(c.RunUntil(started_on_t2, 60)) << Kinds(c, *job);
  const double waited = c.now() - silent_from;
  // The lease: 20 s from the last acknowledged heartbeat, plus the agent's
  // stop grace (5 s) and margins; the silence is noticed after 3 s.
  EXPECT_GE(waited, 20 + p::kLeaseStopGraceSeconds) << "started again while the lost agent's lease ran";
  EXPECT_LE(waited, 20 + p::kLeaseStopGraceSeconds + 5) << "waited long past the lease";
  EXPECT_TRUE(c.RunUntil([&] { return c.WorkersOf(*job)["t2"].size() == 2; }, 1));
}

// Unexpected exits (SIGKILL) restart the job max_worker_failures times; the
// next one fails it.
TEST(DrivenDaemon, RepeatedCrashesFailTheJob) {
  DaemonOptions o = DrivenCluster::Defaults();
  o.max_worker_failures = 3;
  TestCluster c(o);
  c.AddAgent("t1", p::Pool::kTraining, 1);
  auto job = c.Submit(Fixed(1));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  int kills = 0;
  while (StateOf(c, *job) != JobState::kFailed) {
    ASSERT_LE(kills, o.max_worker_failures + 1) << "still not failed after " << kills << " kills\n" << Kinds(c, *job);
    ASSERT_TRUE(c.RunUntil([&] { return c.CountWorkers(*job) == 1 || StateOf(c, *job) == JobState::kFailed; }, 30))
        << Kinds(c, *job);
    if (StateOf(c, *job) == JobState::kFailed) break;
    c.Kill("t1", c.WorkersOf(*job)["t1"].at(0).worker, 9);
    ++kills;
    c.Run(0.5);
  }
  EXPECT_EQ(kills, o.max_worker_failures + 1) << Kinds(c, *job);
  EXPECT_TRUE(HasEvent(c, *job, "failed")) << Kinds(c, *job);
  EXPECT_EQ(c.CountWorkers(*job), 0);
}

// A loaned inference server is given back by the reclaim's deadline: the
// elastic job that grew onto it shrinks off it in time, and keeps its
// training server's workers.
TEST(DrivenDaemon, ReclaimEmptiesTheLoanedServerByItsDeadline) {
  TestCluster c;
  const p::JobId job = GrowOntoLoanedServer(c);
  ASSERT_TRUE(c.RunUntil([&] { return c.WorkersOf(job)["i1"].size() == 2 && c.Formed(job) > 1; }, 30))
      << Kinds(c, job);
  p::PoolReclaim r;
  r.servers = {"i1"};
  r.deadline_seconds = 5;
  const double asked = c.now();
  ASSERT_TRUE(c.Call(r).ok());
  ASSERT_TRUE(c.RunUntil([&] { return c.WorkersOf(job)["i1"].empty(); }, 10)) << Kinds(c, job);
  EXPECT_LE(c.now() - asked, 5.0) << "the loaned server was emptied after its deadline";
  EXPECT_EQ(c.WorkersOf(job)["t1"].size(), 2u) << "the training server's workers were stopped too";
  auto nodes = c.Call<p::NodesReply>(p::ListNodes{});
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  for (const auto& n : nodes->nodes)
    if (n.agent_id == "i1") EXPECT_NE(n.state, p::NodeState::kLoaned) << "i1 is still loaned";
}

// Issue 34's livelock: a grow onto a loaned server whose new worker dies
// before the generation forms. The other joiner waits for a generation that
// cannot form; the daemon must give up on it and plan again (the forming
// rule, converger step C4), not start generation after generation whose
// joiners time out while rank 0 trains alone.
TEST(DrivenDaemon, JoinerKilledDuringAGrowDoesNotLivelock) {
  TestCluster c;
  const p::JobId job = GrowOntoLoanedServer(c);
  const std::int64_t formed_before = c.Formed(job);
  // The joiner dies 0.3 s later, before its generation formed.
  c.Run(0.3);
  ASSERT_EQ(c.Formed(job), formed_before);
  c.Kill("i1", c.WorkersOf(job)["i1"].at(0).worker, 9);
  const int started_before = c.GenerationsStarted(job);
  const std::int64_t step_before = c.Step(job);
  c.Run(360);
  auto row = c.Job(job);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->state, JobState::kRunning) << Kinds(c, job);
  // Six minutes: a grow back onto the loaned server, perhaps a retry, not one
  // generation every 30 s.
  EXPECT_LE(c.GenerationsStarted(job) - started_before, 3) << "generations kept coming\n" << Kinds(c, job);
  EXPECT_GT(c.Formed(job), formed_before) << "no generation formed after the loss\n" << Kinds(c, job);
  EXPECT_GT(c.Step(job), step_before + 300) << Kinds(c, job);
  EXPECT_GE(c.CountWorkers(job), 3) << "the job did not grow back onto the loaned server\n" << Kinds(c, job);
}

// Issue 34's grow stall: four offer/reclaim cycles of the inference server
// with a 1 s deadline. Each reclaim empties the loaned server in time, and
// each new offer grows the job onto it again: no cycle leaves the job stuck
// at its training server's size or a joiner waiting in a dead rendezvous.
TEST(DrivenDaemon, OfferReclaimCyclesKeepGrowingBack) {
  TestCluster c;
  const p::JobId job = GrowOntoLoanedServer(c);
  for (int cycle = 0; cycle < 4; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    ASSERT_TRUE(c.RunUntil([&] { return c.WorkersOf(job)["i1"].size() == 2 && c.CountWorkers(job) == 4; }, 60))
        << Kinds(c, job);
    const std::int64_t formed = c.Formed(job);
    ASSERT_TRUE(c.RunUntil([&] { return c.Formed(job) > formed || c.CountWorkers(job) == 4; }, 10));
    p::PoolReclaim r;
    r.servers = {"i1"};
    r.deadline_seconds = 1;
    const double asked = c.now();
    ASSERT_TRUE(c.Call(r).ok());
    ASSERT_TRUE(c.RunUntil([&] { return c.WorkersOf(job)["i1"].empty(); }, 5)) << Kinds(c, job);
    EXPECT_LE(c.now() - asked, 1.0 + 1e-6) << "emptied after the deadline";
    const std::int64_t step = c.Step(job);
    c.Run(5);
    EXPECT_GT(c.Step(job), step) << "no step after the reclaim\n" << Kinds(c, job);
    ASSERT_TRUE(c.Call(p::PoolOffer{{"i1"}}).ok());
  }
  ASSERT_TRUE(c.RunUntil([&] { return c.WorkersOf(job)["i1"].size() == 2; }, 60)) << Kinds(c, job);
  const std::int64_t grown = c.Formed(job);
  ASSERT_TRUE(c.RunUntil([&] { return c.Formed(job) > grown || c.CountWorkers(job) == 4; }, 10));
  EXPECT_EQ(c.CountWorkers(job), 4) << Kinds(c, job);
}

// Issue 34's thrash: one offer is one grow (2 -> 4), not 2 -> 4 -> 1 -> 2;
// one reclaim is one shrink; and a worker never goes to the loaned server
// while the job's training server has a free slot.
TEST(DrivenDaemon, OneOfferIsOneResize) {
  TestCluster c;
  c.workers_link_runtime = true;
  c.AddAgent("t1", p::Pool::kTraining, 2);
  c.AddAgent("i1", p::Pool::kInference, 2);
  auto job = c.Submit(Elastic(1, 4));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  c.Train(*job);
  ASSERT_TRUE(c.RunUntil([&] { return c.Formed(*job) > 0 && c.Step(*job) > 0; }, 10)) << Kinds(c, *job);
  c.Run(30);
  ASSERT_EQ(c.GenerationsStarted(*job), 1) << Kinds(c, *job);
  ASSERT_TRUE(c.Call(p::PoolOffer{{"i1"}}).ok());
  c.Run(60);
  EXPECT_EQ(c.GenerationsStarted(*job), 2) << "one offer, more than one resize\n" << Kinds(c, *job);
  EXPECT_EQ(c.CountWorkers(*job), 4) << Kinds(c, *job);
  EXPECT_EQ(c.WorkersOf(*job)["t1"].size(), 2u) << "a worker on the loaned server while t1 had a free slot";
  p::PoolReclaim r;
  r.count = 1;
  r.deadline_seconds = 30;
  ASSERT_TRUE(c.Call(r).ok());
  c.Run(60);
  EXPECT_EQ(c.GenerationsStarted(*job), 3) << "one reclaim, more than one resize\n" << Kinds(c, *job);
  EXPECT_EQ(c.CountWorkers(*job), 2) << Kinds(c, *job);
  EXPECT_EQ(c.WorkersOf(*job)["t1"].size(), 2u) << Kinds(c, *job);
}

// The scheduler process dies and a new one starts on its state file: the
// agents register again with the workers they run, and the job goes on with
// the same workers (none stopped, none started) and completes once.
TEST(DrivenDaemon, SchedulerRestartKeepsTheWorkers) {
  TestCluster c(DrivenCluster::Defaults(), /*restartable=*/true);
  c.workers_link_runtime = true;
  c.AddAgent("t1", p::Pool::kTraining, 2);
  auto job = c.Submit(Fixed(2));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  c.Train(*job);
  ASSERT_TRUE(c.RunUntil([&] { return c.Step(*job) > 5; }, 20)) << Kinds(c, *job);
  const auto before = c.WorkersOf(*job)["t1"];
  const auto commands = c.agent("t1").received.size();
  c.RestartDaemon();
  c.Run(30);
  const auto& got = c.agent("t1").received;
  for (auto it = got.begin() + static_cast<long>(commands); it != got.end(); ++it)
    EXPECT_FALSE(std::holds_alternative<p::StartWorkers>(*it) || std::holds_alternative<p::StopWorkers>(*it))
        << p::TypeName(*it) << " after the restart\n" << Kinds(c, *job);
  ASSERT_EQ(c.WorkersOf(*job)["t1"].size(), before.size());
  EXPECT_EQ(StateOf(c, *job), JobState::kRunning) << Kinds(c, *job);
  const auto workers = c.WorkersOf(*job)["t1"];
  for (const auto& w : workers) c.Exit("t1", w.worker, 0, "completed", c.Step(*job));
  ASSERT_TRUE(c.RunUntil([&] { return StateOf(c, *job) == JobState::kCompleted; }, 5)) << Kinds(c, *job);
}

// The scheduler is stopped for 10 s, three agent timeouts: the heartbeats
// sent meanwhile are read when it runs again, so no agent reads as dead and
// no worker is stopped or started.
TEST(DrivenDaemon, PausedSchedulerKillsNoWorker) {
  TestCluster c;
  c.AddAgent("t1", p::Pool::kTraining, 2);
  c.AddAgent("t2", p::Pool::kTraining, 2);
  auto job = c.Submit(Fixed(2));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(c.RunUntil([&] { return c.CountWorkers(*job) == 2; }, 5));
  const auto placed = c.WorkersOf(*job);
  c.PauseDaemon(10);
  c.Run(10);
  EXPECT_EQ(c.WorkersOf(*job), placed) << Kinds(c, *job);
  auto nodes = c.Call<p::NodesReply>(p::ListNodes{});
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  for (const auto& n : nodes->nodes) EXPECT_TRUE(n.connected) << n.agent_id << " declared dead after a pause";
  EXPECT_FALSE(HasEvent(c, *job, "worker_exit")) << Kinds(c, *job);
}

// An agent cut off for 40 s (a partition): its workers stop when its lease
// runs out, the job starts again on the other server only after that, and
// when the agent is back it registers again and nothing runs twice.
TEST(DrivenDaemon, PartitionedAgentsJobRunsOnceAndTheAgentRejoins) {
  TestCluster c;  // lease 20 s
  c.AddAgent("t1", p::Pool::kTraining, 2);
  auto job = c.Submit(Fixed(2));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(c.RunUntil([&] { return c.CountWorkers(*job) == 2; }, 5));
  c.AddAgent("t2", p::Pool::kTraining, 2);
  c.agent("t1").silent = true;
  for (int i = 0; i < 40 * 20; ++i) {
    c.Run(DrivenCluster::kTick);
    auto w = c.WorkersOf(*job);
    ASSERT_FALSE(!w["t1"].empty() && !w["t2"].empty()) << "two copies at " << c.now() - DrivenCluster::kT0 << " s\n"
                                                       << Kinds(c, *job);
  }
  EXPECT_EQ(c.WorkersOf(*job)["t2"].size(), 2u) << Kinds(c, *job);
  c.agent("t1").silent = false;
  ASSERT_TRUE(c.RunUntil([&] {
    auto nodes = c.Call<p::NodesReply>(p::ListNodes{});
    return nodes.ok() && std::any_of(nodes->nodes.begin(), nodes->nodes.end(),
                                     [](const p::NodeRow& n) { return n.agent_id == "t1" && n.connected; });
  }, 10)) << "t1 did not register again";
  c.Run(5);
  EXPECT_TRUE(c.agent("t1").exits().empty()) << "the exits t1 kept were not acknowledged";
  EXPECT_EQ(c.WorkersOf(*job)["t2"].size(), 2u) << Kinds(c, *job);
  EXPECT_EQ(StateOf(c, *job), JobState::kRunning) << Kinds(c, *job);
}

// The state disk fills while a job runs: a submission is refused with the
// reason, the job's end cannot be recorded and is not acknowledged, so the
// agent keeps sending it (its ExitBook); once there is room again the job
// completes, once, and the next submission runs. Nothing is lost.
TEST(DrivenDaemon, FullStateDiskLosesNothing) {
  FullDiskStore* store = nullptr;
  TestCluster c(DrivenCluster::Defaults(), FullDisk(&store));
  c.workers_link_runtime = true;
  c.AddAgent("t1", p::Pool::kTraining, 2);
  auto job = c.Submit(Fixed(2));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  c.Train(*job);
  ASSERT_TRUE(c.RunUntil([&] { return c.Step(*job) > 3; }, 20)) << Kinds(c, *job);

  *store->full = true;
  auto refused = c.Submit(Fixed(1));
  ASSERT_FALSE(refused.ok()) << "a submission was accepted with a full state disk";
  EXPECT_NE(refused.status().message().find("disk is full"), std::string::npos) << refused.status().ToString();
  const auto workers = c.WorkersOf(*job)["t1"];
  for (const auto& w : workers) c.Exit("t1", w.worker, 0, "completed", c.Step(*job));
  c.Run(10);
  EXPECT_FALSE(c.agent("t1").exits().empty()) << "an exit was acknowledged that could not be recorded";
  EXPECT_EQ(StateOf(c, *job), JobState::kRunning) << "reads must still answer, and the end is not recorded yet";
  EXPECT_GT(store->refused, 3);

  *store->full = false;
  ASSERT_TRUE(c.RunUntil([&] { return StateOf(c, *job) == JobState::kCompleted; }, 10)) << Kinds(c, *job);
  c.Run(3);
  EXPECT_TRUE(c.agent("t1").exits().empty()) << "exits still unacknowledged with room on the disk";
  int ends = 0;
  for (const auto& e : c.Events(*job)) ends += e.kind == "finished";
  EXPECT_EQ(ends, 1) << Kinds(c, *job);
  auto next = c.Submit(Fixed(1));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(c.RunUntil([&] { return c.CountWorkers(*next) == 1; }, 5)) << Kinds(c, *next);
}

}  // namespace
}  // namespace aryl::daemon::testing
