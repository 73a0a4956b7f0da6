// The packaged defaults start: aryl-scheduler run the way the shipped unit and
// scheduler.env run it answers `aryl status` on its socket within seconds, and
// aryl-agent run with the shipped agent.env on a host without GPUs stops at
// once with the exit code its unit does not restart on, naming --slots. The
// README's agent (--slots 2 --gpu-type cpu, no --host) registers with the
// README's scheduler; an unusable --host stops it at once, naming --host.
//
// The command lines are read from deploy/: the unit's ExecStart, with
// $ARYL_*_ARGS replaced by the env file's value split at blanks (as systemd
// does). Two things differ from a real install, and only these:
//   - the directories systemd makes for the unit (StateDirectory /var/lib/aryl,
//     RuntimeDirectory /run/aryl, LogsDirectory /var/log/aryl) are moved into a
//     temporary directory, since a test cannot write there;
//   - the shipped --http-port is replaced by 0 (any free port) only when
//     another process holds it on this machine, and the test says so.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "aryl/agent/process.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const fs::path kDeploy = ARYL_DEPLOY_DIR;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// KEY's value in a systemd EnvironmentFile (the last assignment; quotes removed).
std::string EnvFileValue(const fs::path& file, const std::string& key) {
  std::istringstream in(ReadFile(file));
  std::string value;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + "=", 0) != 0) continue;
    value = line.substr(key.size() + 1);
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front())
      value = value.substr(1, value.size() - 2);
  }
  return value;
}

// The values of `key=` lines of a unit file, split at blanks.
std::vector<std::string> UnitValues(const std::string& unit, const std::string& key) {
  std::istringstream in(unit);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + "=", 0) == 0)
      for (auto& w : Words(line.substr(key.size() + 1))) out.push_back(w);
  return out;
}

// The unit's ExecStart with $VAR replaced by the env file's words, its binary
// by `bin`, and the unit's directories moved under `root`.
std::vector<std::string> PackagedCommand(const std::string& unit, const std::string& env_file,
                                         const std::string& var, const std::string& bin,
                                         const fs::path& root) {
  const std::string text = ReadFile(kDeploy / "systemd" / unit);
  std::vector<std::string> exec = UnitValues(text, "ExecStart");
  EXPECT_FALSE(exec.empty()) << unit << " has no ExecStart";
  if (exec.empty()) return {};
  EXPECT_EQ(fs::path(exec[0]).filename(), fs::path(bin).filename()) << unit;
  std::vector<std::string> argv = {bin};
  for (size_t i = 1; i < exec.size(); ++i) {
    if (exec[i] == "$" + var) {
      const std::string value = EnvFileValue(kDeploy / "etc" / env_file, var);
      EXPECT_FALSE(value.empty()) << env_file << " sets no " << var;
      for (auto& w : Words(value)) argv.push_back(w);
    } else {
      argv.push_back(exec[i]);
    }
  }
  for (auto& a : argv) {
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"/var/lib/aryl", "state"},
                                   {"/run/aryl", "run"},
                                   {"/var/log/aryl", "log"}}) {
      const std::string dest = (root / to).string();
      for (auto at = a.find(from); at != std::string::npos; at = a.find(from, at + dest.size()))
        a.replace(at, from.size(), dest);
    }
  }
  return argv;
}

// The value after `flag` in argv; empty when absent.
std::string FlagValue(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag) return argv[i + 1];
  return "";
}

bool PortFree(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct RunResult {
  int code = -1;
  std::string out;  // stdout and stderr
  double seconds = 0;
};

RunResult Exec(const std::vector<std::string>& argv) {
  std::string cmd = "ARYL_CONFIG=/dev/null ARYL_SCHEDULER= timeout 20";
  for (const auto& a : argv) cmd += " " + Quote(a);
  cmd += " 2>&1 </dev/null";
  RunResult r;
  const auto t0 = Clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

class PackagedDefaults : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("aryl-defaults-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    for (const char* d : {"state", "run", "log"}) fs::create_directories(root_ / d);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

// The scheduler as the unit starts it with the shipped scheduler.env: it
// listens on the local socket without keys and answers `aryl status` there.
TEST_F(PackagedDefaults, SchedulerStartsAndAnswersOnItsSocket) {
  std::vector<std::string> argv = PackagedCommand("aryl-scheduler.service.in", "scheduler.env",
                                                  "ARYL_SCHEDULER_ARGS", ARYL_SCHEDULER_BIN, root_);
  ASSERT_FALSE(argv.empty());
  const std::string endpoint = FlagValue(argv, "--endpoint");
  ASSERT_EQ(endpoint.rfind("ipc://" + (root_ / "run").string() + "/", 0), 0u)
      << "the shipped scheduler listens on the unit's runtime directory: " << endpoint;
  EXPECT_EQ(FlagValue(argv, "--state").rfind((root_ / "state").string() + "/", 0), 0u);
  for (size_t i = 1; i + 1 < argv.size(); ++i) {
    if (argv[i] != "--http-port" || std::atoi(argv[i + 1].c_str()) <= 0 ||
        PortFree(std::atoi(argv[i + 1].c_str())))
      continue;
    std::cout << "note: --http-port " << argv[i + 1]
              << " is taken on this machine; this run uses --http-port 0\n";
    argv[i + 1] = "0";
  }
  std::string shown;
  for (const auto& a : argv) shown += " " + a;
  std::cout << "packaged command:" << shown << "\n";

  aryl::agent::ProcessLauncher launcher;
  aryl::agent::LaunchSpec spec;
  spec.argv = argv;
  spec.env = {{"ARYL_CONFIG", "/dev/null"}};
  spec.stdout_path = (root_ / "scheduler.log").string();
  const auto t0 = Clock::now();
  ASSERT_TRUE(launcher.Launch(spec).ok());
  RunResult status;
  double waited = 0;
  while (waited < 10) {
    for (const auto& e : launcher.Poll())
      FAIL() << "aryl-scheduler exited: " << e.Describe() << "\n"
             << ReadFile(root_ / "scheduler.log");
    status = Exec({ARYL_BIN, "status", "--scheduler", endpoint, "--timeout", "1"});
    waited = std::chrono::duration<double>(Clock::now() - t0).count();
    if (status.code == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(status.code, 0) << status.out << "\n" << ReadFile(root_ / "scheduler.log");
  EXPECT_NE(status.out.find("leader"), std::string::npos) << status.out;
  EXPECT_LT(waited, 10) << "seconds until `aryl status` answered";
  std::cout << "answered `aryl status` after " << waited << " s\n";
  launcher.StopAll(5);
}

// The agent as the unit starts it with the shipped agent.env, on a host
// without GPUs: one line naming --slots, and an exit code the unit lists in
// RestartPreventExitStatus, so systemd does not start it again every 2 s.
TEST_F(PackagedDefaults, AgentWithoutGpusStopsOnceNamingSlots) {
  if (fs::exists("/dev/nvidiactl") || fs::exists("/dev/nvidia0"))
    GTEST_SKIP() << "this host has NVIDIA GPUs: the shipped agent.env offers them";
  std::vector<std::string> argv = PackagedCommand("aryl-agent.service.in", "agent.env",
                                                  "ARYL_AGENT_ARGS", ARYL_AGENT_BIN, root_);
  ASSERT_FALSE(argv.empty());
  const std::vector<std::string> no_restart = UnitValues(
      ReadFile(kDeploy / "systemd" / "aryl-agent.service.in"), "RestartPreventExitStatus");
  RunResult r = Exec(argv);
  EXPECT_NE(std::find(no_restart.begin(), no_restart.end(), std::to_string(r.code)),
            no_restart.end())
      << "exit " << r.code << " is not in RestartPreventExitStatus: systemd restarts the agent\n"
      << r.out;
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--slots N --gpu-type cpu"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 10) << r.out;
}

// The README's agent on one machine: `aryl-agent --scheduler ipc://... --pool
// training --slots 2 --gpu-type cpu`, no --host. It binds its store to an
// address of this server (not to the host name, which ZeroMQ cannot bind) and
// registers; `aryl nodes` lists it with that address.
TEST_F(PackagedDefaults, ReadmeAgentWithoutHostRegisters) {
  const std::string endpoint = "ipc://" + (root_ / "run" / "scheduler.sock").string();
  aryl::agent::ProcessLauncher launcher;
  aryl::agent::LaunchSpec sched;
  sched.argv = {ARYL_SCHEDULER_BIN, "--endpoint", endpoint, "--state", (root_ / "state" / "state.db").string(),
                "--http-port", "-1"};
  sched.env = {{"ARYL_CONFIG", "/dev/null"}};
  sched.stdout_path = (root_ / "scheduler.log").string();
  ASSERT_TRUE(launcher.Launch(sched).ok());
  aryl::agent::LaunchSpec agent;
  agent.argv = {ARYL_AGENT_BIN, "--scheduler", endpoint, "--pool", "training", "--slots", "2", "--gpu-type", "cpu",
                "--log-dir", (root_ / "log").string()};
  agent.env = {{"ARYL_CONFIG", "/dev/null"}};
  agent.stdout_path = (root_ / "agent.log").string();
  auto agent_pid = launcher.Launch(agent);
  ASSERT_TRUE(agent_pid.ok());
  RunResult nodes;
  const auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < 10) {
    for (const auto& e : launcher.Poll()) {
      FAIL() << (e.pid == *agent_pid ? "aryl-agent" : "aryl-scheduler") << " exited: " << e.Describe() << "\n"
             << ReadFile(root_ / "agent.log") << ReadFile(root_ / "scheduler.log");
    }
    nodes = Exec({ARYL_BIN, "nodes", "--scheduler", endpoint, "--timeout", "1"});
    if (nodes.code == 0 && nodes.out.find("training") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(nodes.code, 0) << nodes.out;
  EXPECT_NE(nodes.out.find("training"), std::string::npos) << nodes.out << ReadFile(root_ / "agent.log");
  const std::string log = ReadFile(root_ / "agent.log");
  EXPECT_NE(log.find("peers reach this server at "), std::string::npos) << log;
  EXPECT_NE(log.find("rendezvous store on tcp://"), std::string::npos) << log;
  launcher.StopAll(5);
}

// An unusable --host stops the agent at once: exit 2 (not restarted by its
// unit), one line naming --host and the value.
TEST_F(PackagedDefaults, AgentWithUnusableHostStopsNamingHost) {
  for (const std::string host : {"no-such-host.invalid", "203.0.113.7"}) {
    RunResult r = Exec({ARYL_AGENT_BIN, "--scheduler", "ipc://" + (root_ / "run" / "none.sock").string(), "--pool",
                        "training", "--slots", "2", "--gpu-type", "cpu", "--log-dir", (root_ / "log").string(),
                        "--host", host});
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--host '" + host + "'"), std::string::npos) << r.out;
    EXPECT_LT(r.seconds, 10) << r.out;
  }
}

}  // namespace
