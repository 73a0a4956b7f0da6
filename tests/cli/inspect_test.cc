// aryl describe job|node, aryl logs and aryl events against a real
// aryl-scheduler and real aryl-agent processes on loopback (LiveCluster): the
// output of the aryl binary, as tables and as JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "../system/live_cluster.h"

namespace aryl {
namespace {

using namespace aryl::livetest;
using nlohmann::json;

struct Outcome {
  int code = -1;
  std::string out, err;
};

class InspectTest : public LiveCluster {
 protected:
  // Runs `aryl ARGS --scheduler EP`, waiting up to timeout_s for it to exit.
  Outcome Aryl(std::vector<std::string> args, double timeout_s = 20) {
    agent::LaunchSpec s;
    s.env = {{"ARYL_CONFIG", "/dev/null"}, {"ARYL_SCHEDULER", ""}};
    s.argv = {ARYL_BIN};
    s.argv.insert(s.argv.end(), args.begin(), args.end());
    s.argv.insert(s.argv.end(), {"--scheduler", endpoint_, "--timeout", "5"});
    std::string base = (dir_ / ("aryl-" + std::to_string(runs_++))).string();
    s.stdout_path = base + ".stdout";
    s.stderr_path = base + ".stderr";
    agent::ProcessLauncher l;
    auto pid = l.Launch(s);
    Outcome r;
    if (!pid.ok()) return r;
    WaitFor([&] {
      for (const auto& e : l.Poll()) r.code = e.exit_code;
      return l.size() == 0;
    }, timeout_s);
    r.out = ReadFile(base + ".stdout");
    r.err = ReadFile(base + ".stderr");
    return r;
  }

  // A scheduler and agent "a" (2 slots), connected.
  std::unique_ptr<p::Client> Cluster() {
    StartScheduler();
    StartAgent("a", 2);
    auto c = Client();
    EXPECT_TRUE(WaitAgents(*c, 1)) << Logs();
    return c;
  }

  fs::path AgentLog(const std::string& agent, p::JobId job, p::WorkerId worker, const char* ext = ".out") {
    return dir_ / ("logs-" + agent) / ("job-" + std::to_string(job)) / ("worker-" + std::to_string(worker) + ext);
  }

  int runs_ = 0;
};

// A two-worker job that ends: its logs per rank and stream come from the
// agent; describe shows its spec and placement history; the journal lists its
// rows, filtered by job, kind, node, time and count.
TEST_F(InspectTest, FinishedJobDescribeLogsEvents) {
  auto c = Cluster();
  p::SubmitJob sub;
  sub.name = "hello";
  sub.argv = {"sh", "-c", "echo out-rank-$ARYL_RANK; echo err-rank-$ARYL_RANK >&2; sleep 0.5"};
  sub.workers = 2;
  sub.env = {{"API_TOKEN", "s3cret-value"}};
  auto reply = c->Call<p::SubmitReply>(sub, milliseconds(3000));
  ASSERT_TRUE(reply.ok()) << reply.status();
  p::JobId job = reply->job;
  ASSERT_TRUE(WaitState(*c, job, p::JobState::kCompleted, 30)) << Logs();
  std::string id = std::to_string(job);

  Outcome logs = Aryl({"logs", id});
  ASSERT_EQ(logs.code, 0) << logs.err;
  EXPECT_EQ(logs.out, "out-rank-0\n");
  Outcome rank1 = Aryl({"logs", id, "--rank", "1"});
  EXPECT_EQ(rank1.out, "out-rank-1\n") << rank1.err;
  Outcome err = Aryl({"logs", id, "--stderr"});
  EXPECT_EQ(err.out, "err-rank-0\n") << err.err;
  Outcome js = Aryl({"logs", id, "-o", "json"});
  ASSERT_EQ(js.code, 0) << js.err;
  json chunk = json::parse(js.out.substr(0, js.out.find('\n')));
  EXPECT_EQ(chunk["type"], "log_chunk");
  EXPECT_EQ(chunk["rank"], 0);
  EXPECT_EQ(chunk["agent_id"], "a");
  EXPECT_EQ(chunk["running"], false);
  Outcome no_rank = Aryl({"logs", id, "--rank", "5"});
  EXPECT_EQ(no_rank.code, 1);
  EXPECT_NE(no_rank.err.find("has no rank 5"), std::string::npos) << no_rank.err;
  Outcome bad_rank = Aryl({"logs", id, "--rank", "-1"});
  EXPECT_EQ(bad_rank.code, 2) << bad_rank.err;

  Outcome desc = Aryl({"describe", "job", id});
  ASSERT_EQ(desc.code, 0) << desc.err;
  for (const char* want : {"Job:             " , "(hello)", "Owner:           local", "State:           completed",
                           "sh -c echo out-rank", "API_TOKEN (values not shown)", "Placement history:", "Exit code:       0",
                           "Rescales: none", "Preemptions: none", "Exec errors: none"})
    EXPECT_NE(desc.out.find(want), std::string::npos) << want << "\n" << desc.out;
  EXPECT_EQ(desc.out.find("s3cret-value"), std::string::npos) << desc.out;
  EXPECT_TRUE(std::regex_search(desc.out, std::regex(R"(\n\S+ \S+\s+start\s+1\s+2\s+a:2\s+\S)"))) << desc.out;
  Outcome djs = Aryl({"describe", "job", id, "-o", "json"});
  ASSERT_EQ(djs.code, 0) << djs.err;
  json d = json::parse(djs.out);
  EXPECT_EQ(d["row"]["state"], "completed");
  ASSERT_EQ(d["history"].size(), 1u) << djs.out;
  EXPECT_EQ(d["history"][0]["kind"], "start");
  EXPECT_EQ(d["history"][0]["placement"][0]["agent_id"], "a");
  EXPECT_EQ(d["history"][0]["placement"][0]["workers"], 2);
  EXPECT_GT(d["history"][0]["time"].get<double>(), d["row"]["submit_time"].get<double>() - 1);
  EXPECT_EQ(d["exit_code"], 0);

  Outcome events = Aryl({"events", "--job", id});
  ASSERT_EQ(events.code, 0) << events.err;
  EXPECT_NE(events.out.find("TIME"), std::string::npos) << events.out;
  for (const char* kind : {"submit", "start", "worker_exit", "finished"})
    EXPECT_NE(events.out.find(kind), std::string::npos) << kind << "\n" << events.out;
  EXPECT_EQ(events.out.find("s3cret-value"), std::string::npos) << events.out;
  Outcome ejs = Aryl({"events", "--job", id, "-o", "json"});
  ASSERT_EQ(ejs.code, 0) << ejs.err;
  json rows = json::parse(ejs.out)["events"];
  ASSERT_GE(rows.size(), 5u) << ejs.out;  // submit, start, 2 exits, finished
  for (const auto& row : rows) EXPECT_EQ(row["job"], job);
  Outcome starts = Aryl({"events", "--job", id, "--kind", "worker_exit", "-o", "json", "--no-headers"});
  json exits = json::parse(starts.out)["events"];
  ASSERT_EQ(exits.size(), 2u) << starts.out;
  EXPECT_EQ(exits[0]["nodes"][0], "a");
  EXPECT_EQ(exits[0]["data"]["exit_code"], 0);
  Outcome by_node = Aryl({"events", "--node", "a", "--kind", "register"});
  EXPECT_NE(by_node.out.find("register"), std::string::npos) << by_node.out;
  Outcome limited = Aryl({"events", "--limit", "2", "--no-headers"});
  EXPECT_EQ(std::count(limited.out.begin(), limited.out.end(), '\n'), 2) << limited.out;
  Outcome future = Aryl({"events", "--since", "2099-01-01T00:00:00Z", "--no-headers"});
  EXPECT_EQ(future.code, 0);
  EXPECT_EQ(future.out, "");
  Outcome recent = Aryl({"events", "--since", "10m", "--kind", "submit", "--no-headers"});
  EXPECT_NE(recent.out.find("hello"), std::string::npos) << recent.out;
  Outcome bad_kind = Aryl({"events", "--kind", "bogus"});
  EXPECT_EQ(bad_kind.code, 2);
  EXPECT_NE(bad_kind.err.find("unknown event kind \"bogus\""), std::string::npos) << bad_kind.err;
  Outcome bad_since = Aryl({"events", "--since", "yesterday"});
  EXPECT_EQ(bad_since.code, 2);
  EXPECT_NE(bad_since.err.find("--since 'yesterday'"), std::string::npos) << bad_since.err;

  Outcome node = Aryl({"describe", "node", "a"});
  ASSERT_EQ(node.code, 0) << node.err;
  for (const char* want : {"Pool:            training", "State:           live", "Loan:            available",
                           "GPU type:        cpu", "Slots:           0 of 2 used", "Workers: none", "Recent events:",
                           "register"})
    EXPECT_NE(node.out.find(want), std::string::npos) << want << "\n" << node.out;
  Outcome missing = Aryl({"describe", "node", "zz"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("no node named 'zz'"), std::string::npos) << missing.err;

  // The log file is gone from the agent's disk: a clear NotFound.
  auto st = Status(*c, job);
  ASSERT_TRUE(st.ok());
  fs::remove(AgentLog("a", job, 0));
  Outcome gone = Aryl({"logs", id});
  EXPECT_EQ(gone.code, 1);
  EXPECT_NE(gone.err.find("is gone"), std::string::npos) << gone.err;
}

// --follow prints a running worker's output as it grows and stops once the
// worker has ended; describe node shows the worker while it runs; an exec
// error shows in describe job.
TEST_F(InspectTest, FollowRunningJobAndExecError) {
  auto c = Cluster();
  auto job = Submit(*c, {"sh", "-c", "for i in $(seq 1 12); do echo tick $i; sleep 0.25; done"}, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitState(*c, *job, p::JobState::kRunning, 20)) << Logs();
  ASSERT_TRUE(WaitFor([&] { return fs::exists(AgentLog("a", *job, 0)); }, 10));
  Outcome node = Aryl({"describe", "node", "a", "-o", "json"});
  ASSERT_EQ(node.code, 0) << node.err;
  json nd = json::parse(node.out);
  EXPECT_EQ(nd["liveness"], "live");
  ASSERT_EQ(nd["workers"].size(), 1u) << node.out;
  EXPECT_EQ(nd["workers"][0]["job"], *job);
  EXPECT_EQ(nd["workers"][0]["rank"], 0);
  EXPECT_EQ(nd["row"]["used_slots"], 1);
  Outcome follow = Aryl({"logs", std::to_string(*job), "--follow", "--interval", "0.1"}, 60);
  ASSERT_EQ(follow.code, 0) << follow.err;
  std::string want;
  for (int i = 1; i <= 12; ++i) want += "tick " + std::to_string(i) + "\n";
  EXPECT_EQ(follow.out, want);
  EXPECT_TRUE(WaitState(*c, *job, p::JobState::kCompleted, 10));

  auto bad = Submit(*c, {"/nonexistent/aryl-program", "--x"}, 1);
  ASSERT_TRUE(bad.ok()) << bad.status();
  ASSERT_TRUE(WaitState(*c, *bad, p::JobState::kFailed, 20)) << Logs();
  Outcome desc = Aryl({"describe", "job", std::to_string(*bad), "-o", "json"});
  ASSERT_EQ(desc.code, 0) << desc.err;
  json d = json::parse(desc.out);
  ASSERT_EQ(d["exec_errors"].size(), 1u) << desc.out;
  EXPECT_EQ(d["exec_errors"][0]["node"], "a");
  EXPECT_NE(d["exec_errors"][0]["message"].get<std::string>().find("/nonexistent/aryl-program"), std::string::npos)
      << desc.out;
  Outcome table = Aryl({"describe", "job", std::to_string(*bad)});
  EXPECT_NE(table.out.find("Exec errors:\nTIME"), std::string::npos) << table.out;
}

// The agent that ran the worker is dead: logs say so; describe node says dead.
TEST_F(InspectTest, DeadAgentLogsUnavailable) {
  StartScheduler();
  pid_t agent = StartAgent("solo", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  auto job = Submit(*c, {"sh", "-c", "echo done"}, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitState(*c, *job, p::JobState::kCompleted, 20)) << Logs();
  EXPECT_EQ(Aryl({"logs", std::to_string(*job)}).out, "done\n");
  Kill(agent);
  ASSERT_TRUE(WaitFor([&] {
    auto r = c->Call<p::NodesReply>(p::ListNodes{}, milliseconds(500));
    return r.ok() && r->nodes.size() == 1 && !r->nodes[0].connected;
  }, 15)) << Logs();
  Outcome logs = Aryl({"logs", std::to_string(*job)});
  EXPECT_EQ(logs.code, 1);
  EXPECT_NE(logs.err.find("the agent 'solo' that ran rank 0 (worker 0) of job " + std::to_string(*job) +
                          " is not connected"),
            std::string::npos)
      << logs.err;
  Outcome node = Aryl({"describe", "node", "solo"});
  EXPECT_NE(node.out.find("State:           dead"), std::string::npos) << node.out;
  Outcome failed = Aryl({"events", "--node", "solo", "--kind", "node_failed", "--no-headers"});
  EXPECT_NE(failed.out.find("node_failed"), std::string::npos) << failed.out;
}

// A restart-kind elastic job (a program without the runtime) grows 1 -> 2 by
// restarting every worker; it has no --checkpoint-dir and reports none, so
// describe warns that each restart began again at step 0.
TEST_F(InspectTest, RestartWithoutCheckpointIsWarnedInDescribe) {
  // A restart-kind job on two 1-slot agents; draining one (--now) restarts
  // all its workers on the other: a forced change, made whatever the resize
  // rule would say of a voluntary one.
  StartScheduler();
  StartAgent("a", 1);
  StartAgent("b", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  p::SubmitJob m;
  m.argv = {"sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo step=$i; i=$((i+1)); sleep 0.05; done"};
  m.min_workers = 1;
  m.max_workers = 2;
  m.elastic = "restart";
  auto reply = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_TRUE(reply.ok()) << reply.status();
  const std::string job = std::to_string(reply->job);
  ASSERT_TRUE(WaitFor([&] {
    auto r = Status(*c, reply->job);
    return r.ok() && r->row.state == p::JobState::kRunning && r->row.workers == 2;
  }, 20)) << Logs();
  Outcome before = Aryl({"describe", "job", job});
  EXPECT_EQ(before.out.find("Warning:"), std::string::npos) << before.out;
  auto drain = c->Call<p::Ok>(p::NodeCommand{.node = "b", .action = "drain-now"}, milliseconds(2000));
  ASSERT_TRUE(drain.ok()) << drain.status();
  Outcome after;
  ASSERT_TRUE(WaitFor([&] {
    after = Aryl({"describe", "job", job});
    return after.out.find("Warning:") != std::string::npos;
  }, 30)) << after.out << Logs();
  EXPECT_NE(after.out.find("1 restart of all workers and no checkpoint"), std::string::npos) << after.out;
  EXPECT_NE(after.out.find("began again at step 0"), std::string::npos) << after.out;
  EXPECT_TRUE(c->Call<p::Ok>(p::CancelJob{.job = reply->job}, milliseconds(3000)).ok());
}

#ifdef ARYL_MLP_BIN
// An elastic training job grows when a second agent joins: describe shows the
// resize with the pause the runtime measured and the last checkpoint rank 0
// reported; logs follow rank 0 of the real training program.
TEST_F(InspectTest, ElasticJobRescaleAndCheckpoint) {
  StartScheduler();
  StartAgent("a", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  p::SubmitJob m;
  m.argv = {ARYL_MLP_BIN, "--steps", "1000000", "--log-every", "10", "--hidden", "32"};
  m.min_workers = 1;
  m.max_workers = 2;
  m.checkpoint_dir = (dir_ / "ckpt").string();
  m.env["ARYL_CHECKPOINT_EVERY"] = "200";
  auto reply = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_TRUE(reply.ok()) << reply.status();
  p::JobId job = reply->job;
  ASSERT_TRUE(WaitState(*c, job, p::JobState::kRunning, 30)) << Logs();
  StartAgent("b", 1);
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  json d;
  ASSERT_TRUE(WaitFor([&] {
    Outcome r = Aryl({"describe", "job", std::to_string(job), "-o", "json"});
    if (r.code != 0) return false;
    d = json::parse(r.out);
    return !d["rescales"].empty() && !d["last_checkpoint"].is_null();
  }, 90)) << d.dump(2) << Logs();
  EXPECT_EQ(d["rescales"][0]["from_workers"], 1);
  EXPECT_EQ(d["rescales"][0]["to_workers"], 2);
  EXPECT_GT(d["rescales"][0]["phases"]["total"].get<double>(), 0);
  EXPECT_GE(d["history"].size(), 2u);
  EXPECT_EQ(d["history"].back()["kind"], "resize");
  EXPECT_EQ(d["rescales"][0]["generation"], d["history"].back()["generation"]);  // the scheduler's numbering
  EXPECT_GE(d["rescales"][0]["store_generation"].get<int>(), 1000);               // the runtime's
  // The events row names the generation as `aryl jobs` shows it, not the runtime's.
  const std::string plan = std::to_string(d["rescales"][0]["generation"].get<int>());
  Outcome reports = Aryl({"events", "--job", std::to_string(job), "--kind", "resize_report", "--no-headers"});
  EXPECT_NE(reports.out.find("generation " + plan + " 1->2 pause"), std::string::npos) << reports.out;
  EXPECT_GE(d["last_checkpoint"]["step"].get<int>(), 200);
  EXPECT_NE(d["last_checkpoint"]["path"].get<std::string>().find("ckpt"), std::string::npos);
  Outcome table = Aryl({"describe", "job", std::to_string(job), "-o", "wide"});
  EXPECT_NE(table.out.find("PAUSE-S"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("RENDEZVOUS-S"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("Last checkpoint: step"), std::string::npos) << table.out;
  Outcome logs = Aryl({"logs", std::to_string(job)});
  EXPECT_EQ(logs.code, 0) << logs.err;
  EXPECT_NE(logs.out.find("step="), std::string::npos) << logs.out.substr(0, 2000);
  p::CancelJob cancel;
  cancel.job = job;
  EXPECT_TRUE(c->Call<p::Ok>(cancel, milliseconds(3000)).ok());
}
#endif

}  // namespace
}  // namespace aryl
