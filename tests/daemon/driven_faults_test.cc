// Faults of aryl-scheduler that aryl-simtest --daemon found (docs/simtest.md),
// each driven here as the seed that found it had it, on virtual time: every
// test fails with its fix reverted.
#include <gtest/gtest.h>

#include "driven_test_util.h"

namespace aryl::daemon::testing {
namespace {

// A StartWorkers that never reaches its agent (t2 hears nothing for a
// second: a connection that broke). Its heartbeats never list the worker, so
// the daemon gives it up and starts another: the job forms and trains
// instead of waiting for that worker for ever.
TEST(DrivenDaemon, AStartThatNeverArrivesIsReplaced) {
  TestCluster c;
  auto job = StartWhileT2IsDeaf(c);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  c.agent("t2").deaf = false;
  EXPECT_EQ(c.WorkersOf(*job)["t2"].size(), 0u) << "t2 heard its start after all";
  ASSERT_TRUE(c.RunUntil([&] { return c.Formed(*job) > 0 && c.Step(*job) > 0; }, 60)) << Kinds(c, *job);
  EXPECT_EQ(c.CountWorkers(*job), 4);
  EXPECT_EQ(StateOf(c, *job), JobState::kRunning);
}

// The kill a reclaim sends at its deadline is lost (i1 hears nothing while
// it is sent); it is sent again, so the loaned server is still empty within
// a few seconds of the deadline, not at the worker's own end.
TEST(DrivenDaemon, AReclaimsLostKillIsSentAgain) {
  TestCluster c;
  const p::JobId job = GrowOntoLoanedServer(c);
  // The NewGeneration that lets i1's workers leave, and the first kill, are lost.
  const double asked = ReclaimWhileI1IsDeaf(c, job, 2);
  c.Run(2);
  c.agent("i1").deaf = false;
  ASSERT_TRUE(c.RunUntil([&] { return c.WorkersOf(job)["i1"].empty(); }, 15)) << Kinds(c, job);
  EXPECT_LE(c.now() - asked, 2.0 + 2.5) << "the kill was not sent again";
}

// The scheduler restarts during a reclaim whose message to the loaned
// server was lost (i1 deaf): the new scheduler restores the reclaim from
// its state (reclaim_record.h) and still empties i1 by the deadline. It
// forgot it before, and i1's workers ran on past the deadline
// (aryl-simtest --daemon --replay 59).
TEST(DrivenDaemon, AReclaimOutlivesASchedulerRestart) {
  TestCluster c(DrivenCluster::Defaults(), /*restartable=*/true);
  const p::JobId job = GrowOntoLoanedServer(c);
  const double asked = ReclaimWhileI1IsDeaf(c, job, 20);  // the NewGeneration letting them leave is lost
  c.Run(3);
  c.RestartDaemon();
  c.agent("i1").deaf = false;  // back in time to register with its workers
  ASSERT_TRUE(c.RunUntil([&] { return c.WorkersOf(job)["i1"].empty(); }, 40)) << Kinds(c, job);
  EXPECT_LE(c.now() - asked, 20.0 + DrivenCluster::kTick) << "i1 was emptied after the deadline\n" << Kinds(c, job);
}

// A loaned server's agent is cut off (silent) as its server is reclaimed:
// the scheduler declares it lost after agent_timeout, but its workers run on
// until the agent's own lease stops them. The reclaim is met only then, not
// when the node was declared lost: before, the server was "returned to
// inference" with the job's workers still on it (aryl-simtest --daemon
// --replay 3953, there across a scheduler restart).
TEST(DrivenDaemon, AReclaimOfALostServerIsMetOnlyOnceItsLeaseStoppedItsWorkers) {
  TestCluster c;
  const p::JobId job = GrowOntoLoanedServer(c);
  ASSERT_TRUE(c.RunUntil([&] { return c.WorkersOf(job)["i1"].size() == 2 && c.Formed(job) > 1; }, 30))
      << Kinds(c, job);
  c.agent("i1").silent = true;
  p::PoolReclaim r;
  r.servers = {"i1"};
  r.deadline_seconds = 1;
  ASSERT_TRUE(c.Call(r).ok());
  auto met = [&] {
    p::ListEvents q;
    q.kind = "reclaimed";
    q.node = "i1";
    auto ev = c.Call<p::EventsReply>(q);
    EXPECT_TRUE(ev.ok()) << ev.status().ToString();
    return ev.ok() && !ev->events.empty();
  };
  bool workers_seen_gone = false;
  for (int i = 0; i < 60 / DrivenCluster::kTick && !met(); ++i) {
    c.Run(DrivenCluster::kTick);
    workers_seen_gone = workers_seen_gone || c.WorkersOf(job)["i1"].empty();
  }
  ASSERT_TRUE(met()) << "the reclaim was never met\n" << Kinds(c, job);
  EXPECT_TRUE(workers_seen_gone) << "the reclaim was met with the job's workers still on i1\n" << Kinds(c, job);
}

// An elastic job on t1 and t2 loses t2 (partitioned), goes on on t1, and
// waits out t2's lease before it could start afresh. The scheduler restarts
// and t1 comes back only after the new one gave up on it (its workers are
// killed as strays), so the job waits out t1's lease too; the scheduler
// restarts once more and t1, now running nothing, registers at once. That
// releases t1's wait, not t2's: the job starts afresh only once t2's workers
// have surely stopped. With one wait per job, t2's was replaced by t1's and
// t1's return cleared it (aryl-simtest --daemon --replay 355).
TEST(DrivenDaemon, ARestartedSchedulerWaitsOutEveryLostAgentsLease) {
  TestCluster c(DrivenCluster::Defaults(), /*restartable=*/true);  // lease 20 s
  c.workers_link_runtime = true;
  c.AddAgent("t1", p::Pool::kTraining, 2);
  c.AddAgent("t2", p::Pool::kTraining, 2);
  auto job = c.Submit(Elastic(1, 4));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  c.Train(*job);
  ASSERT_TRUE(c.RunUntil([&] { return c.CountWorkers(*job) == 4 && c.Step(*job) > 0; }, 20)) << Kinds(c, *job);
  const double t2_silent_from = c.now();
  c.agent("t2").silent = true;
  c.Run(5);
  c.agent("t1").silent = true;
  c.RestartDaemon();
  c.Run(5);
  c.agent("t1").silent = false;
  ASSERT_TRUE(c.RunUntil([&] { return c.WorkersOf(*job)["t1"].empty(); }, 5)) << Kinds(c, *job);
  c.Run(1);
  c.RestartDaemon();
  auto d2 = [&] {
    const std::int64_t fresh = c.FreshStart(*job);
    bool old = false, young = false;
    for (const auto& [agent, ws] : c.WorkersOf(*job))
      for (const auto& w : ws) (w.generation < fresh ? old : young) = true;
    return fresh > 0 && old && young;
  };
  for (int i = 0; i < 40 * 20; ++i) {
    c.Run(DrivenCluster::kTick);
    ASSERT_FALSE(d2()) << "generation " << c.FreshStart(*job) << " started at " << c.now() - t2_silent_from
                       << " s of t2's silence while older workers run\n"
                       << Kinds(c, *job);
  }
  EXPECT_GT(c.FreshStart(*job), 0) << "never started again\n" << Kinds(c, *job);
}

// Registrations and heartbeats are numbered from one counter (protocol
// step 1): a registration that later heartbeats overtook (sent before the
// job's start arrived, so listing none of its workers) is refused, and the
// workers it does not list are not taken for gone. Read as new, it made
// them gone and the job started afresh beside them (aryl-simtest --daemon
// --replay 470: repeated registrations under a 2 s delay).
TEST(DrivenDaemon, ARegistrationThatHeartbeatsOvertookIsStale) {
  TestCluster c;
  c.AddAgent("t1", p::Pool::kTraining, 2);
  auto job = c.Submit(Fixed(2));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(c.RunUntil([&] { return c.CountWorkers(*job) == 2; }, 5));
  c.Run(3);  // heartbeats listing both workers
  ASSERT_GE(c.agent("t1").session->seq(), 2u);
  p::AgentRegister old = c.agent("t1").reg;
  old.seq = 1;  // before the heartbeats read since; no workers then
  auto reply = c.Call(old, "t1");
  EXPECT_EQ(reply.status().code(), Status::Code::kFailedPrecondition) << reply.status().ToString();
  c.Run(5);
  EXPECT_FALSE(HasEvent(c, *job, "worker_exit")) << Kinds(c, *job);
  EXPECT_EQ(c.GenerationsStarted(*job), 1) << Kinds(c, *job);
  EXPECT_EQ(c.CountWorkers(*job), 2) << Kinds(c, *job);
  // The agent's next registration, numbered after them, is read.
  p::AgentRegister next = c.agent("t1").reg;
  for (const auto& w : c.agent("t1").Workers()) next.workers.push_back(w);
  next = c.agent("t1").session->MakeRegister(next, c.now());
  EXPECT_TRUE(c.Call(next, "t1").ok());
}

// A registration sent before a start arrived, read after the start went
// out (a delay): it lists none of the new workers. They are not taken for
// gone, since no report has listed them yet (ConfirmStarts decides on
// them); the next heartbeat lists them. Taken for gone, a second group
// started beside them (aryl-simtest --daemon --replay 387).
TEST(DrivenDaemon, ARegistrationOlderThanAStartDoesNotLoseItsWorkers) {
  TestCluster c;
  c.AddAgent("t1", p::Pool::kTraining, 2);
  auto job = c.Submit(Fixed(2));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(c.RunUntil([&] { return c.CountWorkers(*job) == 2; }, 5));
  p::AgentRegister before_start = c.agent("t1").session->MakeRegister(c.agent("t1").reg, c.now());
  EXPECT_TRUE(c.Call(before_start, "t1").ok());
  c.Run(10);
  EXPECT_EQ(c.GenerationsStarted(*job), 1) << Kinds(c, *job);
  EXPECT_EQ(c.CountWorkers(*job), 2) << Kinds(c, *job);
  EXPECT_FALSE(HasEvent(c, *job, "worker_exit")) << Kinds(c, *job);
}

// aryl-agent on t1 crashes and systemd starts it again 1 s later, before
// the scheduler timed it out: its workers died with it. The registration of
// the new process (a new instance) makes the scheduler give them up at once
// and, since nothing of the job can run there any more, start the job again
// without waiting out t1's lease; it trains again.
TEST(DrivenDaemon, AnAgentCrashAndQuickRestartRestartsItsJob) {
  TestCluster c;
  c.workers_link_runtime = true;
  c.AddAgent("t1", p::Pool::kTraining, 2);
  auto job = c.Submit(Fixed(2));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  c.Train(*job);
  ASSERT_TRUE(c.RunUntil([&] { return c.Step(*job) > 3; }, 20)) << Kinds(c, *job);
  const int generations = c.GenerationsStarted(*job);
  const auto step = c.Step(*job);
  c.CrashAgent("t1");
  c.Run(1);
  c.agent("t1").down = false;
  const double back = c.now();
  ASSERT_TRUE(c.RunUntil([&] { return c.GenerationsStarted(*job) > generations && c.Step(*job) > step; }, 20))
      << Kinds(c, *job);
  EXPECT_LT(c.now() - back, 10.0) << "waited out a lease no worker could use\n" << Kinds(c, *job);
}

// A start that never reached t2 is given up while the state disk is full
// (t2 hears again: its heartbeats carry an acknowledgement newer than the
// start, start_confirm.h): the give-up cannot be recorded, and the failed
// write reloads the job with those workers. They come back unconfirmed, so
// they are given up again until it can be recorded, and the job forms on the
// other workers' start. Reloaded as confirmed, the job waited for them for
// ever (aryl-simtest --daemon --replay 17, 144, 259, 292, 434).
TEST(DrivenDaemon, AStartGivenUpWhileTheDiskIsFullStaysGivenUp) {
  FullDiskStore* store = nullptr;
  TestCluster c(DrivenCluster::Defaults(), FullDisk(&store));
  auto job = StartWhileT2IsDeaf(c);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  *store->full = true;
  c.agent("t2").deaf = false;
  c.Run(15);
  EXPECT_GT(store->refused, 0);
  *store->full = false;
  ASSERT_TRUE(c.RunUntil([&] { return c.Formed(*job) > 0 && c.Step(*job) > 0; }, 60)) << Kinds(c, *job);
  EXPECT_EQ(c.CountWorkers(*job), 4);
}

}  // namespace
}  // namespace aryl::daemon::testing
