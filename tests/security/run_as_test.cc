// Run-as-user end to end (docs/security.md): an agent running as root with
// --run-as starts alice's workers as the local account mapped to her, refuses
// the workers of an owner with no account, and refuses worker-channel reports
// about a job from any other account; a keyless scheduler on its ipc:// socket
// tells local accounts apart by uid, and a root agent runs each one's workers
// as that account. Needs root; skips otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>

#include "security_fixture.h"

namespace aryl {
namespace {

using namespace aryl::livetest;
using securitytest::SecurityTest;

class RunAsTest : public SecurityTest {
 protected:
  // The first line matching `re` in any worker log of agent a.
  std::string WorkerOutput(p::JobId job) {
    fs::path d = dir_ / "logs-a" / ("job-" + std::to_string(job));
    std::string out;
    if (!fs::exists(d)) return out;
    for (const auto& e : fs::directory_iterator(d))
      if (e.path().extension() == ".out") out += ReadFile(e.path());
    return out;
  }
  // The probe runs as other accounts, which cannot reach a build tree under a
  // private (0700) home: a copy in a world-readable scratch directory.
  static std::string Reachable(const fs::path& from) {
    fs::path dir = fs::temp_directory_path() / ("aryl-probe-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto rx = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                    fs::perms::others_read | fs::perms::others_exec;
    fs::permissions(dir, rx);
    fs::path bin = dir / from.filename();
    fs::copy_file(from, bin, fs::copy_options::overwrite_existing);
    fs::permissions(bin, rx);
    return bin.string();
  }
  int Probe(const std::string& endpoint, p::JobId job, uid_t uid, std::string* answer, const std::string& identity = "") {
    static const std::string probe = Reachable(ARYL_CHANNEL_PROBE_BIN);
    std::vector<std::string> argv = {probe, endpoint, std::to_string(job), "0"};
    if (!identity.empty()) argv.push_back(identity);
    return RunAs(argv, uid, answer);
  }
  // scheduler_probe ENDPOINT ARGS... as `uid`.
  int SchedulerProbe(const std::string& endpoint, std::vector<std::string> args, uid_t uid, std::string* answer) {
    static const std::string probe = Reachable(ARYL_SCHEDULER_PROBE_BIN);
    args.insert(args.begin(), {probe, endpoint});
    return RunAs(args, uid, answer);
  }
  int RunAs(std::vector<std::string> argv, uid_t uid, std::string* answer) {
    agent::LaunchSpec spec;
    spec.argv = std::move(argv);
    spec.stdout_path = (dir_ / ("probe-" + std::to_string(uid) + ".txt")).string();
    spec.cwd = "/";
    spec.run_as = agent::Credentials{uid, uid, {uid}};
    agent::ProcessLauncher l;
    auto pid = l.Launch(spec);
    EXPECT_TRUE(pid.ok()) << pid.status();
    if (!pid.ok()) return -1;
    int code = -1;
    WaitFor([&] {
      for (const auto& ex : l.Poll()) code = ex.exit_code;
      return l.size() == 0;
    }, 20);
    *answer = ReadFile(spec.stdout_path);
    return code;
  }
};

TEST_F(RunAsTest, WorkersRunAsOwnersAccount) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: an agent switches accounts only as root (euid " << ::geteuid() << ")";
  MakeKeys();
  fs::path map = dir_ / "users.map";
  std::ofstream(map) << "# owner account\nalice nobody\n";
  StartScheduler(CurveFlags());
  auto agent_flags = AgentCurve("a");
  agent_flags.insert(agent_flags.end(), {"--run-as", map.string()});
  StartAgent("a", 2, "training", agent_flags);
  auto ops = As("ops");
  ASSERT_TRUE(WaitAgents(*ops, 1)) << Logs();
  auto alice = As("alice"), bob = As("bob");

  // alice's worker runs as nobody, in nobody's (missing) home's fallback "/".
  auto job = Submit(*alice, {"/bin/sh", "-c", "echo uid=$(id -u) home=$HOME user=$USER pwd=$(pwd)"}, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitState(*alice, *job, p::JobState::kCompleted, 30)) << Logs();
  EXPECT_NE(WorkerOutput(*job).find("uid=65534 home=/nonexistent user=nobody pwd=/"), std::string::npos)
      << WorkerOutput(*job);

  // bob has no account in the map: his workers never start, and he is told why.
  auto refused = Submit(*bob, {"/bin/sh", "-c", "id"}, 1);
  ASSERT_TRUE(refused.ok()) << refused.status();
  ASSERT_TRUE(WaitState(*bob, *refused, p::JobState::kFailed, 30)) << Logs();
  auto st = Status(*bob, *refused);
  ASSERT_TRUE(st.ok());
  EXPECT_NE(st->message.find("owner 'bob' has no local account"), std::string::npos) << st->message;
  EXPECT_TRUE(WorkerOutput(*refused).empty());

  // A running job of alice's: its worker tells us the channel endpoint.
  auto running = Submit(*alice, {"/bin/sh", "-c", "echo endpoint=$ARYL_AGENT_ENDPOINT id=$ARYL_CHANNEL_ID; exec sleep 60"}, 1);
  ASSERT_TRUE(running.ok()) << running.status();
  std::smatch m;
  std::string out;
  static const std::regex re("endpoint=(ipc://\\S+) id=(worker-\\S+)");
  ASSERT_TRUE(WaitFor([&] {
    out = WorkerOutput(*running);
    return std::regex_search(out, m, re);
  }, 30)) << out << Logs();
  std::string endpoint = m[1], identity = m[2];
  EXPECT_GE(identity.size(), std::string("worker-1-0-").size() + 32) << "an unguessable identity: " << identity;
  // Another account (daemon, uid 1) reaches the socket but may not speak for
  // the job, under a guessed identity or under the worker's own.
  std::string answer;
  EXPECT_EQ(Probe(endpoint, *running, 1, &answer), 3) << answer;
  EXPECT_NE(answer.find("uid 1 does not run job " + std::to_string(*running)), std::string::npos) << answer;
  EXPECT_EQ(Probe(endpoint, *running, 1, &answer, identity), 3) << answer;
  // The job's own account: not under a guessed identity (that of another
  // worker, say), only under the one the agent issued.
  EXPECT_EQ(Probe(endpoint, *running, 65534, &answer), 3) << answer;
  EXPECT_EQ(Probe(endpoint, *running, 65534, &answer, identity), 0) << answer;
  p::CancelJob cancel;
  cancel.job = *running;
  EXPECT_TRUE(alice->Call<p::Ok>(cancel, milliseconds(2000)).ok());
}

// The default install (no keys, the scheduler on an ipc:// socket): a local
// account is a user named by its login, whatever its client claims; its job
// runs as that account on a root agent; it can neither cancel root's job nor
// register as an agent.
TEST_F(RunAsTest, KeylessLocalUsersAreToldApartByUid) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: to run clients as another account (euid " << ::geteuid() << ")";
  const auto rx = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                  fs::perms::others_exec;
  fs::permissions(dir_, rx);
  const std::string ep = "ipc://" + (dir_ / "run" / "scheduler.sock").string();
  agent::LaunchSpec s;
  s.argv = {ARYL_SCHEDULER_BIN, "--endpoint", ep, "--state", (dir_ / "state.db").string(), "--http-port", "-1",
            "--heartbeat", "0.2", "--agent-timeout", "3", "--log-level", "debug"};
  s.stdout_path = (dir_ / "scheduler.log").string();
  ASSERT_TRUE(launcher_.Launch(s).ok());
  agent::LaunchSpec a;
  a.argv = {ARYL_AGENT_BIN, "--scheduler", ep, "--id", "a", "--host", "127.0.0.1", "--pool", "training",
            "--slots", "2", "--gpu-type", "cpu", "--log-dir", (dir_ / "logs-a").string(), "--log-level", "debug"};
  a.cwd = dir_.string();
  a.stdout_path = (dir_ / "agent-a.log").string();
  ASSERT_TRUE(launcher_.Launch(a).ok());
  auto root = p::Client::Connect({.endpoint = ep});
  ASSERT_TRUE(root.ok()) << root.status();
  ASSERT_TRUE(WaitAgents(**root, 1, 20)) << Logs();
  EXPECT_EQ(fs::status(dir_ / "run" / "scheduler.sock").permissions() & fs::perms::all, fs::perms(0666));
  EXPECT_EQ(fs::status(dir_ / "run").permissions() & fs::perms::all, fs::perms(0755));

  auto mine = Submit(**root, {"sleep", "60"}, 1);
  ASSERT_TRUE(mine.ok()) << mine.status();
  fs::path out = dir_ / "out";
  fs::create_directories(out);
  fs::permissions(out, fs::perms::all);
  std::string answer;
  ASSERT_EQ(SchedulerProbe(ep, {"submit", "/bin/sh", "-c", "id -u > " + (out / "uid").string()}, 65534, &answer), 0)
      << answer << Logs();
  p::JobId theirs = std::stoull(answer);
  ASSERT_TRUE(WaitState(**root, theirs, p::JobState::kCompleted, 30)) << Logs();
  EXPECT_EQ(ReadFile(out / "uid"), "65534\n") << "a local user's job runs as that user, not as the agent's root";
  p::ListJobs list;
  list.include_finished = true;
  auto rows = (*root)->Call<p::JobsReply>(list, milliseconds(2000));
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::map<p::JobId, std::string> owners;
  for (const auto& r : rows->jobs) owners[r.job] = r.owner;
  EXPECT_EQ(owners[*mine], "root");
  EXPECT_EQ(owners[theirs], "nobody") << "the owner is the caller's account, not what its client claimed";

  EXPECT_EQ(SchedulerProbe(ep, {"cancel", std::to_string(*mine)}, 65534, &answer), 3) << answer;
  EXPECT_NE(answer.find("belongs to 'root'"), std::string::npos) << answer;
  EXPECT_EQ(SchedulerProbe(ep, {"register", "evil"}, 65534, &answer), 3) << answer;
  EXPECT_NE(answer.find("agent role"), std::string::npos) << answer;
  auto nodes = (*root)->Call<p::NodesReply>(p::ListNodes{}, milliseconds(2000));
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ(nodes->nodes.size(), 1u);
}

}  // namespace
}  // namespace aryl
