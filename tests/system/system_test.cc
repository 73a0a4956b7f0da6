// End-to-end tests of the live system: real aryl-scheduler and aryl-agent
// processes on loopback, real worker processes (/bin/sh), real signals.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "aryl/agent/process.h"
#include "aryl/daemon/http_server.h"
#include "aryl/protocol/messages.h"
#include "aryl/protocol/security.h"
#include "aryl/protocol/transport.h"
#include "live_cluster.h"

namespace aryl {
namespace {

namespace fs = std::filesystem;
namespace p = aryl::protocol;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

using namespace aryl::livetest;  // NOLINT

class SystemTest : public LiveCluster {
 protected:
  // Starts aryl-run against this cluster with `args`; its stdout and stderr go
  // to dir_/<log>.
  pid_t StartArylRun(std::vector<std::string> args, const std::string& log) {
    agent::LaunchSpec spec;
    spec.argv = {ARYL_RUN_BIN, "--scheduler", endpoint_};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.stdout_path = (dir_ / log).string();
    auto pid = launcher_.Launch(spec);
    EXPECT_TRUE(pid.ok()) << pid.status();
    return pid.ok() ? *pid : 0;
  }
  // How `pid` ended, once it has, within `timeout_s`.
  std::optional<agent::ExitInfo> WaitExit(pid_t pid, double timeout_s) {
    std::optional<agent::ExitInfo> done;
    WaitFor([&] {
      for (const auto& e : launcher_.Poll())
        if (e.pid == pid) done = e;
      return done.has_value();
    }, timeout_s);
    return done;
  }
  // Runs aryl-run to its end (bounded); its exit code (-1: still running) and output.
  std::pair<int, std::string> RunArylRun(std::vector<std::string> args, const std::string& log, double timeout_s = 30) {
    pid_t pid = StartArylRun(std::move(args), log);
    auto done = WaitExit(pid, timeout_s);
    return {done ? done->exit_code : -1, ReadFile(dir_ / log)};
  }
};

// A job runs on real worker processes, completes, and its exit code is kept.
TEST_F(SystemTest, JobLifecycle) {
  StartScheduler();
  StartAgent("a", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  fs::path out = dir_ / "out";
  fs::create_directories(out);
  auto ok = Submit(*c, {"sh", "-c", "echo $ARYL_RANK/$ARYL_WORLD_SIZE > " + out.string() + "/r$ARYL_RANK"}, 2);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_TRUE(WaitState(*c, *ok, p::JobState::kCompleted, 15)) << Logs();
  EXPECT_EQ(ReadFile(out / "r0"), "0/2\n");
  EXPECT_EQ(ReadFile(out / "r1"), "1/2\n");
  auto failing = Submit(*c, {"sh", "-c", "exit 7"}, 1);
  ASSERT_TRUE(failing.ok());
  ASSERT_TRUE(WaitState(*c, *failing, p::JobState::kFailed, 15)) << Logs();
  EXPECT_EQ(Status(*c, *failing)->exit_code.value_or(-1), 7);
  // Bad submissions are refused with a reason; the daemon carries on.
  // A resent submission (same client token) is answered with the first job.
  p::SubmitJob once;
  once.argv = {"true"};
  once.workers = 1;
  once.client_token = "retry-token-1";
  auto first = c->Call<p::SubmitReply>(once, milliseconds(3000));
  auto again = c->Call<p::SubmitReply>(once, milliseconds(3000));
  ASSERT_TRUE(first.ok() && again.ok()) << first.status() << " " << again.status();
  EXPECT_EQ(first->job, again->job);
  auto listed = c->Call<p::JobsReply>(p::ListJobs{.include_finished = true}, milliseconds(1000));
  ASSERT_TRUE(listed.ok());
  int with_job = 0;
  for (const auto& row : listed->jobs) with_job += row.job == first->job;
  EXPECT_EQ(with_job, 1);
  auto too_big = Submit(*c, {"true"}, 64);
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("64"), std::string::npos) << too_big.status();
  auto missing = Submit(*c, {"/nonexistent/binary"}, 1);
  ASSERT_TRUE(missing.ok());
  ASSERT_TRUE(WaitState(*c, *missing, p::JobState::kFailed, 15)) << Logs();
  EXPECT_EQ(Status(*c, *missing)->exit_code.value_or(-1), 127);
  auto sleeper = Submit(*c, {"sleep", "30"}, 1);
  ASSERT_TRUE(sleeper.ok());
  p::CancelJob cancel;
  cancel.job = *sleeper;
  ASSERT_TRUE(c->Call<p::Ok>(cancel, milliseconds(2000)).ok());
  // Metrics and status over HTTP: ended jobs by how they ended (the names of
  // `aryl jobs`), live ones by state, no series that could only read 0.
  Result<std::pair<int, std::string>> metrics = aryl::Status::Unavailable("not scraped");
  ASSERT_TRUE(WaitFor([&] {
    metrics = daemon::HttpGet("127.0.0.1", http_port_, "/metrics");
    return metrics.ok() && metrics->second.find("aryl_jobs_finished_total{state=\"cancelled\"} 1\n") != std::string::npos;
  }, 5)) << (metrics.ok() ? metrics->second : metrics.status().ToString());
  const std::string& text = metrics->second;
  EXPECT_NE(text.find("aryl_jobs_finished_total{state=\"failed\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_jobs_finished_total{state=\"completed\"}"), std::string::npos) << text;
  EXPECT_EQ(text.find("aryl_jobs_finished_total{state=\"finished\"}"), std::string::npos) << text;
  EXPECT_EQ(text.find("\naryl_jobs_finished_total "), std::string::npos) << "a stray unlabelled series\n" << text;
  EXPECT_EQ(text.find("aryl_jobs{state=\"completed\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_jobs{state=\"queued\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(metrics->second.find("aryl_round_seconds_bucket"), std::string::npos);
  auto status = daemon::HttpGet("127.0.0.1", http_port_, "/status");
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(nlohmann::json::parse(status->second).contains("pools"));
}

// The fixture's start (live_cluster.h): an HTTP port held by a process outside
// the tests' reservations makes the scheduler stop at once ("bind http ...
// failed: Address already in use"); it starts again on a fresh HTTP port and
// serves there, and the port's holder is logged.
TEST_F(SystemTest, SchedulerStartMovesOffAHeldHttpPort) {
  // The holder binds as FreePort() tested the port and as the scheduler binds
  // (SO_REUSEADDR): a TIME_WAIT left on the port by an earlier test's
  // connection is no obstacle to either. A port that a live socket outside the
  // reservations took since the pick is left for a fresh one.
  int fd = -1;
  for (int attempt = 0; attempt < 5 && fd < 0; ++attempt) {
    if (attempt > 0) http_port_ = FreePort();
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    int one = 1;
    ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(http_port_));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 1) != 0) {
      std::fprintf(stderr, "cannot hold port %d: %s (trying another)\n", http_port_, std::strerror(errno));
      ::close(fd);
      fd = -1;
    }
  }
  ASSERT_GE(fd, 0) << "no port could be held";
  const int held = http_port_;
  std::thread release([fd] {
    std::this_thread::sleep_for(milliseconds(1500));
    ::close(fd);
  });
  StartScheduler();
  release.join();
  auto c = Client();
  ASSERT_TRUE(WaitFor([&] { return c->Call<p::NodesReply>(p::ListNodes{}, milliseconds(500)).ok(); }, 10)) << Logs();
  EXPECT_NE(ReadFile(dir_ / "scheduler.log")
                .find("bind http 127.0.0.1:" + std::to_string(held) + " failed: Address already in use"),
            std::string::npos)
      << "the port was not held after all: the test proves nothing\n" << Logs();
  EXPECT_NE(http_port_, held);
  EXPECT_NE(ReadFile(dir_ / "port-holders.log").find(":" + std::to_string(held)), std::string::npos)
      << ReadFile(dir_ / "port-holders.log");
  auto metrics = daemon::HttpGet("127.0.0.1", http_port_, "/metrics");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
}

// An early clean exit is a leave, not the job's end: rank 1 of a 1..2-worker
// job returns 0 at step 20 of 150 (the runtime reports "completed"); rank 0
// regroups and trains on; the scheduler sees its steps go on, journals
// left_early, grows the job back to 2 workers, and the job completes.
TEST_F(SystemTest, EarlyCleanExitIsALeaveAndTheJobGrowsBack) {
  StartScheduler();
  StartAgent("a", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  p::SubmitJob m;
  m.name = "early";
  m.argv = {ARYL_RT_TEST_WORKER, "--steps", "150", "--global-batch", "24", "--dataset", "240", "--sleep-ms", "40",
            "--exit-rank", "1", "--exit-step", "20"};
  m.min_workers = 1;
  m.max_workers = 2;
  m.elastic = "inplace";
  m.total_work = 150;
  m.env["ARYL_COLLECTIVE_TIMEOUT_MS"] = "20000";
  m.env["ARYL_FAULT_SETTLE_MS"] = "500";
  auto r = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_TRUE(r.ok()) << r.status();
  const p::JobId job = r->job;
  auto events = [&](const std::string& kind) {
    p::ListEvents q;
    q.job = job;
    q.kind = kind;
    auto e = c->Call<p::EventsReply>(q, milliseconds(2000));
    return e.ok() ? e->events : std::vector<p::EventRow>{};
  };
  ASSERT_TRUE(WaitFor([&] { return !events("left_early").empty(); }, 60)) << Logs();
  // Grown back: two workers again while it still runs.
  ASSERT_TRUE(WaitFor([&] {
    auto st = Status(*c, job);
    return st.ok() && (st->row.workers == 2 || st->row.state == p::JobState::kCompleted);
  }, 60)) << Logs();
  auto st = Status(*c, job);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->row.workers, 2) << "the job ended before it grew back" << Logs();
  ASSERT_TRUE(WaitState(*c, job, p::JobState::kCompleted, 90)) << Logs();
  st = Status(*c, job);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->exit_code, 0);
}

// Every rank ends at the last step, but the scheduler's last progress report
// lags (rank 0 reports at most every 0.25 s, and a new leader hears none until
// the agents are back): rank 1's exit at step 100 comes while the scheduler
// knows step 10, then rank 0's report of step 100. The exit's own step (its
// WorkerDone) says the peers did not go on without it: no leave, no regrow,
// and the job completes once its last worker ends. A fake agent speaks the
// protocol so the order is exact.
TEST_F(SystemTest, LaggingProgressAtTheLastStepIsNoLeave) {
  StartScheduler();
  auto c = Client();
  p::Client::Options fo;
  fo.endpoint = endpoint_;
  fo.identity = "f";
  auto fake = p::Client::Connect(fo);
  ASSERT_TRUE(fake.ok()) << fake.status();
  auto& agent = **fake;
  p::AgentRegister reg;
  reg.agent_id = "f";
  reg.host = "127.0.0.1";
  reg.gpu_type = "cpu";
  reg.slots = 2;
  reg.instance = 7;
  reg.cluster_id = "default";
  auto registered = agent.Call<p::AgentRegistered>(reg, milliseconds(3000));
  ASSERT_TRUE(registered.ok()) << registered.status() << Logs();
  std::vector<p::RunningWorker> running;
  std::uint64_t seq = 0;
  // Heartbeats as the agent sends them, and the commands it receives meanwhile.
  auto pump = [&](double seconds) {
    std::vector<p::Message> got;
    auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
      p::Heartbeat hb;
      hb.agent_id = "f";
      hb.seq = ++seq;
      hb.free_slots = 2 - static_cast<std::int64_t>(running.size());
      hb.workers = running;
      EXPECT_TRUE(agent.Send(hb, milliseconds(1000)).ok());
      auto m = agent.Receive(milliseconds(100));
      while (m.ok()) {
        if (!std::holds_alternative<p::HeartbeatAck>(*m) && !std::holds_alternative<p::WorkerExitAck>(*m))
          got.push_back(*m);
        m = agent.Receive(milliseconds(20));
      }
    }
    return got;
  };
  p::SubmitJob sj;
  sj.argv = {"train"};
  sj.min_workers = 1;
  sj.max_workers = 2;
  sj.elastic = "inplace";
  sj.total_work = 100;
  auto r = c->Call<p::SubmitReply>(sj, milliseconds(3000));
  ASSERT_TRUE(r.ok()) << r.status();
  const p::JobId job = r->job;
  std::optional<p::StartWorkers> start;
  for (int i = 0; i < 50 && !start; ++i)
    for (auto& m : pump(0.2))
      if (auto* s = std::get_if<p::StartWorkers>(&m)) start = *s;
  ASSERT_TRUE(start.has_value()) << Logs();
  ASSERT_EQ(start->workers.size(), 2u) << Logs();
  for (const auto& w : start->workers)
    running.push_back({job, w.worker, start->generation, w.rank, w.local_slot, 1000 + w.worker});
  (void)pump(0.5);
  auto progress = [&](std::int64_t step) {
    p::JobProgress jp;
    jp.job = job;
    jp.generation = start->generation;
    jp.step = step;
    jp.remaining_work = static_cast<double>(100 - step);
    jp.runtime = true;
    EXPECT_TRUE(agent.Send(jp, milliseconds(1000)).ok());
  };
  auto exit_completed = [&](std::int64_t rank) {
    auto it = std::find_if(running.begin(), running.end(), [&](const auto& w) { return w.rank == rank; });
    ASSERT_NE(it, running.end());
    p::WorkerExited ex;
    ex.agent_id = "f";
    ex.job = job;
    ex.worker = it->worker;
    ex.generation = it->generation;
    ex.exit_code = 0;
    ex.outcome = "completed";
    ex.runtime = true;
    ex.step = 100;
    running.erase(it);
    EXPECT_TRUE(agent.Send(ex, milliseconds(1000)).ok());
  };
  progress(10);
  (void)pump(0.3);
  exit_completed(1);
  (void)pump(0.3);
  progress(100);
  for (const auto& m : pump(2.0)) {
    EXPECT_FALSE(std::holds_alternative<p::StartWorkers>(m)) << "a worker was started into the ended rank's slot" << Logs();
    EXPECT_FALSE(std::holds_alternative<p::NewGeneration>(m)) << "the job was regrouped without the ended rank" << Logs();
  }
  p::ListEvents q;
  q.job = job;
  q.kind = "left_early";
  auto e = c->Call<p::EventsReply>(q, milliseconds(2000));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->events.empty()) << e->events[0].detail;
  exit_completed(0);
  ASSERT_TRUE(WaitFor([&] {
    (void)pump(0.2);
    auto st = Status(*c, job);
    return st.ok() && st->row.state == p::JobState::kCompleted;
  }, 10)) << Logs();
}

// A queued job says why it waits, as Slurm's REASON: here capacity, with the
// free slots against its size and the jobs ahead of it in the core's order
// (shortest estimated remaining time first: without --steps, the larger job).
TEST_F(SystemTest, QueuedJobSaysWhyItWaits) {
  StartScheduler();
  StartAgent("a", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  auto big = Submit(*c, {"sleep", "30"}, 2);
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_TRUE(WaitState(*c, *big, p::JobState::kRunning, 20)) << Logs();
  auto one = Submit(*c, {"true"}, 1);
  auto two = Submit(*c, {"true"}, 2);
  ASSERT_TRUE(one.ok() && two.ok());
  auto s1 = Status(*c, *one), s2 = Status(*c, *two), sb = Status(*c, *big);
  ASSERT_TRUE(s1.ok() && s2.ok() && sb.ok());
  EXPECT_EQ(s1->pending_reason, "Capacity: needs 1 worker at once; cpu 0 of 2 slots free; 1 queued job ahead of it");
  EXPECT_EQ(s2->pending_reason, "Capacity: needs 2 workers at once; cpu 0 of 2 slots free");
  EXPECT_EQ(s1->row.pending_reason, s1->pending_reason) << "the row carries it too";
  EXPECT_EQ(sb->pending_reason, "") << "a running job waits for nothing";
  // A queued job has no workers and no rate: 0 steps/s in its row and its
  // series (not the 1.0 an unmeasured running job's model once gave).
  EXPECT_EQ(s1->row.steps_per_second, 0);
  const std::regex queued_rate("aryl_job_steps_per_second\\{job_id=\"" + std::to_string(*two) + "\",[^}]*\\} (\\S+)\n");
  std::smatch m;
  std::string text;
  ASSERT_TRUE(WaitFor([&] {
    auto metrics = daemon::HttpGet("127.0.0.1", http_port_, "/metrics");
    if (metrics.ok()) text = metrics->second;
    return std::regex_search(text, m, queued_rate);
  }, 5)) << text;
  EXPECT_EQ(m[1].str(), "0") << text;
  for (p::JobId j : {*big, *one, *two}) {
    p::CancelJob cancel;
    cancel.job = j;
    (void)c->Call<p::Ok>(cancel, milliseconds(2000));
  }
}

// aryl-run submits, streams, and exits with the job's exit code; a job's 2
// (python3 with a missing script) is the job's, not aryl-run's usage error.
TEST_F(SystemTest, ArylRunExitCode) {
  StartScheduler();
  StartAgent("a", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  auto [code, out] = RunArylRun({"--workers", "2", "--", "sh", "-c", "exit 5"}, "aryl-run.log", 20);
  EXPECT_EQ(code, 5) << out << Logs();
  auto [code2, out2] =
      RunArylRun({"--workers", "1", "--", "sh", "-c", "echo 'no such file' >&2; exit 2"}, "aryl-run-2.log", 20);
  EXPECT_EQ(code2, 2) << out2 << Logs();
  EXPECT_EQ(RunArylRun({"--workers", "1", "--", "true"}, "aryl-run-0.log", 20).first, 0) << Logs();
}

// A failed job: aryl-run names the worker, its rank and node, prints the last
// 20 lines of its stderr (read from the agent through the scheduler) and the
// command that shows all of it.
TEST_F(SystemTest, ArylRunShowsTheFailedWorkersStderr) {
  StartScheduler();
  StartAgent("a", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  auto [code, out] = RunArylRun({"--workers", "2", "--", "sh", "-c",
                                 "if [ \"$ARYL_RANK\" = 1 ]; then i=1; while [ $i -le 100 ]; do echo line-$i >&2; "
                                 "i=$((i+1)); done; exit 3; fi; sleep 30"},
                                "aryl-run.log");
  EXPECT_EQ(code, 3) << out << Logs();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(worker ([0-9]+) \(rank 1\) on a exited with 3)"))) << out;
  EXPECT_NE(out.find("the stderr of worker " + m[1].str() + " (rank 1) on a, last 20 lines:\n  line-81\n"),
            std::string::npos) << out;
  EXPECT_NE(out.find("  line-100\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("line-80\n"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("all of it: aryl logs [0-9]+ --rank 1 --stderr --scheduler " +
                                                std::regex_replace(endpoint_, std::regex(R"([.])"), R"(\.)") + "\n")))
      << out;
  // At most the last 4 KiB: of three 3000-byte lines and a short one, the
  // last long one and the short one; the one cut by the window is left out.
  auto [code2, out2] = RunArylRun(
      {"--workers", "1", "--", "sh", "-c",
       "for x in A B C; do printf \"$x-%03000d\\n\" 0 >&2; done; echo the-end >&2; exit 4"},
      "aryl-run-2.log");
  EXPECT_EQ(code2, 4) << out2 << Logs();
  EXPECT_NE(out2.find("last 2 lines:\n  C-000"), std::string::npos) << out2;
  EXPECT_NE(out2.find("  the-end\n"), std::string::npos) << out2;
  EXPECT_EQ(out2.find("A-000"), std::string::npos) << out2;
  EXPECT_EQ(out2.find("B-000"), std::string::npos) << out2;
}

// One rank ends early and cleanly (exit 0); its peer then fails as a torchrun
// script's rank does when its collective's peer is gone ("Connection closed
// by peer"). The job's failure names the first worker that ended, with its
// rank, node and exit code, and the worker that failed, whose stderr aryl-run shows.
TEST_F(SystemTest, ArylRunNamesTheWorkerThatEndedFirst) {
  StartScheduler();
  StartAgent("a", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  // Rank 0 fails only once it is stopped, which the scheduler does only after
  // rank 1's exit: the order cannot change on a busy machine.
  auto [code, out] = RunArylRun({"--workers", "2", "--", "sh", "-c",
                                 "if [ \"$ARYL_RANK\" = 1 ]; then exit 0; fi; "
                                 "trap 'echo Connection closed by peer >&2; exit 1' TERM; sleep 30 & wait"},
                                "aryl-run.log");
  EXPECT_EQ(code, 1) << out << Logs();
  const std::regex report(R"(worker [0-9]+ \(rank 0\) on a exited with 1; the first to end was )"
                          R"(worker [0-9]+ \(rank 1\) on a, which exited with 0 before its peers)");
  EXPECT_TRUE(std::regex_search(out, report)) << out << Logs();
  EXPECT_NE(out.find("\n  Connection closed by peer\n"), std::string::npos) << out;
  EXPECT_NE(out.find("aryl logs 1 --rank 0 --stderr"), std::string::npos) << out;
  // The report outlives the job: the scheduler's status says the same.
  auto s = Status(*c, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(s->message.find("the first to end was worker"), std::string::npos) << s->message;
}

// aryl-run --follow prints rank 0's output read through the scheduler from
// whichever agent runs it: after `drain --now` moves the job from one agent
// (its own log dir) to the other, the new rank 0's lines follow too.
TEST_F(SystemTest, ArylRunFollowsRankZeroWhereverItMoves) {
  StartScheduler();
  StartAgent("a", 1);
  StartAgent("b", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  pid_t run = StartArylRun({"--follow", "--workers", "1", "--", "sh", "-c",
                            "i=0; while [ $i -lt 50 ]; do echo line-$i; i=$((i+1)); sleep 0.1; done"},
                           "aryl-run.log");
  std::string first;
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, 1);
    if (!r.ok() || r->row.state != p::JobState::kRunning || r->placement.empty()) return false;
    first = r->placement[0].agent_id;
    return ReadFile(dir_ / "aryl-run.log").find("line-5\n") != std::string::npos;
  }, 20)) << ReadFile(dir_ / "aryl-run.log") << Logs();
  ASSERT_TRUE(c->Call<p::Ok>(p::NodeCommand{.node = first, .action = "drain-now"}, milliseconds(2000)).ok());
  auto done = WaitExit(run, 40);
  ASSERT_TRUE(done.has_value()) << ReadFile(dir_ / "aryl-run.log") << Logs();
  const std::string out = ReadFile(dir_ / "aryl-run.log");
  EXPECT_EQ(done->exit_code, 0) << out;
  size_t starts = 0;
  for (size_t at = out.find("line-0\n"); at != std::string::npos; at = out.find("line-0\n", at + 1)) ++starts;
  EXPECT_EQ(starts, 2u) << "one line-0 per start, on " << first << " and on the other agent\n" << out;
  EXPECT_NE(out.find("line-49\n"), std::string::npos) << out;
}

// After SIGTERM aryl-run cancels the job and waits --cancel-grace for it to
// stop, no longer: with the scheduler gone it exits 202 (the job's end is unknown).
TEST_F(SystemTest, ArylRunCancelWaitIsBounded) {
  StartScheduler();
  StartAgent("a", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  pid_t run = StartArylRun({"--cancel-grace", "2", "--workers", "1", "--", "sh", "-c", "sleep 30"}, "aryl-run.log");
  ASSERT_TRUE(WaitState(*c, 1, p::JobState::kRunning, 15)) << Logs();
  Kill(scheduler_pid_);
  const auto signalled = Clock::now();
  launcher_.Signal(run, SIGTERM);
  // The cancel's own call times out after 3 s; the grace is 2 s.
  auto done = WaitExit(run, 20);
  ASSERT_TRUE(done.has_value()) << "aryl-run still waits 20 s after SIGTERM\n" << ReadFile(dir_ / "aryl-run.log");
  EXPECT_EQ(done->exit_code, 202) << ReadFile(dir_ / "aryl-run.log");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - signalled).count(), 15);
  EXPECT_NE(ReadFile(dir_ / "aryl-run.log").find("its end is unknown"), std::string::npos)
      << ReadFile(dir_ / "aryl-run.log");
}

// SIGKILL the scheduler mid-run and restart it: the running job keeps running
// (no restart), the queued job stays queued, both finish, nothing is duplicated.
TEST_F(SystemTest, SchedulerRestart) {
  StartScheduler();
  StartAgent("a", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  fs::path marks = dir_ / "marks";
  fs::create_directories(marks);
  // Every start of a worker leaves a mark: a restart would leave a second one.
  std::string body = "echo x >> " + marks.string() + "/job$ARYL_JOB_ID-w$ARYL_WORKER_ID; sleep 4";
  auto first = Submit(*c, {"sh", "-c", body}, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Submit(*c, {"sh", "-c", body}, 2);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(WaitState(*c, *first, p::JobState::kRunning, 10)) << Logs();
  EXPECT_EQ(Status(*c, *second)->row.state, p::JobState::kQueued);
  std::this_thread::sleep_for(milliseconds(500));
  Kill(scheduler_pid_);
  std::this_thread::sleep_for(milliseconds(500));
  StartScheduler();
  auto c2 = Client();
  ASSERT_TRUE(WaitAgents(*c2, 1)) << Logs();
  auto s1 = Status(*c2, *first);
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_EQ(s1->row.state, p::JobState::kRunning);
  EXPECT_EQ(Status(*c2, *second)->row.state, p::JobState::kQueued);
  ASSERT_TRUE(WaitState(*c2, *first, p::JobState::kCompleted, 15)) << Logs();
  ASSERT_TRUE(WaitState(*c2, *second, p::JobState::kCompleted, 15)) << Logs();
  p::ListJobs all;
  all.include_finished = true;
  auto jobs = c2->Call<p::JobsReply>(all, milliseconds(1000));
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->jobs.size(), 2u);
  // Exactly one start per worker: the scheduler's restart restarted nothing.
  int files = 0;
  for (const auto& e : fs::directory_iterator(marks)) {
    files++;
    EXPECT_EQ(ReadFile(e.path()), "x\n") << e.path();
  }
  EXPECT_EQ(files, 4);
}

// Agents that joined one by one (each a journaled server_added row, no
// rebuild): after a scheduler restart the replayed core places the job
// exactly where it runs, so nothing is restarted or resized.
TEST_F(SystemTest, SchedulerRestartAfterAgentsJoined) {
  StartScheduler();
  StartAgent("a", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  fs::path marks = dir_ / "marks";
  fs::create_directories(marks);
  auto job = Submit(*c, {"sh", "-c", "echo x >> " + marks.string() + "/w$ARYL_WORKER_ID; sleep 6"}, 0, 1, 4);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitState(*c, *job, p::JobState::kRunning, 10)) << Logs();
  StartAgent("b", 2);
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  // The job grows onto the new agent (its curve is no longer capped at 2).
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, *job);
    return r.ok() && r->row.workers == 4 && r->placement.size() == 2;
  }, 10)) << Logs();
  auto before = Status(*c, *job);
  ASSERT_TRUE(before.ok());
  Kill(scheduler_pid_);
  StartScheduler();
  auto c2 = Client();
  ASSERT_TRUE(WaitAgents(*c2, 2)) << Logs();
  std::this_thread::sleep_for(milliseconds(1000));
  auto after = Status(*c2, *job);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->row.state, p::JobState::kRunning);
  EXPECT_EQ(after->row.workers, 4);
  EXPECT_EQ(after->row.generation, before->row.generation);
  EXPECT_EQ(after->placement.size(), 2u);
  ASSERT_TRUE(WaitState(*c2, *job, p::JobState::kCompleted, 20)) << Logs();
  for (const auto& e : fs::directory_iterator(marks)) EXPECT_EQ(ReadFile(e.path()), "x\n") << e.path();
}

// SIGKILL an agent: its workers die with it; the elastic job shrinks and the
// inelastic one is requeued; both finish once the agent is back.
TEST_F(SystemTest, AgentKilled) {
  StartScheduler();
  pid_t a = StartAgent("a", 2);
  pid_t b = StartAgent("b", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  fs::path pids = dir_ / "pids";
  fs::create_directories(pids);
  std::string body = "echo $$ > " + pids.string() + "/$ARYL_JOB_ID-$ARYL_WORKER_ID; sleep 5";
  auto rigid = Submit(*c, {"sh", "-c", body}, 2);
  ASSERT_TRUE(rigid.ok()) << rigid.status();
  auto elastic = Submit(*c, {"sh", "-c", body}, 0, 1, 2);
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  ASSERT_TRUE(WaitState(*c, *rigid, p::JobState::kRunning, 10)) << Logs();
  ASSERT_TRUE(WaitState(*c, *elastic, p::JobState::kRunning, 10)) << Logs();
  // Kill the agent that hosts the inelastic job.
  auto st = Status(*c, *rigid);
  ASSERT_TRUE(st.ok());
  ASSERT_FALSE(st->placement.empty());
  std::string victim = st->placement[0].agent_id;
  std::this_thread::sleep_for(milliseconds(300));
  std::vector<pid_t> victim_workers;
  for (const auto& e : fs::directory_iterator(pids)) {
    if (e.path().filename().string().rfind(std::to_string(*rigid) + "-", 0) == 0)
      victim_workers.push_back(std::atoi(ReadFile(e.path()).c_str()));
  }
  ASSERT_EQ(victim_workers.size(), 2u);
  Kill(victim == "a" ? a : b);
  // The killed agent's workers are gone (PR_SET_PDEATHSIG).
  int dead = 0;
  for (pid_t w : victim_workers) {
    WaitFor([&] {
      std::string stat = ReadFile("/proc/" + std::to_string(w) + "/stat");
      auto paren = stat.rfind(')');
      return stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z");
    }, 3);
    std::string stat = ReadFile("/proc/" + std::to_string(w) + "/stat");
    if (stat.empty() || stat.find(") Z") != std::string::npos) dead++;
  }
  EXPECT_GE(dead, 2);
  // The inelastic job is requeued when the scheduler notices (agent timeout):
  // queued, or restarted on the other agent once the elastic job finished and
  // the lost agent's lease has run out (8 s + 6 s here: it might only be cut off).
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, *rigid);
    return r.ok() && r->row.generation >= 2;
  }, 25)) << Logs();
  StartAgent(victim, 2);
  ASSERT_TRUE(WaitState(*c, *rigid, p::JobState::kCompleted, 25)) << Logs();
  ASSERT_TRUE(WaitState(*c, *elastic, p::JobState::kCompleted, 25)) << Logs();
}

// SIGKILL an agent under an elastic job that spans two agents: the job shrinks
// onto the survivor (its workers there keep running) and finishes.
TEST_F(SystemTest, AgentKilledElasticShrinks) {
  StartScheduler();
  StartAgent("a", 2);
  pid_t b = StartAgent("b", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  fs::path marks = dir_ / "marks";
  fs::create_directories(marks);
  // Long enough that the job is still running when the agent's loss is noticed,
  // on a busy machine too.
  auto job = Submit(*c, {"sh", "-c", "echo x >> " + marks.string() + "/w$ARYL_WORKER_ID; sleep 12"}, 0, 1, 4);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, *job);
    return r.ok() && r->row.workers == 4;
  }, 10)) << Logs();
  // Every worker has left its mark (on a busy machine a worker's shell can
  // still be starting when the scheduler counts it; killed then, its mark
  // would be empty).
  ASSERT_TRUE(WaitFor([&] {
    int marked = 0;
    for (const auto& e : fs::directory_iterator(marks)) marked += ReadFile(e.path()) == "x\n";
    return marked == 4;
  }, 10)) << Logs();
  Kill(b);
  // Noticed after the agent timeout: the job now runs on "a" only, same workers there.
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, *job);
    return r.ok() && r->placement.size() == 1 && r->placement[0].agent_id == "a";
  }, 8)) << Logs();
  auto r = Status(*c, *job);
  EXPECT_EQ(r->row.state, p::JobState::kRunning);
  EXPECT_GE(r->row.rescales, 1);
  ASSERT_TRUE(WaitState(*c, *job, p::JobState::kCompleted, 30)) << Logs();
  // No worker was started twice.
  for (const auto& e : fs::directory_iterator(marks)) EXPECT_EQ(ReadFile(e.path()), "x\n") << e.path();
}

// A job that has not said how it resizes (no --elastic, no runtime hello yet)
// shrinks at once when the core gives its slots to another job: the shrink is
// a restart, the new job starts with all its workers in its first generation,
// and no generation repeats. Before, the shrink waited for the job's kind (up
// to 15 s) while the core had already given its slots away: the new job found
// them held ("the scheduler's view and the agent disagree") and started short
// or with nobody, one generation per tick.
TEST_F(SystemTest, ShrinkOfJobOfUnknownKindFreesItsSlotsAtOnce) {
  StartScheduler();
  StartAgent("a", 4);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  p::SubmitJob m;
  m.argv = {"sh", "-c", "sleep 30"};
  m.min_workers = 1;
  m.max_workers = 4;  // and no m.elastic: restart until a hello says otherwise
  auto a = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, a->job);
    return r.ok() && r->row.workers == 4;
  }, 10)) << Logs();
  auto b = Submit(*c, {"sh", "-c", "sleep 3"}, 2);
  ASSERT_TRUE(b.ok()) << b.status();
  // Well inside the 15 s kind-detection window of job a.
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, *b);
    return r.ok() && r->row.state == p::JobState::kRunning && r->row.workers == 2;
  }, 6)) << Logs();
  EXPECT_EQ(Status(*c, *b)->row.generation, 1) << Logs();
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, a->job);
    return r.ok() && r->row.workers == 2;
  }, 10)) << Logs();
  ASSERT_TRUE(WaitState(*c, *b, p::JobState::kCompleted, 20)) << Logs();
  const std::string log = ReadFile(dir_ / "scheduler.log");
  EXPECT_EQ(log.find("disagree"), std::string::npos) << Logs();
  EXPECT_EQ(log.find("generation 2 on -"), std::string::npos) << Logs();
}

// SIGKILL one worker: the job continues (a replacement joins) and finishes.
TEST_F(SystemTest, WorkerKilled) {
  StartScheduler();
  StartAgent("a", 3);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  fs::path pids = dir_ / "pids";
  fs::create_directories(pids);
  auto job = Submit(*c, {"sh", "-c", "echo $$ > " + pids.string() + "/$ARYL_WORKER_ID; sleep 3"}, 0, 2, 3);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitFor([&] { return fs::exists(pids / "0") && !ReadFile(pids / "0").empty(); }, 10)) << Logs();
  pid_t w0 = std::atoi(ReadFile(pids / "0").c_str());
  ASSERT_GT(w0, 0);
  ::kill(w0, SIGKILL);
  // A replacement worker (id 3) joins; the job finishes normally.
  EXPECT_TRUE(WaitFor([&] { return fs::exists(pids / "3"); }, 10)) << Logs();
  ASSERT_TRUE(WaitState(*c, *job, p::JobState::kCompleted, 20)) << Logs();
}

// Garbage, malformed envelopes and oversize frames from a raw ZeroMQ socket
// neither crash nor stall the daemon.
TEST_F(SystemTest, GarbageFrames) {
  StartScheduler();
  auto c = Client();
  ASSERT_TRUE(WaitFor([&] { return c->Call<p::NodesReply>(p::ListNodes{}, milliseconds(300)).ok(); }, 10)) << Logs();
  zmq::context_t ctx;
  for (int round = 0; round < 3; ++round) {
    zmq::socket_t raw(ctx, zmq::socket_type::dealer);
    raw.set(zmq::sockopt::linger, 0);
    raw.connect(endpoint_);
    std::string junk(1000, '\0');
    for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>((i * 7919 + round) % 256);
    raw.send(zmq::buffer(junk), zmq::send_flags::dontwait);                      // one frame
    raw.send(zmq::str_buffer("c1"), zmq::send_flags::sndmore);                   // bad JSON
    raw.send(zmq::str_buffer("{not json"), zmq::send_flags::dontwait);
    raw.send(zmq::str_buffer("c2"), zmq::send_flags::sndmore);                   // wrong type
    raw.send(zmq::str_buffer(R"({"v":1,"type":"heartbeat","agent_id":"x"})"), zmq::send_flags::dontwait);
    raw.send(zmq::str_buffer("c3"), zmq::send_flags::sndmore);                   // future version
    raw.send(zmq::str_buffer(R"({"v":99,"type":"list_nodes"})"), zmq::send_flags::dontwait);
    raw.send(zmq::str_buffer("a"), zmq::send_flags::sndmore);                    // too many frames
    raw.send(zmq::str_buffer("b"), zmq::send_flags::sndmore);
    raw.send(zmq::str_buffer("c"), zmq::send_flags::sndmore);
    raw.send(zmq::str_buffer("d"), zmq::send_flags::dontwait);
    raw.send(zmq::message_t(), zmq::send_flags::dontwait);                        // empty
    // A valid request on the same connection: once its answer is here, every
    // frame above has reached the scheduler (one connection keeps its order).
    raw.send(zmq::str_buffer("probe"), zmq::send_flags::sndmore);
    raw.send(zmq::str_buffer(R"({"v":1,"type":"list_nodes"})"), zmq::send_flags::dontwait);
    bool answered = false;
    for (auto until = Clock::now() + std::chrono::seconds(10); !answered && Clock::now() < until;) {
      zmq::pollitem_t item{raw.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, milliseconds(100));
      std::vector<zmq::message_t> parts;
      while (item.revents & ZMQ_POLLIN) {
        zmq::message_t part;
        if (!raw.recv(part, zmq::recv_flags::dontwait)) break;
        bool more = part.more();
        parts.push_back(std::move(part));
        if (!more) break;
      }
      for (const auto& part : parts) answered |= part.to_string_view() == "probe";
    }
    EXPECT_TRUE(answered) << "no answer to a valid request after the garbage";
    std::string huge(2u << 20, 'x');                                              // 2 MiB
    raw.send(zmq::str_buffer("c4"), zmq::send_flags::sndmore);
    raw.send(zmq::buffer(huge), zmq::send_flags::dontwait);
    // A well-formed request on another connection is answered promptly.
    auto t0 = Clock::now();
    auto r = c->Call<p::NodesReply>(p::ListNodes{}, milliseconds(2000));
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.0);  // promptly, on a busy machine too
  }
  launcher_.Poll();
  EXPECT_TRUE(launcher_.Running(scheduler_pid_)) << Logs();
  // Submitting a job that claims to be an agent is refused, too.
  p::AgentRegister fake;
  fake.agent_id = "someone-else";
  fake.host = "h";
  fake.gpu_type = "cpu";
  auto reg = c->Call<p::AgentRegistered>(fake, milliseconds(1000));
  EXPECT_FALSE(reg.ok());
  // Every refused frame counts as a bad request (decode failures included).
  auto metrics = daemon::HttpGet("127.0.0.1", http_port_, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  std::smatch sm;
  std::regex re(R"(aryl_bad_requests_total (\d+))");
  ASSERT_TRUE(WaitFor([&] {
    auto m = daemon::HttpGet("127.0.0.1", http_port_, "/metrics");
    std::string body = m.ok() ? m->second : "";
    return std::regex_search(body, sm, re) && std::stoi(sm[1]) >= 18;  // 6 refused frames a round
  }, 5)) << "bad requests counted: " << (std::regex_search(metrics->second, sm, re) ? sm[1].str() : "none");
}

// Operators drain a node (its workers move off, no new ones land), resume it,
// and remove a dead one, which then no longer counts toward submit capacity.
// After the drain's forced shrink the job keeps its size for the resize dwell
// (sched/resize_rule.h; 2 s here, 60 s by default), then grows back.
TEST_F(SystemTest, NodesDrainResumeRemove) {
  StartScheduler({"--resize-dwell", "2"});
  StartAgent("a", 2);
  pid_t b = StartAgent("b", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  auto job = Submit(*c, {"sleep", "60"}, 0, 1, 4);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitFor([&] { auto r = Status(*c, *job); return r.ok() && r->row.workers == 4; }, 15)) << Logs();
  auto drain = c->Call<p::Ok>(p::NodeCommand{.node = "b", .action = "drain-now"}, milliseconds(2000));
  ASSERT_TRUE(drain.ok()) << drain.status();
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, *job);
    if (!r.ok() || r->row.workers != 2) return false;
    for (const auto& pl : r->placement) if (pl.agent_id == "b") return false;
    return true;
  }, 20)) << Logs();
  // The journal says the workers moved off for a drain: b did not fail.
  p::ListEvents q;
  q.job = *job;
  auto events = c->Call<p::EventsReply>(q, milliseconds(2000));
  ASSERT_TRUE(events.ok()) << events.status();
  bool drained = false;
  for (const auto& e : events->events) {
    drained |= e.detail.find("drained (--now): ") != std::string::npos;
    EXPECT_EQ(e.detail.find("server failed"), std::string::npos) << e.kind << ": " << e.detail;
  }
  EXPECT_TRUE(drained) << "no event of the job names the drain" << Logs();
  auto nodes = c->Call<p::NodesReply>(p::ListNodes{}, milliseconds(1000));
  ASSERT_TRUE(nodes.ok());
  for (const auto& n : nodes->nodes)
    if (n.agent_id == "b") EXPECT_TRUE(n.state == p::NodeState::kDraining || n.state == p::NodeState::kDrained);
  auto bad = c->Call<p::Ok>(p::NodeCommand{.node = "b", .action = "reboot"}, milliseconds(1000));
  EXPECT_FALSE(bad.ok());
  auto remove_live = c->Call<p::Ok>(p::NodeCommand{.node = "b", .action = "remove"}, milliseconds(1000));
  EXPECT_FALSE(remove_live.ok()) << "a connected node cannot be removed";
  auto resume = c->Call<p::Ok>(p::NodeCommand{.node = "b", .action = "resume"}, milliseconds(2000));
  ASSERT_TRUE(resume.ok()) << resume.status();
  ASSERT_TRUE(WaitFor([&] { auto r = Status(*c, *job); return r.ok() && r->row.workers == 4; }, 20)) << Logs();
  // b dies: a 4-worker job no longer fits the live cluster; after remove, b is gone from the listing.
  Kill(b);
  ASSERT_TRUE(WaitFor([&] {
    auto n = c->Call<p::NodesReply>(p::ListNodes{}, milliseconds(500));
    if (!n.ok()) return false;
    for (const auto& x : n->nodes) if (x.agent_id == "b") return !x.connected;
    return false;
  }, 15)) << Logs();
  auto too_big = Submit(*c, {"true"}, 4);
  EXPECT_FALSE(too_big.ok()) << "capacity counts only live nodes";
  auto removed = c->Call<p::Ok>(p::NodeCommand{.node = "b", .action = "remove"}, milliseconds(2000));
  ASSERT_TRUE(removed.ok()) << removed.status();
  nodes = c->Call<p::NodesReply>(p::ListNodes{}, milliseconds(1000));
  ASSERT_TRUE(nodes.ok());
  for (const auto& n : nodes->nodes) EXPECT_NE(n.agent_id, "b");
}

// drain (without --now) is Slurm's DRAIN: the job on the node runs to its end
// there with the same workers (no preemption, no new generation), nothing new
// goes there, and once it is empty the node shows drained, also after a
// scheduler restart, until resume.
TEST_F(SystemTest, DrainLetsRunningJobsFinish) {
  StartScheduler();
  StartAgent("a", 2);
  StartAgent("b", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  auto first = Submit(*c, {"sleep", "4"}, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  std::string node;
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, *first);
    if (!r.ok() || r->row.state != p::JobState::kRunning || r->placement.empty()) return false;
    node = r->placement.front().agent_id;
    return true;
  }, 10)) << Logs();
  const std::string other = node == "a" ? "b" : "a";
  auto drain = c->Call<p::Ok>(p::NodeCommand{.node = node, .action = "drain"}, milliseconds(2000));
  ASSERT_TRUE(drain.ok()) << drain.status();
  EXPECT_NE(drain->message.find("running jobs finish"), std::string::npos) << drain->message;
  auto state_of = [&](const std::string& id) {
    auto n = c->Call<p::NodesReply>(p::ListNodes{}, milliseconds(1000));
    if (n.ok())
      for (const auto& x : n->nodes)
        if (x.agent_id == id) return x.state;
    return p::NodeState::kDisconnected;
  };
  EXPECT_EQ(state_of(node), p::NodeState::kDraining);
  auto second = Submit(*c, {"sleep", "1"}, 2);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, *second);
    return r.ok() && r->row.state != p::JobState::kQueued;
  }, 10)) << Logs();
  auto r2 = Status(*c, *second);
  ASSERT_TRUE(r2.ok());
  for (const auto& pl : r2->placement) EXPECT_EQ(pl.agent_id, other) << "nothing new on a draining node";
  auto mid = Status(*c, *first);
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(mid->row.state, p::JobState::kRunning);
  EXPECT_EQ(mid->row.generation, 1) << "not moved";
  ASSERT_TRUE(WaitState(*c, *first, p::JobState::kCompleted, 20)) << Logs();
  auto done = Status(*c, *first);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->row.generation, 1) << "ran to its end where it was";
  ASSERT_TRUE(WaitFor([&] { return state_of(node) == p::NodeState::kDrained; }, 5)) << Logs();
  EXPECT_FALSE(Submit(*c, {"true"}, 4).ok()) << "a drained node's slots are not capacity";

  Kill(scheduler_pid_);
  fs::rename(dir_ / "scheduler.log", dir_ / "scheduler-1.log");
  StartScheduler();
  c = Client();
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  EXPECT_EQ(state_of(node), p::NodeState::kDrained) << "a drain survives a restart";
  auto third = Submit(*c, {"sleep", "1"}, 2);
  ASSERT_TRUE(third.ok()) << third.status();
  ASSERT_TRUE(WaitState(*c, *third, p::JobState::kCompleted, 20)) << Logs();
  auto r3 = Status(*c, *third);
  ASSERT_TRUE(r3.ok());
  for (const auto& pl : r3->placement) EXPECT_EQ(pl.agent_id, other);

  ASSERT_TRUE(c->Call<p::Ok>(p::NodeCommand{.node = node, .action = "resume"}, milliseconds(2000)).ok());
  EXPECT_EQ(state_of(node), p::NodeState::kAvailable);
  auto big = Submit(*c, {"true"}, 4);
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_TRUE(WaitState(*c, *big, p::JobState::kCompleted, 20)) << Logs();
}

// A drained inference server is not lent to training until it is resumed.
TEST_F(SystemTest, DrainedInferenceServerIsNotOffered) {
  StartScheduler();
  StartAgent("i", 2, "inference");
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  ASSERT_TRUE(c->Call<p::Ok>(p::NodeCommand{.node = "i", .action = "drain"}, milliseconds(2000)).ok());
  p::PoolOffer offer;
  offer.servers = {"i"};
  auto refused = c->Call<p::Ok>(offer, milliseconds(2000));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("drained"), std::string::npos) << refused.status();
  ASSERT_TRUE(c->Call<p::Ok>(p::NodeCommand{.node = "i", .action = "resume"}, milliseconds(2000)).ok());
  auto lent = c->Call<p::Ok>(offer, milliseconds(2000));
  EXPECT_TRUE(lent.ok()) << lent.status();
}

// A restart-kind job (a program without the runtime) grows 2 -> 4 onto a
// lent server by stopping and starting every worker: describe lists that
// rescale with its kind, sizes and the pause from the stop to the new group's
// first step=N line.
TEST_F(SystemTest, RestartRescaleShowsItsPauseInDescribe) {
  StartScheduler();
  StartAgent("t", 2);
  StartAgent("i", 2, "inference");
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  p::SubmitJob m;
  m.argv = {"sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo step=$i; i=$((i+1)); sleep 0.05; done"};
  m.min_workers = 1;
  m.max_workers = 4;
  m.elastic = "restart";
  auto sub = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_TRUE(sub.ok()) << sub.status();
  const p::JobId job = sub->job;
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, job);
    return r.ok() && r->row.workers == 2 && r->row.step > 0;
  }, 15)) << Logs();
  auto first = c->Call<p::JobDescription>(p::DescribeJob{.job = job}, milliseconds(3000));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_GT(first->start_time, 0);
  p::PoolOffer offer;
  offer.servers = {"i"};
  ASSERT_TRUE(c->Call<p::Ok>(offer, milliseconds(3000)).ok());
  p::Rescale seen;
  ASSERT_TRUE(WaitFor([&] {
    p::DescribeJob q;
    q.job = job;
    auto d = c->Call<p::JobDescription>(q, milliseconds(3000));
    if (!d.ok()) return false;
    for (const auto& r : d->rescales)
      if (r.kind == "restart" && r.pause_known) {
        seen = r;
        return true;
      }
    return false;
  }, 30)) << Logs();
  EXPECT_EQ(seen.from_workers, 2);
  EXPECT_EQ(seen.to_workers, 4);
  EXPECT_TRUE(seen.planned);
  EXPECT_GT(seen.phases.total, 0);
  EXPECT_LT(seen.phases.total, 20);
  EXPECT_GE(seen.generation, 2);
  // "Started" is the first start, not the restart's.
  auto after = c->Call<p::JobDescription>(p::DescribeJob{.job = job}, milliseconds(3000));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->start_time, first->start_time);
  EXPECT_LT(after->start_time, seen.time);
  ASSERT_TRUE(c->Call<p::Ok>(p::CancelJob{.job = job}, milliseconds(3000)).ok());
}

// Listings come in pages; a missing program's exec error reaches the job's status.
TEST_F(SystemTest, PagedListingAndExecError) {
  StartScheduler();
  StartAgent("a", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Submit(*c, {"true"}, 1).ok());
  p::ListJobs page;
  page.include_finished = true;
  page.limit = 2;
  std::vector<p::JobId> seen;
  for (int guard = 0; guard < 10; ++guard) {
    auto r = c->Call<p::JobsReply>(page, milliseconds(1000));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(r->jobs.size(), 2u);
    for (const auto& row : r->jobs) seen.push_back(row.job);
    if (!r->more) break;
    page.after = r->jobs.back().job;
  }
  EXPECT_EQ(seen, (std::vector<p::JobId>{1, 2, 3, 4, 5}));
  auto missing = Submit(*c, {"/nonexistent/trainer"}, 1);
  ASSERT_TRUE(missing.ok());
  ASSERT_TRUE(WaitState(*c, *missing, p::JobState::kFailed, 15)) << Logs();
  auto st = Status(*c, *missing);
  ASSERT_TRUE(st.ok());
  EXPECT_NE(st->message.find("/nonexistent/trainer"), std::string::npos) << st->message;
}

// CURVE: a listed client key gets in; an unknown one is refused.
TEST_F(SystemTest, CurveRefusesUnknownKey) {
  fs::path keys = dir_ / "keys", agents = dir_ / "agents", users = dir_ / "users";
  ASSERT_TRUE(p::GenerateKeyPair(keys.string(), "scheduler").ok());
  ASSERT_TRUE(p::GenerateKeyPair(keys.string(), "client").ok());
  ASSERT_TRUE(p::GenerateKeyPair(keys.string(), "a").ok());
  ASSERT_TRUE(p::GenerateKeyPair(keys.string(), "stranger").ok());
  fs::create_directories(agents);
  fs::create_directories(users);
  fs::copy_file(keys / "client.pub", users / "client.pub");
  fs::copy_file(keys / "a.pub", agents / "a.pub");
  StartScheduler({"--curve-key", (keys / "scheduler.key").string(), "--curve-agents", agents.string(), "--curve-users",
                  users.string()});
  auto server_pub = p::LoadPublicKey((keys / "scheduler.pub").string());
  ASSERT_TRUE(server_pub.ok());
  auto client_kp = p::LoadKeyPair((keys / "client.key").string());
  auto stranger_kp = p::LoadKeyPair((keys / "stranger.key").string());
  ASSERT_TRUE(client_kp.ok() && stranger_kp.ok());
  auto good = Client(p::CurveClientKeys{client_kp->public_key, client_kp->secret_key, *server_pub});
  EXPECT_TRUE(WaitFor([&] { return good->Call<p::NodesReply>(p::ListNodes{}, milliseconds(500)).ok(); }, 10))
      << Logs();
  auto bad = Client(p::CurveClientKeys{stranger_kp->public_key, stranger_kp->secret_key, *server_pub});
  auto r = bad->Call<p::NodesReply>(p::ListNodes{}, milliseconds(1500));
  EXPECT_FALSE(r.ok());
  auto plain = Client();
  EXPECT_FALSE(plain->Call<p::NodesReply>(p::ListNodes{}, milliseconds(1000)).ok());
  // An agent with the listed key registers and runs a job under CURVE.
  StartAgent("a", 1, "training",
             {"--curve-key", (keys / "a.key").string(), "--curve-server-key", (keys / "scheduler.pub").string()});
  ASSERT_TRUE(WaitAgents(*good, 1)) << Logs();
}

// 200 jobs submitted at once, workers that exit at once: all complete and
// every scheduling round stays under 50 ms.
TEST_F(SystemTest, TwoHundredJobs) {
  StartScheduler();
  StartAgent("a", 16);
  StartAgent("b", 16);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  auto t0 = Clock::now();
  std::vector<p::JobId> ids;
  for (int i = 0; i < 200; ++i) {
    auto id = i % 2 ? Submit(*c, {"true"}, 1 + i % 3) : Submit(*c, {"true"}, 0, 1, 4);
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  double submit_s = std::chrono::duration<double>(Clock::now() - t0).count();
  p::ListJobs live;
  ASSERT_TRUE(WaitFor([&] {
    auto r = c->Call<p::JobsReply>(live, milliseconds(2000));
    return r.ok() && r->jobs.empty();
  }, 90)) << Logs();
  double total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  p::ListJobs all;
  all.include_finished = true;
  auto jobs = c->Call<p::JobsReply>(all, milliseconds(2000));
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->jobs.size(), 200u);
  for (const auto& j : jobs->jobs) EXPECT_EQ(j.state, p::JobState::kCompleted) << j.job;
  auto status = c->Call<p::StatusReply>(p::StatusRequest{}, milliseconds(2000));
  ASSERT_TRUE(status.ok());
  double max_round = status->summary["rounds"]["max_seconds"].get<double>();
  double mean_round = status->summary["rounds"]["mean_seconds"].get<double>();
  int rounds = status->summary["rounds"]["count"].get<int>();
  std::printf("200 jobs: submitted in %.2f s, all complete after %.2f s; %d rounds, mean %.2f ms, max %.2f ms\n",
              submit_s, total_s, rounds, mean_round * 1000, max_round * 1000);
  // The round-time target is measured by bench/daemon (docs/performance.md);
  // here only a pathological round fails, so a loaded machine cannot.
  EXPECT_LT(max_round, 2.0);
}

}  // namespace
}  // namespace aryl
