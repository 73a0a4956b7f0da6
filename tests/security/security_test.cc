// One test per attack of docs/security.md, against real aryl-scheduler and
// aryl-agent processes on loopback (LiveCluster), with real CURVE keys.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <regex>

#include "security_fixture.h"
#include "aryl/daemon/daemon.h"
#include "aryl/daemon/http_server.h"
#include "aryl/protocol/security.h"
#include "aryl/protocol/store.h"

namespace aryl {
namespace {

using namespace aryl::livetest;
using securitytest::Mode;
using securitytest::SecurityTest;


// Without CURVE the scheduler listens on a local ipc:// socket, where the kernel
// names each caller's uid: any tcp:// endpoint, loopback included (where every
// local account would have every role), is refused unless --insecure.
TEST_F(SecurityTest, NoCurveMeansLocalSocketOnly) {
  EXPECT_EQ(daemon::DaemonOptions{}.endpoint, "ipc:///run/aryl/scheduler.sock");
  for (const std::string host : {"0.0.0.0", "127.0.0.1"}) {
    agent::LaunchSpec spec;
    spec.argv = {ARYL_SCHEDULER_BIN, "--endpoint", "tcp://" + host + ":" + std::to_string(port_), "--state",
                 (dir_ / "state.db").string(), "--http-port", "-1"};
    spec.stdout_path = (dir_ / ("refused-" + host + ".log")).string();
    auto pid = launcher_.Launch(spec);
    ASSERT_TRUE(pid.ok());
    std::optional<int> code;
    ASSERT_TRUE(WaitFor([&] {
      for (const auto& e : launcher_.Poll()) code = e.exit_code;
      return !launcher_.Running(*pid);
    }, 10)) << "the scheduler accepted " << host << " without CURVE";
    EXPECT_EQ(code, 2);
    std::string log = ReadFile(spec.stdout_path);
    EXPECT_NE(log.find("--insecure"), std::string::npos) << log;
    EXPECT_NE(log.find("ipc://"), std::string::npos) << log;
  }
  // An unauthenticated client cannot submit to a CURVE scheduler.
  MakeKeys();
  StartScheduler(CurveFlags());
  auto plain = Client();
  p::SubmitJob m;
  m.argv = {"sh", "-c", "id"};
  m.workers = 1;
  EXPECT_FALSE(plain->Call<p::SubmitReply>(m, milliseconds(1500)).ok());
}

// A user key that connects with an agent's id can neither register as that
// agent nor receive its pushes (start_workers carries the job's environment).
TEST_F(SecurityTest, UserKeyCannotImpersonateAgent) {
  auto ops = CurveCluster();
  auto impostor = As("alice", "a");
  p::AgentRegister reg;
  reg.agent_id = "a";
  reg.host = "127.0.0.1";
  reg.gpu_type = "cpu";
  reg.slots = 2;
  auto r = impostor->Call<p::AgentRegistered>(reg, milliseconds(3000));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsPermissionDenied()) << r.status();
  // Another agent's key may not claim "a" either.
  auto other = As("b", "a");
  r = other->Call<p::AgentRegistered>(reg, milliseconds(3000));
  EXPECT_TRUE(r.status().IsPermissionDenied()) << r.status();
  // A job still starts on the real agent, and the impostor gets nothing.
  auto alice = As("alice");
  auto job = Submit(*alice, {"sleep", "30"}, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitState(*alice, *job, p::JobState::kRunning, 10)) << Logs();
  EXPECT_FALSE(impostor->Receive(milliseconds(500)).ok());
  EXPECT_GE(Metric("aryl_refused_requests_total"), 2) << Logs();
  EXPECT_NE(ReadFile(dir_ / "scheduler.log").find("refused agent_register from key 'alice'"), std::string::npos);
}

// worker_exited naming another agent's worker is refused, from a user key and
// from another agent's key; the job keeps running.
TEST_F(SecurityTest, ForgedWorkerExitedRefused) {
  auto ops = CurveCluster();
  StartAgent("b", 1, "training", AgentCurve("b"));
  ASSERT_TRUE(WaitAgents(*ops, 2)) << Logs();
  auto job = Submit(*ops, {"sleep", "30"}, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitState(*ops, *job, p::JobState::kRunning, 10)) << Logs();
  auto st = Status(*ops, *job);
  ASSERT_TRUE(st.ok() && st->placement.size() == 1);
  std::string victim = st->placement[0].agent_id, forger = victim == "a" ? "b" : "a";
  double before = Metric("aryl_refused_requests_total");
  for (const std::string& key : {std::string("alice"), forger}) {
    auto c = As(key);
    for (p::WorkerId w = 0; w < 4; ++w) {
      p::WorkerExited ex;
      ex.agent_id = victim;
      ex.job = *job;
      ex.worker = w;
      ex.exit_code = 1;
      auto r = c->Request(ex, milliseconds(2000));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(std::holds_alternative<p::Error>(*r)) << p::TypeName(*r);
      EXPECT_EQ(std::get<p::Error>(*r).code, aryl::Status::Code::kPermissionDenied);
    }
  }
  std::this_thread::sleep_for(milliseconds(300));
  st = Status(*ops, *job);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->row.state, p::JobState::kRunning) << st->message;
  EXPECT_GE(Metric("aryl_refused_requests_total") - before, 8);
}

// Users see and cancel only their own jobs; operators may cancel any.
TEST_F(SecurityTest, UserCannotCancelOthersJob) {
  auto ops = CurveCluster();
  auto alice = As("alice"), bob = As("bob");
  auto job = Submit(*alice, {"sleep", "30"}, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  p::CancelJob cancel;
  cancel.job = *job;
  auto r = bob->Call<p::Ok>(cancel, milliseconds(2000));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsPermissionDenied()) << r.status();
  EXPECT_NE(r.status().message().find("belongs to 'alice'"), std::string::npos) << r.status();
  EXPECT_FALSE(Status(*bob, *job).ok());
  auto bobs = bob->Call<p::JobsReply>(p::ListJobs{}, milliseconds(2000));
  ASSERT_TRUE(bobs.ok());
  EXPECT_TRUE(bobs->jobs.empty());
  auto alices = alice->Call<p::JobsReply>(p::ListJobs{}, milliseconds(2000));
  ASSERT_TRUE(alices.ok() && alices->jobs.size() == 1);
  EXPECT_EQ(alices->jobs[0].owner, "alice");
  // Pool operations are for operators.
  p::PoolOffer offer;
  offer.servers = {"a"};
  EXPECT_TRUE(bob->Call<p::Ok>(offer, milliseconds(2000)).status().IsPermissionDenied());
  EXPECT_TRUE(ops->Call<p::Ok>(cancel, milliseconds(2000)).ok());
}

// The agent's rendezvous store refuses requests without the job's token, and
// a token only opens its own job's keys.
TEST_F(SecurityTest, StoreRefusesRequestsWithoutJobToken) {
  StartScheduler();
  StartAgent("a", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  std::smatch m;
  std::string log = ReadFile(dir_ / "agent-a.log");
  ASSERT_TRUE(std::regex_search(log, m, std::regex("rendezvous store on (tcp://[0-9.]+:[0-9]+)"))) << log;
  std::string store_ep = m[1];
  fs::path token_file = dir_ / "token";
  auto job = Submit(*c, {"sh", "-c", "echo \"$ARYL_JOB_ID $ARYL_STORE_TOKEN\" > " + token_file.string() + "; sleep 30"}, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitFor([&] { return ReadFile(token_file).find(' ') != std::string::npos; }, 10)) << Logs();
  std::istringstream in(ReadFile(token_file));
  std::string scope, token;
  in >> scope >> token;
  ASSERT_FALSE(token.empty()) << "the agent gave its worker no ARYL_STORE_TOKEN";

  auto anon = p::StoreClient::Connect({.endpoint = store_ep}, "none:0");
  ASSERT_TRUE(anon.ok());
  aryl::Status s = (*anon)->Set("aryl/" + scope + "/evil", "x", milliseconds(2000));
  EXPECT_TRUE(s.IsPermissionDenied()) << s;
  auto worker = p::StoreClient::Connect({.endpoint = store_ep}, token);
  ASSERT_TRUE(worker.ok());
  EXPECT_TRUE((*worker)->Set("aryl/" + scope + "/mine", "x", milliseconds(2000)).ok());
  s = (*worker)->Set("aryl/other-1/theirs", "x", milliseconds(2000));
  EXPECT_TRUE(s.IsPermissionDenied()) << s;
  // The worker's log files and their directory are private.
  fs::path job_dir = dir_ / "logs-a" / ("job-" + std::to_string(*job));
  EXPECT_EQ(Mode(job_dir), 0700u);
  EXPECT_EQ(Mode(job_dir / "worker-0.out"), 0600u);
}

// A store's quotas cap the keys and bytes one job scope (and all) may hold.
TEST_F(SecurityTest, StoreQuotaEnforced) {
  p::StoreLimits limits;
  limits.max_bytes_per_scope = 4 << 20;
  limits.max_keys_per_scope = 50;
  auto server = p::StoreServer::Start({.endpoint = "tcp://127.0.0.1:*"}, limits);
  ASSERT_TRUE(server.ok());
  auto c = p::StoreClient::Connect({.endpoint = (*server)->endpoint()});
  ASSERT_TRUE(c.ok());
  std::string big(600 * 1024, 'x');  // base64 in a frame: under kMaxFrameBytes
  int stored = 0;
  aryl::Status last;
  for (int i = 0; i < 150 && last.ok(); ++i) {
    last = (*c)->Set("aryl/1-1/k" + std::to_string(i), big, milliseconds(5000));
    if (last.ok()) ++stored;
  }
  EXPECT_EQ(last.code(), aryl::Status::Code::kOutOfRange) << last;
  EXPECT_NE(last.message().find("quota"), std::string::npos) << last;
  EXPECT_EQ(stored, 6);  // 6 x 600 KiB fit in 4 MiB
  EXPECT_LE((*server)->service().bytes(), limits.max_bytes_per_scope);
  aryl::Status keys;
  for (int i = 0; i < 60 && keys.ok(); ++i) keys = (*c)->Set("aryl/2-1/n" + std::to_string(i), "v", milliseconds(2000));
  EXPECT_EQ(keys.code(), aryl::Status::Code::kOutOfRange) << keys;
  // Deleting frees quota.
  EXPECT_TRUE((*c)->DeleteKey("aryl/1-1/k0", milliseconds(2000)).ok());
  EXPECT_TRUE((*c)->Set("aryl/1-1/again", big, milliseconds(5000)).ok());
}

// state.db (and its WAL) are 0600, the worker socket sits in a 0700 directory.
TEST_F(SecurityTest, StateAndSocketPermissions) {
  StartScheduler();
  StartAgent("a", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  EXPECT_EQ(Mode(dir_ / "state.db"), 0600u);
  if (fs::exists(dir_ / "state.db-wal")) EXPECT_EQ(Mode(dir_ / "state.db-wal"), 0600u);
  std::smatch m;
  std::string log = ReadFile(dir_ / "agent-a.log");
  ASSERT_TRUE(std::regex_search(log, m, std::regex("worker channel on ipc://(\\S+)"))) << log;
  fs::path sock = std::string(m[1]);
  if (::geteuid() == 0) {
    // A root agent may run workers as other accounts (keyless local users): no
    // listing of the directory, a socket they can reach, and every message
    // checked against the uid its identity was issued to.
    EXPECT_EQ(Mode(sock.parent_path()), 0711u) << sock;
    EXPECT_EQ(Mode(sock), 0666u) << sock;
  } else {
    EXPECT_EQ(Mode(sock.parent_path()), 0700u) << sock;
  }
}

// A job's env values reach neither the event journal nor `aryl status`; the
// submit row is a summary for people, without the client's idempotency token.
TEST_F(SecurityTest, SecretEnvNotInJournal) {
  StartScheduler();
  StartAgent("a", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  p::SubmitJob m;
  m.argv = {"true"};
  m.workers = 1;
  m.env = {{"API_TOKEN", "hunter2-s3cr3t"}};
  m.client_token = "tok-5f3e9c0d1e7b4a65";
  auto job = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_TRUE(job.ok()) << job.status();
  auto st = Status(*c, job->job);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->env_names, std::vector<std::string>{"API_TOKEN"});
  EXPECT_EQ(p::Encode(*st).find("hunter2"), std::string::npos);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2((dir_ / "state.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT count(*), sum(instr(detail || data, 'hunter2') > 0), sum(instr(detail, 'API_TOKEN') > 0), "
                                   "sum(instr(detail || data, 'tok-5f3e') > 0), "
                                   "(SELECT detail FROM events WHERE kind = 'submit') FROM events",
                               -1, &q, nullptr),
            SQLITE_OK) << sqlite3_errmsg(db);
  ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
  EXPECT_GT(sqlite3_column_int(q, 0), 0);
  EXPECT_EQ(sqlite3_column_int(q, 1), 0) << "the secret value is in the event journal";
  EXPECT_GT(sqlite3_column_int(q, 2), 0) << "the variable's name should stay";
  EXPECT_EQ(sqlite3_column_int(q, 3), 0) << "the client token is in the event journal";
  const char* submit = reinterpret_cast<const char*>(sqlite3_column_text(q, 4));
  ASSERT_NE(submit, nullptr);
  EXPECT_EQ(std::string(submit), "true: 1 worker, gpu any, argv: true, env: API_TOKEN, owner local");
  sqlite3_finalize(q);
  sqlite3_close(db);
}

// 64 idle HTTP connections do not delay a /metrics scrape by more than 100 ms
// (the best of 5 scrapes with them against the best of 5 without, so a busy
// machine's scheduling noise does not count; a serial server fails by seconds).
TEST_F(SecurityTest, IdleHttpConnectionsDoNotDelayScrape) {
  StartScheduler();
  ASSERT_TRUE(WaitFor([&] { return daemon::HttpGet("127.0.0.1", http_port_, "/healthz").ok(); }, 10)) << Logs();
  // /healthz answers as soon as the endpoint is up; /readyz says 503 "starting"
  // until the scheduler has loaded its state, then 200.
  ASSERT_TRUE(WaitFor([&] {
    auto ready = daemon::HttpGet("127.0.0.1", http_port_, "/readyz");
    EXPECT_TRUE(ready.ok() && (ready->first == 200 || ready->first == 503));
    return ready.ok() && ready->first == 200;
  }, 20)) << Logs();
  auto best_scrape = [&] {
    double best = 1e9;
    for (int i = 0; i < 5; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto r = daemon::HttpGet("127.0.0.1", http_port_, "/metrics?scrape=" + std::to_string(i), 5.0);
      double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_TRUE(r.ok() && r->first == 200) << (r.ok() ? std::to_string(r->first) : r.status().ToString());
      best = std::min(best, took);
    }
    return best;
  };
  double baseline = best_scrape();
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(http_port_));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    if (i % 2) ::send(fd, "GET /met", 8, MSG_NOSIGNAL);  // half of them stop mid-request
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(milliseconds(100));
  double with_idle = best_scrape();
  std::printf("/metrics scrape, best of 5: %.2f ms alone, %.2f ms with 64 idle connections\n", baseline * 1000,
              with_idle * 1000);
  EXPECT_LT(with_idle - baseline, 0.100);
  for (int fd : idle) ::close(fd);
}

// Job names: printable and bounded, the error names the field; loader
// variables in a job's env are refused at submit and by the agent.
TEST_F(SecurityTest, JobNamesAndEnvPolicy) {
  StartScheduler({"--env-deny", "none"});  // the agent's own policy still applies
  StartAgent("a", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  for (std::string name : {std::string("\x1b[31mred"), std::string(900 * 1024, 'n')}) {
    p::SubmitJob m;
    m.name = name;
    m.argv = {"true"};
    m.workers = 1;
    auto r = c->Call<p::SubmitReply>(m, milliseconds(3000));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("field 'name'"), std::string::npos) << r.status();
  }
  p::SubmitJob m;
  m.argv = {"true"};
  m.workers = 1;
  m.env = {{"LD_PRELOAD", "/tmp/evil.so"}};
  auto job = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitFor([&] {
    auto st = Status(*c, job->job);
    return st.ok() && st->row.state == p::JobState::kFailed;
  }, 15)) << Logs();
  EXPECT_NE(ReadFile(dir_ / "agent-a.log").find("LD_PRELOAD"), std::string::npos);
}

// A scheduler with the default policy refuses LD_PRELOAD at submit, and an
// agent of another cluster does not join.
TEST_F(SecurityTest, SubmitEnvPolicyAndClusterId) {
  StartScheduler({"--cluster-id", "prod"});
  StartAgent("stray", 1, "training", {"--cluster-id", "test"});
  StartAgent("a", 1, "training", {"--cluster-id", "prod"});
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  ASSERT_TRUE(WaitFor([&] { return ReadFile(dir_ / "agent-stray.log").find("cluster 'prod'") != std::string::npos; }, 10))
      << Logs();
  auto nodes = c->Call<p::NodesReply>(p::ListNodes{}, milliseconds(1000));
  ASSERT_TRUE(nodes.ok());
  for (const auto& n : nodes->nodes) EXPECT_NE(n.agent_id, "stray");
  p::SubmitJob m;
  m.argv = {"true"};
  m.workers = 1;
  m.env = {{"PYTHONPATH", "/tmp/evil"}};
  auto r = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("PYTHONPATH"), std::string::npos) << r.status();
}

// describe, logs and events of another user's job are refused; a user's event
// listing holds only cluster rows and their own jobs'; operators see all.
TEST_F(SecurityTest, InspectionOfOthersJobRefused) {
  auto ops = CurveCluster();
  auto alice = As("alice"), bob = As("bob");
  auto job = Submit(*alice, {"sh", "-c", "echo alice-output"}, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitState(*alice, *job, p::JobState::kCompleted, 20)) << Logs();
  auto bobs = Submit(*bob, {"true"}, 1);
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  ASSERT_TRUE(WaitState(*bob, *bobs, p::JobState::kCompleted, 20)) << Logs();
  auto denied = [&](const p::Message& m) {
    auto r = bob->Request(m, milliseconds(3000));
    EXPECT_TRUE(r.ok()) << r.status();
    auto st = r.ok() ? p::As<p::Ok>(*r).status() : r.status();
    EXPECT_TRUE(st.IsPermissionDenied()) << p::TypeName(m) << ": " << st;
    EXPECT_NE(st.message().find("belongs to 'alice'"), std::string::npos) << st;
  };
  denied(p::DescribeJob{*job});
  p::JobLogs logs;
  logs.job = *job;
  denied(logs);
  p::ListEvents mine;
  mine.job = *job;
  denied(mine);
  // Bob's own listing: cluster rows and his job's, none of alice's.
  auto rows = bob->Call<p::EventsReply>(p::ListEvents{}, milliseconds(3000));
  ASSERT_TRUE(rows.ok()) << rows.status();
  bool own = false;
  for (const auto& e : rows->events) {
    EXPECT_NE(e.job, *job) << e.kind << " " << e.detail;
    own |= e.job == *bobs;
  }
  EXPECT_TRUE(own);
  // Alice reads her log; an operator reads it and describes her job too.
  auto chunk = alice->Call<p::LogChunk>(logs, milliseconds(3000));
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  EXPECT_EQ(chunk->data.data, "alice-output\n");
  EXPECT_TRUE(ops->Call<p::LogChunk>(logs, milliseconds(3000)).ok());
  auto d = ops->Call<p::JobDescription>(p::DescribeJob{*job}, milliseconds(3000));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->row.owner, "alice");
  auto all = ops->Call<p::EventsReply>(mine, milliseconds(3000));
  ASSERT_TRUE(all.ok() && !all->events.empty());
  // A log read reply forged by a user key is refused.
  p::LogReadReply forged;
  forged.request = 1;
  forged.agent_id = "a";
  auto r = bob->Request(forged, milliseconds(3000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(p::As<p::Ok>(*r).status().IsPermissionDenied());
}

}  // namespace
}  // namespace aryl
