// The holes an outside attack found after the first security pass (one test
// each; every one failed before its fix): submission tokens scoped by owner,
// code-running env variables, parked store waits bounded, workers started with
// fds 0-2 only, the agent's private socket directory removed at stop, no
// configuration that gives a user key the agent role.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "security_fixture.h"
#include "aryl/protocol/store.h"

namespace aryl {
namespace {

using namespace aryl::livetest;
using securitytest::SecurityTest;

// Another user's equal client_token neither returns that user's job (id and
// name) nor blocks the submission; the owner's own retry still lands once.
TEST_F(SecurityTest, ClientTokensAreScopedByOwner) {
  auto ops = CurveCluster();
  auto alice = As("alice"), bob = As("bob");
  auto submit = [](p::Client& c, const std::string& name) {
    p::SubmitJob m;
    m.name = name;
    m.argv = {"sleep", "30"};
    m.workers = 1;
    m.client_token = "same-token";
    return c.Call<p::SubmitReply>(m, milliseconds(3000));
  };
  auto a = submit(*alice, "alices-secret-project");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = submit(*bob, "bobs");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(b->job, a->job);
  EXPECT_EQ(b->name, "bobs");
  auto again = submit(*alice, "alices-secret-project");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->job, a->job) << "the owner's retry is the same job";
  auto rows = ops->Call<p::JobsReply>(p::ListJobs{}, milliseconds(2000));
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->jobs.size(), 2u);
}

// Variables that make a shell or Python run code of the submitter's choosing
// are refused at submit (bash xtrace expands PS4; PYTHONWARNINGS imports the
// module a category names, BROWSER then runs), and PATH with them.
TEST_F(SecurityTest, CodeRunningEnvVariablesRefused) {
  StartScheduler();
  StartAgent("a", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"SHELLOPTS", "xtrace"}, {"PS4", "$(id>/tmp/pwned)"}, {"PYTHONWARNINGS", "all:0:antigravity.x:0:0"},
           {"BROWSER", "/bin/sh -c id"}, {"PATH", "/tmp/evil:/usr/bin"}, {"PYTHONBREAKPOINT", "os.system"}}) {
    p::SubmitJob m;
    m.argv = {"true"};
    m.workers = 1;
    m.env = {{name, value}};
    auto r = c->Call<p::SubmitReply>(m, milliseconds(3000));
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_NE(r.status().message().find("'" + name + "'"), std::string::npos) << r.status();
  }
}

// One job scope cannot park more waits than its quota: past it a wait is
// refused at once, another scope still parks, and a wait that ends (here by
// its timeout) frees its place.
TEST_F(SecurityTest, ParkedStoreWaitsBounded) {
  p::StoreLimits limits;
  limits.max_parked_per_scope = 3;
  auto server = p::StoreServer::Start({.endpoint = "tcp://127.0.0.1:*"}, limits);
  ASSERT_TRUE(server.ok());
  auto wait_in_thread = [&](const std::string& key, aryl::Status* out) {
    return std::thread([&, key, out] {
      auto c = p::StoreClient::Connect({.endpoint = (*server)->endpoint()});
      *out = c.ok() ? (*c)->Wait({key}, milliseconds(1500)) : c.status();
    });
  };
  std::vector<aryl::Status> results(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) threads.push_back(wait_in_thread("aryl/1-1/never", &results[i]));
  ASSERT_TRUE(WaitFor([&] { return (*server)->service().parked() == 3; }, 5));
  auto c = p::StoreClient::Connect({.endpoint = (*server)->endpoint()});
  ASSERT_TRUE(c.ok());
  aryl::Status refused = (*c)->Wait({"aryl/1-1/never"}, milliseconds(1500));
  EXPECT_EQ(refused.code(), aryl::Status::Code::kOutOfRange) << refused;
  EXPECT_NE(refused.message().find("store quota"), std::string::npos) << refused;
  threads.push_back(wait_in_thread("aryl/2-1/other", &results[3]));
  ASSERT_TRUE(WaitFor([&] { return (*server)->service().parked() == 4; }, 5)) << "another scope parks";
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_TRUE(r.IsTimeout()) << r;
  EXPECT_EQ((*server)->service().parked(), 0u);
  std::thread again = wait_in_thread("aryl/1-1/never", &results[0]);
  ASSERT_TRUE(WaitFor([&] { return (*server)->service().parked() == 1; }, 5)) << "the quota was given back";
  again.join();
}

// A worker holds fds 0-2 and nothing of the agent's; the agent's private
// socket directory is gone once it stops.
TEST_F(SecurityTest, WorkersGetOnlyStandardFdsAndTheAgentCleansUp) {
  StartScheduler();
  pid_t agent = StartAgent("a", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  // What a process the worker starts holds (the shell itself juggles fds for
  // its redirections): listed by another process, into the worker's log,
  // once the child is sleep (before its exec it is a copy of the shell, with
  // the shell's own fds: a loaded machine once listed that copy's fd 3).
  auto job = Submit(*c, {"sh", "-c",
                         "echo $ARYL_AGENT_ENDPOINT; sleep 3 & p=$!; i=0; "
                         "while [ \"$(cat /proc/$p/comm)\" != sleep ] && [ $i -lt 50 ]; do sleep 0.05; i=$((i+1)); done; "
                         "ls /proc/$p/fd; wait"}, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitState(*c, *job, p::JobState::kCompleted, 20)) << Logs();
  const fs::path out = dir_ / "logs-a" / ("job-" + std::to_string(*job)) / "worker-0.out";
  std::set<std::string> fds;
  std::istringstream in(ReadFile(out));
  std::string endpoint;
  in >> endpoint;
  for (std::string fd; in >> fd;) fds.insert(fd);
  EXPECT_EQ(fds, (std::set<std::string>{"0", "1", "2"})) << ReadFile(out);
  ASSERT_EQ(endpoint.rfind("ipc://", 0), 0u) << ReadFile(out);
  const fs::path socket_dir = fs::path(endpoint.substr(6)).parent_path();
  ASSERT_TRUE(fs::exists(socket_dir)) << "the agent's worker socket directory " << socket_dir;
  launcher_.Signal(agent, SIGTERM);
  ASSERT_TRUE(WaitFor([&] {
    launcher_.Poll();
    return !launcher_.Running(agent);
  }, 10));
  EXPECT_FALSE(fs::exists(socket_dir));
}

// A worker inherits only the documented part of the agent's environment
// (agent_security.h kDefaultWorkerEnv): library settings such as NCCL_* pass,
// anything else of the agent's (a credential, a service manager's socket)
// does not; --worker-env all keeps the older whole inheritance.
TEST_F(SecurityTest, WorkersInheritOnlyTheDocumentedEnvironment) {
  StartScheduler();
  ::setenv("ARYL_TEST_AGENT_SECRET", "hunter2", 1);
  ::setenv("NOTIFY_SOCKET", "/run/systemd/notify", 1);
  ::setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  StartAgent("a", 1);
  StartAgent("b", 1, "training", {"--worker-env", "all"});
  ::unsetenv("ARYL_TEST_AGENT_SECRET");
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("NCCL_SOCKET_IFNAME");
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  auto submit_env = [&] {
    p::SubmitJob m;
    m.argv = {"sh", "-c", "env; sleep 3"};  // both run at once, one on each agent
    m.workers = 1;
    auto r = c->Call<p::SubmitReply>(m, milliseconds(3000));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job : 0;
  };
  p::JobId j1 = submit_env(), j2 = submit_env();
  ASSERT_TRUE(WaitState(*c, j1, p::JobState::kCompleted, 20)) << Logs();
  ASSERT_TRUE(WaitState(*c, j2, p::JobState::kCompleted, 20)) << Logs();
  // Each agent ran one of the two (one slot each).
  std::string clean, all;
  for (const std::string node : {"a", "b"})
    for (p::JobId j : {j1, j2}) {
      fs::path out = dir_ / ("logs-" + node) / ("job-" + std::to_string(j)) / "worker-0.out";
      if (fs::exists(out)) (node == "a" ? clean : all) = "\n" + ReadFile(out);
    }
  ASSERT_FALSE(clean.empty()) << Logs();
  ASSERT_FALSE(all.empty()) << Logs();
  EXPECT_EQ(clean.find("ARYL_TEST_AGENT_SECRET"), std::string::npos) << clean;
  EXPECT_EQ(clean.find("NOTIFY_SOCKET"), std::string::npos) << clean;
  EXPECT_NE(clean.find("\nNCCL_SOCKET_IFNAME=lo\n"), std::string::npos) << clean;
  EXPECT_NE(clean.find("\nPATH="), std::string::npos) << clean;
  EXPECT_NE(clean.find("\nARYL_RANK=0\n"), std::string::npos) << clean;
  EXPECT_NE(all.find("ARYL_TEST_AGENT_SECRET=hunter2"), std::string::npos) << all;
}

// A user key that sends heartbeats under the routing id of a stopped agent
// does not keep that agent alive: it is declared lost at --agent-timeout.
TEST_F(SecurityTest, UserKeyCannotKeepAStoppedAgentAlive) {
  MakeKeys();
  StartScheduler(CurveFlags());
  pid_t agent = StartAgent("a", 1, "training", AgentCurve("a"));
  auto ops = As("ops");
  ASSERT_TRUE(WaitAgents(*ops, 1)) << Logs();
  auto alice = As("alice", "a");
  auto connected = [&] {
    auto r = ops->Call<p::NodesReply>(p::ListNodes{}, milliseconds(1000));
    if (!r.ok()) return true;
    for (const auto& n : r->nodes)
      if (n.agent_id == "a") return n.connected;
    return false;
  };
  ASSERT_TRUE(connected());
  launcher_.Signal(agent, SIGSTOP);
  p::Heartbeat hb;
  hb.agent_id = "a";
  hb.free_slots = 1;
  bool lost = false;
  // Forged heartbeats every 0.2 s, for up to 10 s (--agent-timeout is 3 s).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int i = 0; std::chrono::steady_clock::now() < deadline && !lost; ++i) {
    hb.seq = 1000 + i;
    (void)alice->Request(hb, milliseconds(200));
    lost = !connected();
    std::this_thread::sleep_for(milliseconds(200));
  }
  launcher_.Signal(agent, SIGCONT);
  EXPECT_TRUE(lost) << "the forged heartbeats kept the stopped agent alive\n" << Logs();
}

// Per-user limits: a user past --max-jobs-per-user or the submit rate is
// refused with the limit named; another user, an operator, and the same user
// once a job ended are not.
TEST_F(SecurityTest, PerUserSubmissionLimits) {
  MakeKeys();
  auto flags = CurveFlags();
  flags.insert(flags.end(), {"--max-jobs-per-user", "3", "--submit-rate-per-user", "0.05", "--submit-burst-per-user", "4"});
  StartScheduler(flags);
  StartAgent("a", 2, "training", AgentCurve("a"));
  auto ops = As("ops");
  ASSERT_TRUE(WaitAgents(*ops, 1)) << Logs();
  auto alice = As("alice"), bob = As("bob");
  std::vector<p::JobId> mine;
  for (int i = 0; i < 3; ++i) {
    auto j = Submit(*alice, {"sleep", "60"}, 1);
    ASSERT_TRUE(j.ok()) << j.status();
    mine.push_back(*j);
  }
  auto over = Submit(*alice, {"sleep", "60"}, 1);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("--max-jobs-per-user"), std::string::npos) << over.status();
  EXPECT_TRUE(Submit(*bob, {"true"}, 1).ok()) << "another user is not held to alice's limit";
  EXPECT_TRUE(Submit(*ops, {"true"}, 1).ok()) << "operators are not limited";
  p::CancelJob cancel;
  cancel.job = mine[0];
  ASSERT_TRUE(alice->Call<p::Ok>(cancel, milliseconds(2000)).ok());
  // A place is free again; the burst of 4 is spent by the next one (1 refused + 3 + 1).
  auto again = Submit(*alice, {"sleep", "60"}, 1);
  ASSERT_TRUE(again.ok()) << again.status();
  cancel.job = mine[1];
  ASSERT_TRUE(alice->Call<p::Ok>(cancel, milliseconds(2000)).ok());
  auto fast = Submit(*alice, {"sleep", "60"}, 1);
  ASSERT_FALSE(fast.ok());
  EXPECT_NE(fast.status().message().find("--submit-rate-per-user"), std::string::npos) << fast.status();
  EXPECT_GE(Metric("aryl_refused_requests_total"), 2);
}

// /status stays bounded however many jobs there are: it lists the first
// --status-max-jobs and says how many it left out.
TEST_F(SecurityTest, StatusIsBounded) {
  StartScheduler({"--status-max-jobs", "3"});
  StartAgent("a", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Submit(*c, {"sleep", "60"}, 1).ok());
  nlohmann::json st;
  ASSERT_TRUE(WaitFor([&] {
    auto r = daemon::HttpGet("127.0.0.1", http_port_, "/status", 3);
    if (!r.ok()) return false;
    st = nlohmann::json::parse(r->second, nullptr, false);
    return !st.is_discarded() && st.value("jobs_total", 0) == 5;
  }, 5)) << st.dump();
  EXPECT_EQ(st["jobs"].size(), 3u) << st.dump();
  EXPECT_EQ(st.value("jobs_truncated", 0), 2) << st.dump();
}

// A configuration in which a user key would hold the agent role does not
// start: the single --curve-allow list (without --insecure), and an agent key
// also listed as a user's. Both exit 2, which the unit does not restart on.
TEST_F(SecurityTest, ConfigurationsGivingUsersTheAgentRoleRefused) {
  MakeKeys();
  auto exit_code = [&](pid_t pid) {
    int code = -1;
    WaitFor([&] {
      for (const auto& e : launcher_.Poll())
        if (e.pid == pid) code = e.exit_code;
      return code != -1;
    }, 10);
    return code;
  };
  const std::string key = (keys_ / "scheduler.key").string();
  EXPECT_EQ(exit_code(StartScheduler({"--curve-key", key, "--curve-allow", (dir_ / "users").string()})), 2) << Logs();
  EXPECT_NE(ReadFile(dir_ / "scheduler.log").find("--curve-allow gives every listed key every role"), std::string::npos)
      << Logs();
  fs::create_directories(dir_ / "mixed");
  fs::copy_file(keys_ / "a.pub", dir_ / "mixed" / "a.pub");
  fs::copy_file(keys_ / "alice.pub", dir_ / "mixed" / "alice.pub");
  EXPECT_EQ(exit_code(StartScheduler({"--curve-key", key, "--curve-agents", (dir_ / "agents").string(), "--curve-users",
                                      (dir_ / "mixed").string(), "--curve-operators", (dir_ / "operators").string()})),
            2)
      << Logs();
  EXPECT_NE(ReadFile(dir_ / "scheduler.log").find("key of 'a' is also an agent key"), std::string::npos) << Logs();
  // The role lists apart start.
  StartScheduler(CurveFlags());
  auto ops = As("ops");
  EXPECT_TRUE(WaitFor([&] { return ops->Call<p::NodesReply>(p::ListNodes{}, milliseconds(500)).ok(); }, 10)) << Logs();
}

}  // namespace
}  // namespace aryl

namespace aryl {
namespace {

using namespace aryl::livetest;  // NOLINT
using securitytest::SecurityTest;

// Teams (protocol/queues.h, Q1, Q3): a user submits only to the queues whose
// `users` name them; operators submit to any and alone reload the file.
TEST_F(SecurityTest, UserKeySubmitsOnlyToItsTeamsQueues) {
  MakeKeys();
  const fs::path queues = dir_ / "queues.csv";
  std::ofstream(queues) << "queue,quota_gpus,weight,gpu_type,users\n"
                           "vision,1,1,cpu,alice\n"
                           "shared,1,1,cpu,*\n";
  std::vector<std::string> flags = CurveFlags();
  flags.insert(flags.end(), {"--queues", queues.string()});
  StartScheduler(flags);
  StartAgent("a", 2, "training", AgentCurve("a"));
  auto ops = As("ops");
  ASSERT_TRUE(WaitAgents(*ops, 1)) << Logs();
  auto alice = As("alice"), bob = As("bob");
  p::SubmitJob m;
  m.argv = {"sleep", "30"};
  m.workers = 1;
  m.queue = "vision";
  auto refused = bob->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().IsPermissionDenied()) << refused.status();
  EXPECT_NE(refused.status().message().find("user 'bob' may not submit to queue 'vision' (its users: alice)"),
            std::string::npos)
      << refused.status();
  auto mine = alice->Call<p::SubmitReply>(m, milliseconds(3000));
  EXPECT_TRUE(mine.ok()) << mine.status();
  auto by_ops = ops->Call<p::SubmitReply>(m, milliseconds(3000));
  EXPECT_TRUE(by_ops.ok()) << by_ops.status();
  m.queue = "shared";
  auto shared = bob->Call<p::SubmitReply>(m, milliseconds(3000));
  EXPECT_TRUE(shared.ok()) << shared.status();
  // Everyone may list the queues; only operators reload them.
  EXPECT_TRUE(bob->Call<p::QueuesReply>(p::ListQueues{}, milliseconds(2000)).ok());
  auto reload = bob->Call<p::QueuesReply>(p::ReloadQueues{}, milliseconds(2000));
  EXPECT_TRUE(reload.status().IsPermissionDenied()) << reload.status();
  EXPECT_TRUE(ops->Call<p::QueuesReply>(p::ReloadQueues{}, milliseconds(3000)).ok());
}

}  // namespace
}  // namespace aryl
