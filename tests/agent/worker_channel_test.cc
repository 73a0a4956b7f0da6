// The agent's worker channel (protocol/messages.h steps 12-16) against a fake
// scheduler (a protocol Server) and a fake worker (a Client that speaks as the
// runtime's AgentChannel does), with a real aryl_agent loop and real processes.
#include <gtest/gtest.h>

#include <functional>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "aryl/agent/agent.h"
#include "aryl/protocol/generation.h"
#include "aryl/protocol/messages.h"
#include "aryl/protocol/scheduler_client.h"
#include "aryl/protocol/store.h"
#include "aryl/protocol/transport.h"

namespace aryl::agent {
namespace {

namespace fs = std::filesystem;
namespace p = aryl::protocol;
using std::chrono::milliseconds;

template <typename F>
bool WaitFor(F pred, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return pred();
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Plays the scheduler: answers AgentRegister and keeps what the agent sends.
class FakeScheduler {
 public:
  // `term`: the term its AgentRegistered carries.
  explicit FakeScheduler(std::uint64_t term = 0) {
    p::Server::Options o;
    o.endpoint = "tcp://127.0.0.1:*";
    auto s = p::Server::Start(o, [this, term](const p::ReplyTo& from, p::Message m) -> std::optional<p::Message> {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto* r = std::get_if<p::AgentRegister>(&m)) {
        store_endpoint_ = r->store_endpoint;
        routes_[r->agent_id] = from.peer.identity;  // "<id>#<nonce>"
        p::AgentRegistered reply;
        reply.agent_id = r->agent_id;
        reply.heartbeat_interval_seconds = 0.2;
        reply.scheduler_epoch = 1;
        reply.store_key = "0123456789abcdef";  // the agent's store checks job tokens with it
        reply.term = term;
        ++registrations_;
        return reply;
      }
      received_.push_back(std::move(m));
      return std::nullopt;
    });
    EXPECT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  const std::string& endpoint() const { return server_->endpoint(); }
  int registrations() {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_;
  }
  std::string store_endpoint() {
    std::lock_guard<std::mutex> lock(mu_);
    return store_endpoint_;
  }
  // The first message of type T received (that `match` accepts).
  template <typename T>
  std::optional<T> Find(const std::function<bool(const T&)>& match = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& m : received_)
      if (auto* t = std::get_if<T>(&m); t && (!match || match(*t))) return *t;
    return std::nullopt;
  }
  Status Push(const std::string& agent, const p::Message& m) {
    std::string route;
    {
      std::lock_guard<std::mutex> lock(mu_);
      route = routes_.count(agent) ? routes_[agent] : agent;
    }
    return server_->Push(route, m);
  }

 private:
  std::mutex mu_;
  int registrations_ = 0;
  std::string store_endpoint_;
  std::map<std::string, std::string> routes_;
  std::vector<p::Message> received_;
  std::unique_ptr<p::Server> server_;
};

// A worker's side of the channel, as the runtime's AgentChannel speaks it.
template <typename T>
Result<T> NextPush(p::Client& c, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    auto m = c.Receive(milliseconds(50));
    if (!m.ok()) continue;
    if (auto* t = std::get_if<T>(&*m)) return *t;
  }
  return Status::Timeout("no " + std::string(T::kType) + " pushed");
}

// The agent serves the worker channel: a worker started for generation G gets
// G's members from WorkerHello; a resize is pushed as GenerationAnnounce once
// the joiner is ready; rank 0's reports and progress reach the scheduler; a
// stop with checkpoint_first is relayed as WorkerCheckpointRequest.
TEST(AgentWorkerChannel, AnnouncesRelaysAndReports) {
  fs::path dir = fs::temp_directory_path() / ("aryl-agent-channel-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  FakeScheduler sched;
  AgentOptions opt;
  opt.scheduler = sched.endpoint();
  opt.id = "a1";
  opt.host = "127.0.0.1";
  opt.slots = 2;
  opt.gpu_type = "cpu";
  opt.log_dir = (dir / "logs").string();
  auto agent = Agent::Create(opt);
  ASSERT_TRUE(agent.ok()) << agent.status();
  std::thread loop([&] { (void)(*agent)->Run(); });
  ASSERT_TRUE(WaitFor([&] { return !sched.store_endpoint().empty(); }, 10));
  const std::string store = sched.store_endpoint();

  // Generation 1: worker 0 alone. It records the environment it was given.
  p::StartWorkers sw;
  sw.job = 7;
  sw.generation = 1;
  sw.workers = {{0, 0, 0}};
  sw.members = {0};
  sw.argv = {"/bin/sh", "-c",
             "echo \"$ARYL_AGENT_ENDPOINT $ARYL_JOB_ID $ARYL_CHANNEL_ID\" > " + (dir / "env0").string() + "; sleep 30"};
  sw.store_endpoint = store;
  sw.store_prefix = "7-1";
  ASSERT_TRUE(sched.Push("a1", sw).ok());
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(dir / "env0").empty(); }, 10));
  std::istringstream env0(ReadFile(dir / "env0"));
  std::string endpoint, job_id, channel_id;
  env0 >> endpoint >> job_id >> channel_id;
  // A root agent may run workers as other accounts (keyless local users):
  // its socket lies in a fresh directory they can reach; any other agent's in
  // its private log directory.
  if (::geteuid() == 0)
    EXPECT_EQ(endpoint.rfind("ipc://" + (fs::temp_directory_path() / "aryl-agent-").string(), 0), 0u) << endpoint;
  else
    EXPECT_EQ(endpoint, "ipc://" + (fs::absolute(opt.log_dir) / ".agent-a1" / "worker.sock").string());
  EXPECT_EQ(job_id, "7-1");
  // The identity the agent issued: worker-<job>-<worker>- and 128 random bits.
  EXPECT_EQ(channel_id.rfind("worker-7-1-0-", 0), 0u) << channel_id;
  EXPECT_EQ(channel_id.size(), std::string("worker-7-1-0-").size() + 32) << channel_id;

  p::Client::Options co;
  co.endpoint = endpoint;
  co.identity = channel_id;
  auto worker = p::Client::Connect(co);
  ASSERT_TRUE(worker.ok()) << worker.status();
  p::WorkerHello hello;
  hello.job = 7;
  hello.worker = 0;
  hello.pid = ::getpid();
  hello.generation = p::PlanGeneration(1);  // the store generation of scheduler generation 1
  auto g1 = (*worker)->Call<p::GenerationAnnounce>(hello, milliseconds(3000));
  ASSERT_TRUE(g1.ok()) << g1.status();
  EXPECT_EQ(g1->generation, p::PlanGeneration(1));
  EXPECT_EQ(g1->members, std::vector<p::WorkerId>{0});
  // The hello tells the scheduler at once that the program links the runtime.
  ASSERT_TRUE(WaitFor([&] {
    auto jp = sched.Find<p::JobProgress>([](const p::JobProgress& m) { return m.runtime.value_or(false); });
    return jp && jp->job == 7 && jp->step == 0;
  }, 5));
  hello.generation = 9;
  EXPECT_FALSE((*worker)->Call<p::GenerationAnnounce>(hello, milliseconds(3000)).ok());

  // A grow to {0, 1}: announced only once the joiner set its ready key.
  p::Client::Options so;
  so.endpoint = store;
  auto sc = p::StoreClient::Connect(so);
  ASSERT_TRUE(sc.ok()) << sc.status();
  ASSERT_TRUE((*sc)->Set("aryl/7-1/ready/0", "1", milliseconds(2000)).ok());
  p::NewGeneration ng;
  ng.job = 7;
  ng.generation = 2;
  ng.members = {0, 1};
  ng.store_endpoint = store;
  ng.store_prefix = "7-1";
  ASSERT_TRUE(sched.Push("a1", ng).ok());
  EXPECT_FALSE(NextPush<p::GenerationAnnounce>(**worker, 0.5).ok()) << "announced before the joiner was ready";
  ASSERT_TRUE((*sc)->Set("aryl/7-1/ready/1", "1", milliseconds(2000)).ok());
  auto g2 = NextPush<p::GenerationAnnounce>(**worker, 5);
  ASSERT_TRUE(g2.ok()) << g2.status();
  EXPECT_EQ(g2->generation, p::PlanGeneration(2));
  EXPECT_EQ(g2->members, (std::vector<p::WorkerId>{0, 1}));
  EXPECT_EQ(g2->store_endpoint, store);

  // Rank 0 reports the resize and its progress; the scheduler hears both.
  p::WorkerResizeReport rr;
  rr.job = 7;
  rr.worker = 0;
  rr.generation = p::PlanGeneration(2);
  rr.from_workers = 1;
  rr.to_workers = 2;
  rr.phases.total = 0.125;
  ASSERT_TRUE((*worker)->Send(rr, milliseconds(1000)).ok());
  p::WorkerProgress wp;
  wp.job = 7;
  wp.worker = 0;
  wp.generation = p::PlanGeneration(2);
  wp.step = 42;
  wp.loss = 0.5;
  wp.steps_per_second = 3;
  ASSERT_TRUE((*worker)->Send(wp, milliseconds(1000)).ok());
  ASSERT_TRUE(WaitFor([&] { return sched.Find<p::ResizeReport>().has_value(); }, 5));
  auto rep = *sched.Find<p::ResizeReport>();
  EXPECT_EQ(rep.job, 7u);
  EXPECT_EQ(rep.generation, p::PlanGeneration(2));
  EXPECT_EQ(rep.to_workers, 2);
  EXPECT_DOUBLE_EQ(rep.phases.total, 0.125);
  auto step42 = [](const p::JobProgress& m) { return m.step == 42; };
  ASSERT_TRUE(WaitFor([&] { return sched.Find<p::JobProgress>(step42).has_value(); }, 5));
  EXPECT_DOUBLE_EQ(sched.Find<p::JobProgress>(step42)->loss, 0.5);

  // A preemption: the checkpoint request reaches the worker before SIGTERM.
  p::StopWorkers stop;
  stop.job = 7;
  stop.grace_seconds = 2;
  stop.checkpoint_first = true;
  stop.reason = "preempted";
  ASSERT_TRUE(sched.Push("a1", stop).ok());
  auto ck = NextPush<p::WorkerCheckpointRequest>(**worker, 5);
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_TRUE(ck->stop_after);
  EXPECT_EQ(ck->reason, "preempted");
  ASSERT_TRUE(WaitFor([&] { return (*agent)->running_workers() == 0; }, 10));

  (*agent)->Stop();
  loop.join();
  agent->reset();
  EXPECT_FALSE(fs::exists(fs::absolute(opt.log_dir) / "agent-a1.sock"));
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// Term fencing (messages.h): after a command of term 5, a StartWorkers of
// term 4 (a deposed leader's) or of no term starts nothing; one of term 6
// starts its worker.
TEST(AgentTermFencing, RefusesCommandsOfALowerTerm) {
  fs::path dir = fs::temp_directory_path() / ("aryl-agent-term-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  FakeScheduler sched(2);
  AgentOptions opt;
  opt.scheduler = sched.endpoint();
  opt.id = "t1";
  opt.host = "127.0.0.1";
  opt.slots = 3;
  opt.gpu_type = "cpu";
  opt.log_dir = (dir / "logs").string();
  auto agent = Agent::Create(opt);
  ASSERT_TRUE(agent.ok()) << agent.status();
  std::thread loop([&] { (void)(*agent)->Run(); });
  ASSERT_TRUE(WaitFor([&] { return sched.registrations() > 0; }, 10));

  // A command of term 5 (no workers of job 99 here: it changes nothing but the term).
  p::WorkerCheckpointRequest ck;
  ck.job = 99;
  ck.reason = "term 5";
  ck.term = 5;
  ASSERT_TRUE(sched.Push("t1", ck).ok());
  auto start = [&](p::WorkerId worker, std::uint64_t term) {
    p::StartWorkers sw;
    sw.job = 8;
    sw.generation = 1;
    sw.workers = {{worker, worker, worker}};
    sw.members = {0, 1, 2};
    sw.argv = {"/bin/sh", "-c", "touch " + (dir / ("started-" + std::to_string(term))).string() + "; sleep 30"};
    sw.store_endpoint = "none";
    sw.term = term;
    return sched.Push("t1", sw);
  };
  ASSERT_TRUE(start(0, 4).ok());
  ASSERT_TRUE(start(1, 0).ok());
  ASSERT_TRUE(start(2, 6).ok());
  // Pushes are handled in order: once term 6's worker runs, the others were refused.
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir / "started-6"); }, 10));
  EXPECT_FALSE(fs::exists(dir / "started-4"));
  EXPECT_FALSE(fs::exists(dir / "started-0"));
  EXPECT_EQ((*agent)->running_workers(), 1);

  // A deposed leader cannot stop it either (a start of term 7 pushed after
  // the stop marks when the stop was handled); the current one can.
  p::StopWorkers stop;
  stop.job = 8;
  stop.grace_seconds = 0;
  stop.term = 5;
  ASSERT_TRUE(sched.Push("t1", stop).ok());
  ASSERT_TRUE(start(1, 7).ok());
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir / "started-7"); }, 10));
  EXPECT_EQ((*agent)->running_workers(), 2) << "a stop of term 5 stopped a worker of term 6";
  stop.term = 7;
  ASSERT_TRUE(sched.Push("t1", stop).ok());
  ASSERT_TRUE(WaitFor([&] { return (*agent)->running_workers() == 0; }, 10));

  (*agent)->Stop();
  loop.join();
  agent->reset();
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// --scheduler lists several schedulers: the agent registers with the first;
// when its HeartbeatAcks stop (this fake sends none) it registers again
// through the list, and a standby's hint takes it to the new leader. Its
// worker keeps running throughout.
TEST(AgentSchedulerList, MovesToTheNewLeaderWhenAcksStop) {
  fs::path dir = fs::temp_directory_path() / ("aryl-agent-list-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  FakeScheduler old_leader, new_leader;
  std::atomic<int> asked{0};
  auto standby = p::Server::Start({.endpoint = "tcp://127.0.0.1:*"},
                                  [&](const p::ReplyTo&, p::Message) -> std::optional<p::Message> {
                                    ++asked;
                                    return p::StandbyError(new_leader.endpoint(), 3);
                                  });
  ASSERT_TRUE(standby.ok()) << standby.status();
  AgentOptions opt;
  opt.scheduler = old_leader.endpoint() + "," + (*standby)->endpoint() + "," + new_leader.endpoint();
  opt.id = "l1";
  opt.host = "127.0.0.1";
  opt.slots = 1;
  opt.gpu_type = "cpu";
  opt.log_dir = (dir / "logs").string();
  auto agent = Agent::Create(opt);
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto t0 = std::chrono::steady_clock::now();  // before the first registration
  std::thread loop([&] { (void)(*agent)->Run(); });
  ASSERT_TRUE(WaitFor([&] { return old_leader.registrations() > 0; }, 10));
  p::StartWorkers sw;
  sw.job = 3;
  sw.generation = 1;
  sw.workers = {{0, 0, 0}};
  sw.members = {0};
  sw.argv = {"/bin/sh", "-c", "sleep 30"};
  sw.store_endpoint = "none";
  ASSERT_TRUE(old_leader.Push("l1", sw).ok());
  ASSERT_TRUE(WaitFor([&] { return (*agent)->running_workers() == 1; }, 10));

  // No acks for max(3 x 0.2 s, 2 s): on to the standby, which names the new leader.
  ASSERT_TRUE(WaitFor([&] { return new_leader.registrations() > 0; }, 10));
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  EXPECT_GE(asked.load(), 1);
  EXPECT_EQ((*agent)->running_workers(), 1);
  // Heartbeats go to the new leader now.
  ASSERT_TRUE(WaitFor([&] { return new_leader.Find<p::Heartbeat>().has_value(); }, 5));

  (*agent)->Stop();
  loop.join();
  agent->reset();
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace aryl::agent
