// Fault tests of the highly available control plane: a real three-member etcd
// cluster on loopback (tests/system/etcd_cluster.h), two aryl-schedulers
// sharing its prefix, real agents and an elastic_mlp job training on them.
// What must hold (docs/architecture.md, "High availability"): a standby leads
// within a few seconds of the leader's death, the job keeps its workers (the
// same processes: no worker is started again) and trains to its end once;
// a submission made during the failover lands exactly once; a leader paused
// past its lease finds itself deposed; a lost etcd quorum freezes the
// scheduler (it says so) while the workers keep training, and scheduling
// resumes when the quorum is back; a leader cut off the network past its
// lease steps down when it is back; a reclaim accepted just before the
// leader's death still meets its deadline under the new leader.
//
// Needs etcd (Debian etcd-server): without it each test skips and says why.
// The partition test also needs network namespaces (root; tests/system/netns.h).
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "aryl/protocol/scheduler_client.h"
#include "chaos_fixture.h"
#include "etcd_cluster.h"
#include "netns.h"
#include "scrape.h"

namespace aryl {
namespace {

using namespace aryl::chaostest;  // NOLINT

constexpr int kLeaseTtl = 2;

class HaChaos : public ChaosTest {
 protected:
  void SetUp() override {
    ChaosTest::SetUp();
    if (!fs::exists("/usr/bin/etcd")) {
      result_recorded_ = true;
      GTEST_SKIP() << "etcd is not installed (Debian package etcd-server; ./dev installs it)";
    }
    if (partitioned_) {
      // Scheduler 0 in its own network namespace: it reaches etcd, the agents
      // and the clients over a bridge, and Cut(0) partitions it from all.
      if (auto why = livetest::Netns::Unavailable()) {
        std::printf("SKIPPED: %s\n", why->c_str());
        result_recorded_ = true;
        GTEST_SKIP() << *why;
      }
      net_ = std::make_unique<livetest::Netns>(1);
      ASSERT_TRUE(net_->ok()) << "could not set up the network namespace and the bridge";
      etcd_.AlsoListenOn(net_->SchedulerAddress());
      exec_[0] = net_->Exec(0);
      etcd_host_[0] = net_->SchedulerAddress();
    }
    aryl::Status st = etcd_.Start(3);
    ASSERT_TRUE(st.ok()) << st << "\n" << etcd_.Log(0);
    for (int i = 0; i < 2; ++i) {
      ports_[i] = FreePort();
      http_[i] = FreePort();
      endpoints_[i] = "tcp://127.0.0.1:" + std::to_string(ports_[i]);
    }
    if (net_) endpoints_[0] = "tcp://" + net_->Address(0) + ":" + std::to_string(ports_[0]);
    endpoint_ = endpoints_[0] + "," + endpoints_[1];  // what agents are given
    agent_lease_ = "60";
  }
  void TearDown() override {
    ChaosTest::TearDown();  // stops the processes before their namespace goes
    net_.reset();
  }

  pid_t StartHaScheduler(int i) {
    agent::LaunchSpec spec;
    spec.argv = exec_[i];
    spec.argv.insert(spec.argv.end(), {ARYL_SCHEDULER_BIN, "--endpoint", endpoints_[i], "--state",
                 etcd_.EtcdUrl("aryl-ha", etcd_host_[i]),
                 "--lease-ttl", std::to_string(kLeaseTtl), "--etcd-timeout", "1", "--http-port",
                 std::to_string(http_[i]), "--heartbeat", "0.2", "--agent-timeout", "3", "--agent-lease",
                 agent_lease_, "--stop-grace", "2", "--insecure", "--log-level", "debug"});
    spec.stdout_path = (dir_ / ("scheduler-" + std::to_string(i) + ".log")).string();
    auto pid = launcher_.Launch(spec);
    EXPECT_TRUE(pid.ok()) << pid.status();
    pids_[i] = pid.ok() ? *pid : 0;
    return pids_[i];
  }

  // The scheduler that answers as leader now (-1: none), and a client to it.
  int Leader(std::unique_ptr<p::Client>* client = nullptr) {
    for (int i = 0; i < 2; ++i) {
      if (!alive_[i]) continue;
      p::Client::Options o;
      o.endpoint = endpoints_[i];
      auto c = p::Client::Connect(o);
      if (!c.ok()) continue;
      auto r = (*c)->Call<p::NodesReply>(p::ListNodes{}, milliseconds(400));
      if (r.ok()) {
        if (client) *client = std::move(*c);
        return i;
      }
    }
    return -1;
  }

  int WaitLeader(double timeout_s, std::unique_ptr<p::Client>* client = nullptr) {
    int who = -1;
    WaitFor([&] { return (who = Leader(client)) >= 0; }, timeout_s);
    return who;
  }

  // Two schedulers (0 leads), agents a1 and a2 of 2 slots and a3 of 1 (the
  // slot a submission during the failover takes), and a training job on 4
  // workers past step 50.
  void StartTrainingHa(std::unique_ptr<p::Client>* c, p::JobId* job) {
    StartHaScheduler(0);
    ASSERT_EQ(WaitLeader(20, c), 0) << Logs();
    StartHaScheduler(1);
    StartAgent("a1", 2);
    StartAgent("a2", 2);
    StartAgent("a3", 1);
    ASSERT_TRUE(WaitAgents(**c, 3, 20)) << Logs();
    auto submitted = SubmitTraining(**c, 1, 4, /*sleep_ms=*/15);
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    *job = *submitted;
    ASSERT_TRUE(WaitTraining(**c, *job, 4, 50, 90)) << Logs();
  }

  // Jobs the leader lists with this name.
  int JobsNamed(p::Client& c, const std::string& name) {
    auto r = c.Call<p::JobsReply>(p::ListJobs{}, milliseconds(2000));
    if (!r.ok()) return -1;
    int n = 0;
    for (const auto& row : r->jobs) n += row.name == name;
    return n;
  }

  std::string Logs() {
    return LiveCluster::Logs() + "\n==== etcd member 0\n" + etcd_.Log(0).substr(0, 4000);
  }

  // The paused or partitioned scheduler 0, back, is a standby: it said so
  // and answers with the new leader's address.
  void ExpectSteppedDown() {
    std::string log0;
    ASSERT_TRUE(WaitFor([&] {
      log0 = ReadFile(dir_ / "scheduler-0.log");
      return log0.find("standby again") != std::string::npos;
    }, 15)) << Logs();
    p::Client::Options o;
    o.endpoint = endpoints_[0];
    auto old = p::Client::Connect(o);
    ASSERT_TRUE(old.ok());
    // Right after stepping down it campaigns again, and until that first
    // read of the leader key it says "no leader is known yet" (a client then
    // tries the next endpoint); within a few seconds it names the leader.
    aryl::Status last;
    bool names = WaitFor([&] {
      auto r = (*old)->Call<p::NodesReply>(p::ListNodes{}, milliseconds(1000));
      EXPECT_FALSE(r.ok()) << "the deposed scheduler answered as leader";
      if (r.ok()) return true;
      last = r.status();
      return last.message().find(endpoints_[1]) != std::string::npos;
    }, 5);
    EXPECT_TRUE(names) << last;
    EXPECT_EQ(Leader(), 1);
  }

  // The longer fault runs: `./dev chaos N` (ARYL_CHAOS_RESULTS set), not CI.
  bool ChaosOnly() {
    if (std::getenv("ARYL_CHAOS_RESULTS")) return false;
    result_recorded_ = true;
    return true;
  }

  livetest::EtcdCluster etcd_;
  bool partitioned_ = false;  // set by HaPartition
  std::unique_ptr<livetest::Netns> net_;
  std::vector<std::string> exec_[2];  // argv prefix: the namespace to run in
  std::string etcd_host_[2] = {"127.0.0.1", "127.0.0.1"};
  int ports_[2] = {0, 0}, http_[2] = {0, 0};
  std::string endpoints_[2];
  pid_t pids_[2] = {0, 0};
  bool alive_[2] = {true, true};
};

// SIGKILL of the leader: the standby leads within the lease TTL plus an
// election, the job keeps its four worker processes and ends once, and a
// submission sent (with its client token, as aryl-run does) while nobody led
// is accepted exactly once.
TEST_F(HaChaos, LeaderKilledStandbyTakesOver) {
  std::unique_ptr<p::Client> c;
  p::JobId job = 0;
  ASSERT_NO_FATAL_FAILURE(StartTrainingHa(&c, &job));
  int starts = WorkerStarts(job);
  c.reset();
  auto t0 = Clock::now();
  Kill(pids_[0]);
  alive_[0] = false;
  // The retrying client: the same SubmitJob, same token, to every endpoint
  // until one accepts it.
  p::SubmitJob m;
  m.argv = {"/bin/sh", "-c", "sleep 1"};
  m.workers = 1;
  m.name = "during-failover";
  m.client_token = "failover-token-1";
  double accepted_at = -1;
  for (int attempt = 0; attempt < 200 && accepted_at < 0; ++attempt) {
    for (int i = 0; i < 2 && accepted_at < 0; ++i) {
      p::Client::Options o;
      o.endpoint = endpoints_[i];
      auto cl = p::Client::Connect(o);
      if (!cl.ok()) continue;
      auto r = (*cl)->Call<p::SubmitReply>(m, milliseconds(300));
      if (r.ok()) accepted_at = std::chrono::duration<double>(Clock::now() - t0).count();
      // A refusal says why: the standby names the leader, or says there is none yet.
      else EXPECT_TRUE(r.status().IsUnavailable() || r.status().IsTimeout()) << r.status();
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_GE(accepted_at, 0) << "no scheduler took the submission\n" << Logs();
  int leader = WaitLeader(10, &c);
  double failover_s = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_EQ(leader, 1) << Logs();
  std::printf("failover: the standby answered as leader %.2f s after the SIGKILL (submission accepted at %.2f s)\n",
              failover_s, accepted_at);
  EXPECT_LT(accepted_at, kLeaseTtl + 6.0) << Logs();
  // The same submission once more, as a client that timed out would resend it.
  auto again = c->Call<p::SubmitReply>(m, milliseconds(2000));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobsNamed(*c, "during-failover"), 1) << Logs();
  // `aryl status` names who leads, the dead one, the term and etcd's members.
  std::string cmd = std::string(ARYL_CLI_BIN) + " --scheduler " + endpoint_ + " --timeout 4 status -o json";
  std::string text;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    ::pclose(f);
  }
  auto st = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(st.is_object()) << cmd << ": " << text;
  EXPECT_EQ(st["schedulers"][0]["role"], "unreachable") << text;
  EXPECT_EQ(st["schedulers"][1]["role"], "leading") << text;
  EXPECT_GT(st["ha"]["term"].get<std::uint64_t>(), 0u) << text;
  EXPECT_EQ(st["ha"]["etcd"].size(), 3u) << text;
  // The new leader's series: it leads, it saw scheduler 0 lead and then won
  // itself (two changes), and etcd's round trip is measured.
  EXPECT_TRUE(WaitFor([&] { return ScrapeValue(http_[1], "aryl_leader") == 1; }, 5));
  EXPECT_GE(ScrapeValue(http_[1], "aryl_leader_changes_total"), 2);
  const double rtt = ScrapeValue(http_[1], "aryl_etcd_round_trip_seconds");
  EXPECT_GT(rtt, 0);
  EXPECT_LT(rtt, 1.0);
  p::JobState end = FollowToEnd(*c, job, 180);
  Outcome o = ReadOutcome(job);
  int done = DoneLines(job);
  bool same = WorkerStarts(job) == starts;
  Record(end == p::JobState::kCompleted && o.done_steps == kSteps && done == 1 && same, o.steps_lost, max_pause_s_,
         "\"failover_s\":" + std::to_string(accepted_at));
  EXPECT_EQ(p::ToString(end), "completed") << Logs();
  EXPECT_EQ(done, 1) << Logs();
  EXPECT_TRUE(same) << "workers were started again after the failover\n" << Logs();
  EXPECT_EQ(o.steps_lost, 0) << Logs();
}

// SIGSTOP of the leader for longer than its lease, then SIGCONT: the standby
// leads meanwhile; the old leader finds its lease gone and steps down to a
// standby; no worker is started twice and the job ends once.
TEST_F(HaChaos, PausedLeaderIsDeposed) {
  // ~30 s: the CI suite runs two HA tests; `./dev chaos N` runs them all.
  if (ChaosOnly()) GTEST_SKIP() << "run by ./dev chaos N (ARYL_CHAOS_RESULTS set), not by the CI suite";
  std::unique_ptr<p::Client> c;
  p::JobId job = 0;
  ASSERT_NO_FATAL_FAILURE(StartTrainingHa(&c, &job));
  int starts = WorkerStarts(job);
  c.reset();
  ASSERT_EQ(::kill(pids_[0], SIGSTOP), 0);
  alive_[0] = false;
  int leader = WaitLeader(kLeaseTtl + 10, &c);
  ASSERT_EQ(leader, 1) << Logs();
  std::this_thread::sleep_for(milliseconds(1000));
  ::kill(pids_[0], SIGCONT);
  alive_[0] = true;
  ASSERT_NO_FATAL_FAILURE(ExpectSteppedDown());
  ExpectCompletedOnce(*c, job, 180, WorkerStarts(job) == starts);
  EXPECT_EQ(WorkerStarts(job), starts) << "workers were started again\n" << Logs();
}

// One etcd member killed: nothing changes. Two of three: the leader stops
// deciding and says so while the job keeps training past the agents' lease;
// with the members back, it decides again without a restart.
TEST_F(HaChaos, QuorumLostFreezesThenResumes) {
  agent_lease_ = "8";
  std::unique_ptr<p::Client> c;
  p::JobId job = 0;
  ASSERT_NO_FATAL_FAILURE(StartTrainingHa(&c, &job));
  int starts = WorkerStarts(job);
  // The raft leader, the member whose loss etcd notices last: the members
  // left hold requests until they elect a new one (about a second), and the
  // scheduler's write of a submission sent now waits on that election.
  const int first = etcd_.RaftLeader(10);
  ASSERT_GE(first, 0) << "no etcd member says it leads";
  const int second = (first + 1) % 3;
  etcd_.Kill(first);
  // A user's submission, sent as `aryl submit` sends it (every scheduler, a
  // client token, retried while the leader says it is frozen or that a state
  // write did not land), lands once.
  auto submit_as_cli = [&](const std::string& name) -> Result<p::SubmitReply> {
    p::SchedulerClient::Options so;
    so.endpoints = {endpoints_[0], endpoints_[1]};
    so.total_timeout = milliseconds(20000);
    ARYL_ASSIGN_OR_RETURN(auto sc, p::SchedulerClient::Connect(so));
    p::SubmitJob m;
    m.argv = {"/bin/sh", "-c", "sleep 0.5"};
    m.workers = 1;
    m.name = name;
    m.client_token = name + "-1";
    return sc->Call<p::SubmitReply>(m, milliseconds(3000));
  };
  {
    auto t0 = Clock::now();
    auto one = submit_as_cli("one-member-down");
    ASSERT_TRUE(one.ok()) << "one etcd member down must not matter: " << one.status() << "\n" << Logs();
    std::printf("raft leader m%d killed: the submission was accepted after %.2f s\n", first,
                std::chrono::duration<double>(Clock::now() - t0).count());
    EXPECT_EQ(JobsNamed(*c, "one-member-down"), 1) << Logs();
  }
  etcd_.Kill(second);
  // Frozen: requests are refused with the reason, heartbeats still acked.
  std::string why;
  ASSERT_TRUE(WaitFor([&] {
    auto r = c->Call<p::NodesReply>(p::ListNodes{}, milliseconds(1000));
    if (r.ok()) return false;
    why = r.status().message();
    return r.status().IsUnavailable();
  }, 15)) << Logs();
  EXPECT_NE(why.find("cannot decide"), std::string::npos) << why;
  std::this_thread::sleep_for(milliseconds(10000));  // past the agents' 8 s lease
  ASSERT_TRUE(etcd_.Restart(second).ok()) << etcd_.Log(second);
  ASSERT_TRUE(etcd_.Restart(first).ok()) << etcd_.Log(first);
  std::unique_ptr<p::Client> c2;
  ASSERT_GE(WaitLeader(30, &c2), 0) << Logs();
  // The workers rode it out: none was stopped by its lease or started again.
  const bool kept = WorkerStarts(job) == starts;
  EXPECT_TRUE(kept) << "workers were started again after the quorum loss\n" << Logs();
  for (const char* a : {"a1", "a2", "a3"})
    EXPECT_EQ(ReadFile(dir_ / ("agent-" + std::string(a) + ".log")).find("(the lease): stopping"), std::string::npos)
        << a << " stopped its workers\n" << Logs();
  // The first write after the outage may find one of its transactions
  // landed late (the state is read again): refused as "retry", and retried.
  auto two = submit_as_cli("after-the-outage");
  EXPECT_TRUE(two.ok()) << two.status() << "\n" << Logs();
  EXPECT_EQ(JobsNamed(*c2, "after-the-outage"), 1) << Logs();
  ExpectCompletedOnce(*c2, job, 180, kept);
}

class HaPartition : public HaChaos {
 protected:
  HaPartition() { partitioned_ = true; }
};

// The leader's link goes down (a partition from etcd, the agents and the
// clients) for longer than its lease: it stops deciding, the standby leads and
// the agents follow it; back on the network, the old leader finds its term
// over and steps down. No worker is started again and the job ends once.
TEST_F(HaPartition, PartitionedLeaderIsDeposed) {
  if (ChaosOnly()) GTEST_SKIP() << "run by ./dev chaos N (ARYL_CHAOS_RESULTS set), not by the CI suite";
  std::unique_ptr<p::Client> c;
  p::JobId job = 0;
  ASSERT_NO_FATAL_FAILURE(StartTrainingHa(&c, &job));
  int starts = WorkerStarts(job);
  c.reset();
  auto t0 = Clock::now();
  ASSERT_TRUE(net_->Cut(0));
  alive_[0] = false;
  ASSERT_EQ(WaitLeader(kLeaseTtl + 10, &c), 1) << Logs();
  const double failover_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // Cut off, it stopped deciding on its own (its lease could not be renewed).
  EXPECT_TRUE(WaitFor([&] { return ReadFile(dir_ / "scheduler-0.log").find("not deciding") != std::string::npos; }, 5))
      << Logs();
  // Every agent follows the new leader before the old one is back.
  ASSERT_TRUE(WaitAgents(*c, 3, 15)) << Logs();
  std::this_thread::sleep_for(milliseconds(1000));
  ASSERT_TRUE(net_->Heal(0));
  alive_[0] = true;
  ASSERT_NO_FATAL_FAILURE(ExpectSteppedDown());
  std::printf("partition: the standby answered as leader %.2f s after the cut\n", failover_s);
  p::JobState end = FollowToEnd(*c, job, 180);
  Outcome o = ReadOutcome(job);
  const bool same = WorkerStarts(job) == starts;
  Record(end == p::JobState::kCompleted && o.done_steps == kSteps && DoneLines(job) == 1 && same, o.steps_lost,
         max_pause_s_, "\"failover_s\":" + std::to_string(failover_s));
  EXPECT_EQ(p::ToString(end), "completed") << Logs();
  EXPECT_EQ(DoneLines(job), 1) << Logs();
  EXPECT_TRUE(same) << "workers were started again after the partition\n" << Logs();
}

// A reclaim accepted just before the leader dies: the new leader rebuilds it
// from the journal (its deadline is absolute) and the server is back by the
// deadline. The loaned job says it ends soon (8 steps) but runs on, so it is
// left at first and must leave the server at deadline minus checkpoint time,
// under the new leader.
TEST_F(HaChaos, ReclaimInFlightMeetsItsDeadline) {
  if (ChaosOnly()) GTEST_SKIP() << "run by ./dev chaos N (ARYL_CHAOS_RESULTS set), not by the CI suite";
  constexpr double kDeadline = 12;
  std::unique_ptr<p::Client> c;
  StartHaScheduler(0);
  ASSERT_EQ(WaitLeader(20, &c), 0) << Logs();
  StartHaScheduler(1);
  StartAgent("t", 2);
  StartAgent("i", 2, "inference");
  ASSERT_TRUE(WaitAgents(*c, 2, 20)) << Logs();
  p::PoolOffer offer;
  offer.servers = {"i"};
  auto ok = c->Call<p::Ok>(offer, milliseconds(3000));
  ASSERT_TRUE(ok.ok()) << ok.status();
  p::SubmitJob m;
  m.argv = {"sh", "-c", "sleep 90"};
  m.min_workers = 1;
  m.max_workers = 4;
  m.elastic = "inplace";
  m.total_work = 8;
  auto r = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_TRUE(r.ok()) << r.status();
  const p::JobId job = r->job;
  ASSERT_TRUE(WaitFor([&] {
    auto s = Status(*c, job);
    return s.ok() && s->row.state == p::JobState::kRunning && s->row.workers == 4;
  }, 20)) << Logs();
  p::PoolReclaim reclaim;
  reclaim.servers = {"i"};
  reclaim.deadline_seconds = kDeadline;
  const auto t0 = Clock::now();
  auto accepted = c->Call<p::Ok>(reclaim, milliseconds(3000));
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  c.reset();
  Kill(pids_[0]);
  alive_[0] = false;
  ASSERT_EQ(WaitLeader(10, &c), 1) << Logs();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const double led_at = since();
  auto held = [&] {
    auto n = c->Call<p::NodesReply>(p::ListNodes{}, milliseconds(1000));
    if (n.ok())
      for (const auto& row : n->nodes)
        if (row.agent_id == "i") return row.state == p::NodeState::kHeld;
    return false;
  };
  ASSERT_TRUE(WaitFor(held, kDeadline + 10)) << Logs();
  const double back = since();
  std::printf("reclaim across a failover: new leader at %.2f s, server back after %.2f s (deadline %.0f s)\n",
              led_at, back, kDeadline);
  auto s = Status(*c, job);
  ASSERT_TRUE(s.ok()) << s.status();
  const bool on_time = back <= kDeadline + 0.5;
  const double late = ScrapeValue(http_[1], "aryl_reclaims_late_total");
  Record(on_time && late == 0 && s->row.state == p::JobState::kRunning, 0, 0,
         "\"failover_s\":" + std::to_string(led_at) + ",\"reclaim_back_s\":" + std::to_string(back));
  EXPECT_TRUE(on_time) << "the server came back " << back << " s after a " << kDeadline << " s reclaim\n" << Logs();
  EXPECT_EQ(late, 0) << Logs();
  EXPECT_EQ(s->row.state, p::JobState::kRunning) << "the job shrinks off the server, it does not end\n" << Logs();
  EXPECT_EQ(s->row.workers, 2) << Logs();
}

}  // namespace
}  // namespace aryl
