// What the agent decides on its scheduler's commands, its lease and its
// workers' ends (agent_core.h), over a recording host and link.
#include <gtest/gtest.h>

#include <signal.h>

#include <map>
#include <vector>

#include "agent_core.h"

namespace aryl::agent {
namespace {

namespace p = aryl::protocol;

class Link final : public SchedulerLink {
 public:
  bool registered() const override { return up; }
  void Send(const p::Message& m) override { sent.push_back(m); }
  SchedulerLease& lease() override { return held; }
  bool up = true;
  SchedulerLease held;
  std::vector<p::Message> sent;
};

// Records every act on the workers: "term <pid> <grace>", "kill <pid>", "push <pid> <type>".
class Host final : public WorkerHost {
 public:
  void Starting(const p::StartWorkers&) override {}
  Result<StartedWorker> Launch(const p::StartWorkers&, const p::WorkerPlacement& wp) override {
    if (refuse.count(wp.worker)) return Status::NotFound("no such program");
    StartedWorker w;
    w.pid = next++;
    w.identity = "worker-" + std::to_string(wp.worker);
    return w;
  }
  void RequestStop(pid_t pid, double grace) override { acts.push_back("term " + std::to_string(pid) + " " + Num(grace)); }
  void Kill(pid_t pid) override { acts.push_back("kill " + std::to_string(pid)); }
  void Notify(const LocalWorker&, double, const std::string&) override {}
  void Push(const LocalWorker& w, const p::Message& m) override {
    acts.push_back("push " + std::to_string(w.pid) + " " + std::string(p::TypeName(m)));
  }
  WorkerEnding TakeEnding(const LocalWorker&) override { return {}; }
  void Ended(const LocalWorker&, bool) override {}
  static std::string Num(double v) { return std::to_string(static_cast<int>(v)); }
  std::set<p::WorkerId> refuse;
  std::vector<std::string> acts;
  pid_t next = 500;
};

struct Fixture {
  ManualClock clock{1000};
  Link link;
  Host host;
  AgentCore core{Self(), 30, clock, link, host};
  static p::AgentRegister Self() {
    p::AgentRegister r;
    r.agent_id = "a1";
    r.slots = 4;
    return r;
  }
  Fixture() { link.held.Renew(clock.NowSeconds(), 20); }
};

p::StartWorkers Start(std::int64_t generation, std::vector<p::WorkerId> members) {
  p::StartWorkers m;
  m.job = 7;
  m.generation = generation;
  m.members = members;
  for (std::size_t i = 0; i < members.size(); ++i)
    m.workers.push_back({members[i], static_cast<std::int64_t>(i), static_cast<std::int64_t>(i)});
  m.argv = {"train.py"};
  return m;
}

// Workers start once; a start of an older generation and one without a lease are refused.
TEST(AgentCore, StartsOnceAndRefusesStaleOrLeaselessStarts) {
  Fixture f;
  f.core.OnStart(Start(2, {10, 11}));
  f.core.OnStart(Start(2, {10, 11}));  // a duplicate: nothing twice
  EXPECT_EQ(f.core.workers().size(), 2u);
  f.core.OnStart(Start(1, {12}));  // overtaken
  EXPECT_FALSE(f.core.workers().Runs(7, 12));
  f.link.held.Drop();
  f.core.OnStart(Start(3, {13}));
  EXPECT_FALSE(f.core.workers().Runs(7, 13));
  p::Heartbeat hb = f.core.HeartbeatMessage();
  EXPECT_EQ(hb.free_slots, 2);
  EXPECT_EQ(hb.workers.size(), 2u);
}

// A late or repeated copy of a start reaches the agent after the worker
// ended (a duplicate on the wire, delayed past the worker's stop): the worker
// is not run again beside its job's next generation. A launch that failed is
// not tried again either.
TEST(AgentCore, AStartOfAWorkerThatAlreadyRanHereIsRefused) {
  Fixture f;
  f.host.refuse = {12};
  f.core.OnStart(Start(2, {10, 11, 12}));
  ASSERT_EQ(f.core.workers().size(), 2u);
  ExitInfo ex;
  ex.pid = 501;  // worker 11
  ex.signal = SIGKILL;
  f.core.OnExit(ex);
  ASSERT_FALSE(f.core.workers().Runs(7, 11));
  f.core.OnStart(Start(2, {10, 11, 12}));  // the late copy
  EXPECT_FALSE(f.core.workers().Runs(7, 11));
  EXPECT_EQ(f.core.workers().size(), 1u);
  EXPECT_EQ(f.host.next, 502) << "nothing launched again";
  int exits127 = 0;
  for (const auto& m : f.link.sent)
    if (auto* e = std::get_if<p::WorkerExited>(&m); e && e->exit_code == 127) ++exits127;
  EXPECT_EQ(exits127, 1);
  f.core.OnStart(Start(2, {13}));  // a new worker of the same generation starts
  EXPECT_TRUE(f.core.workers().Runs(7, 13));
}

// A worker that cannot start is reported as exit 127, kept until acknowledged.
TEST(AgentCore, ALaunchFailureIsAnExitKeptUntilAcknowledged) {
  Fixture f;
  f.host.refuse = {11};
  f.core.OnStart(Start(1, {10, 11}));
  ASSERT_EQ(f.link.sent.size(), 1u);
  const auto& e = std::get<p::WorkerExited>(f.link.sent[0]);
  EXPECT_EQ(e.worker, 11);
  EXPECT_EQ(e.exit_code, 127);
  EXPECT_EQ(f.core.RegisterMessage().exited.size(), 1u);
  f.core.OnCommand(p::WorkerExitAck{7, 11});
  EXPECT_TRUE(f.core.exits().empty());
}

// Two stops: one SIGTERM, the SIGKILL moved to the earlier deadline; a stop
// without grace kills at once, and a killed worker is asked nothing more.
TEST(AgentCore, StopsThroughEachWorkersLife) {
  Fixture f;
  f.core.OnStart(Start(1, {10, 11}));
  p::StopWorkers stop;
  stop.job = 7;
  stop.workers = {10};
  stop.grace_seconds = 30;
  stop.checkpoint_first = true;
  f.core.OnStop(stop);
  stop.grace_seconds = 5;
  f.core.OnStop(stop);
  const LocalWorker* w10 = f.core.workers().Of(7, {10}).at(0);
  EXPECT_EQ(w10->life.state(), WorkerLife::State::kStopping);
  EXPECT_DOUBLE_EQ(w10->life.kill_at(), 1005);
  stop.workers = {11};
  stop.grace_seconds = 0;
  stop.checkpoint_first = false;
  f.core.OnStop(stop);
  f.core.OnStop(stop);
  EXPECT_EQ(f.host.acts, (std::vector<std::string>{"push 500 worker_checkpoint_request", "term 500 30",
                                                   "push 500 worker_checkpoint_request", "term 500 5", "kill 501",
                                                   "term 501 0"}));
}

// The lease runs out: every worker is asked to checkpoint and is stopped
// with kLeaseStopGraceSeconds; its exit is reported once registered again.
TEST(AgentCore, ALapsedLeaseStopsEveryWorker) {
  Fixture f;
  f.core.OnStart(Start(1, {10}));
  f.clock.Advance(19);
  f.core.Tick();
  EXPECT_TRUE(f.host.acts.empty());
  f.clock.Advance(1);
  f.link.up = false;
  f.core.Tick();
  EXPECT_EQ(f.host.acts, (std::vector<std::string>{"push 500 worker_checkpoint_request",
                                                   "term 500 " + Host::Num(p::kLeaseStopGraceSeconds)}));
  EXPECT_FALSE(f.link.held.held());
  ExitInfo ex;
  ex.pid = 500;
  ex.signal = SIGTERM;
  f.core.OnExit(ex);
  EXPECT_TRUE(f.link.sent.empty());  // not registered: kept
  EXPECT_TRUE(f.core.workers().empty());
  f.link.up = true;
  f.clock.Advance(ExitBook::kResendSeconds);
  f.core.Tick();
  ASSERT_EQ(f.link.sent.size(), 1u);
  EXPECT_EQ(std::get<p::WorkerExited>(f.link.sent[0]).signal, SIGTERM);
}

// A leaver still running past leave_timeout is stopped with kOverdueGrace.
TEST(AgentCore, AnOverdueLeaverIsStopped) {
  Fixture f;
  f.core.OnStart(Start(1, {10, 11}));
  p::NewGeneration g;
  g.job = 7;
  g.generation = 2;
  g.members = {10};
  g.leaving = {11};
  EXPECT_TRUE(f.core.OnNewGeneration(g));
  EXPECT_EQ(f.core.workers().Of(7, {10}).at(0)->generation, 2);
  g.generation = 1;
  EXPECT_FALSE(f.core.OnNewGeneration(g));  // stale
  f.link.held.Renew(f.clock.NowSeconds() + 100, 20);
  f.clock.Advance(31);
  f.core.Tick();
  EXPECT_EQ(f.host.acts, (std::vector<std::string>{"term 501 " + Host::Num(WorkerLife::kOverdueGrace)}));
}

}  // namespace
}  // namespace aryl::agent
