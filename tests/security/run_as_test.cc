// Run-as-user end to end (docs/security.md): an agent running as root with
// --run-as starts alice's workers as the local account mapped to her, refuses
// the workers of an owner with no account, and refuses worker-channel reports
// about a job from any other account. Needs root; skips otherwise.
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
  static std::string ProbeBinary() {
    static const std::string path = [] {
      fs::path dir = fs::temp_directory_path() / ("aryl-probe-" + std::to_string(::getpid()));
      fs::create_directories(dir);
      fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);
      fs::path bin = dir / "channel_probe";
      fs::copy_file(ARYL_CHANNEL_PROBE_BIN, bin, fs::copy_options::overwrite_existing);
      fs::permissions(bin, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);
      return bin.string();
    }();
    return path;
  }
  int Probe(const std::string& endpoint, p::JobId job, uid_t uid, std::string* answer, const std::string& identity = "") {
    agent::LaunchSpec spec;
    spec.argv = {ProbeBinary(), endpoint, std::to_string(job), "0"};
    if (!identity.empty()) spec.argv.push_back(identity);
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

}  // namespace
}  // namespace aryl
