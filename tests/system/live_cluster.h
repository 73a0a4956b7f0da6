// LiveCluster: a test fixture that runs a real aryl-scheduler and real
// aryl-agent processes on loopback in a scratch directory, with a protocol
// client and helpers to submit, wait and read logs. Used by the system tests and
// the fault tests (tests/chaos). Needs ARYL_SCHEDULER_BIN and ARYL_AGENT_BIN.
#pragma once

#include <algorithm>
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "aryl/agent/process.h"
#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"
#include "test_port.h"

namespace aryl::livetest {

namespace fs = std::filesystem;
namespace p = aryl::protocol;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

inline std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits for `pred` up to `timeout_s`, polling every 50 ms.
template <typename F>
inline bool WaitFor(F pred, double timeout_s) {
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return pred();
}

class LiveCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("aryl-live-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    port_ = FreePort();
    http_port_ = FreePort();
    endpoint_ = "tcp://127.0.0.1:" + std::to_string(port_);
  }
  void TearDown() override {
    launcher_.StopAll(2);
    if (!HasFailure() && !std::getenv("ARYL_KEEP_TEST_DIRS")) fs::remove_all(dir_);
  }

  // Starts aryl-scheduler on port_ and http_port_. FreePort() reserves its
  // ports among the tests, but a process outside the reservations can hold
  // one (CI saw "bind http 127.0.0.1:12525 failed" for 11 s in a row). A
  // scheduler that stops at once over a port in use starts again, once a
  // second for 10 s: on a fresh HTTP port (only this fixture reads
  // http_port_), on a fresh protocol port while no agent or client was given
  // endpoint_ yet, else on the same port. Who held the port goes to the log.
  pid_t StartScheduler(std::vector<std::string> extra = {}) {
    for (int attempt = 0;; ++attempt) {
      const auto log_size = LogSize();
      pid_t pid = LaunchScheduler(extra);
      if (pid == 0 || attempt == 10) return pid;
      auto failed = StoppedOnPortInUse(pid, log_size);
      if (!failed) return pid;
      launcher_.Poll();  // reaps it
      NoteHolder(failed->rfind("bind http", 0) == 0 ? http_port_ : port_);
      if (failed->rfind("bind http", 0) == 0) {
        http_port_ = FreePort();
      } else if (!endpoint_given_) {
        port_ = FreePort();
        endpoint_ = "tcp://" + listen_host_ + ":" + std::to_string(port_);
      } else {
        std::this_thread::sleep_for(milliseconds(1000));
      }
    }
  }

  // Whether `pid`, a scheduler just launched, stopped within its start over a
  // port in use: the log line that says so (from `log_offset` on), else
  // nullopt. Peeks at its exit without reaping it (a test may wait for it).
  std::optional<std::string> StoppedOnPortInUse(pid_t pid, std::uintmax_t log_offset) {
    const fs::path log = dir_ / "scheduler.log";
    bool exited = false;
    auto fresh = [&] {
      std::string text = ReadFile(log);
      return text.substr(std::min<std::size_t>(log_offset, text.size()));
    };
    WaitFor([&] {
      siginfo_t info{};
      exited = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
      return exited || fresh().find("aryl-scheduler listening on") != std::string::npos;
    }, 3);
    if (!exited) return std::nullopt;
    const std::string text = fresh();
    for (const char* what : {"bind http", "bind", "in use"}) {
      auto at = text.find(what);
      if (at == std::string::npos) continue;
      auto end = text.find('\n', at);
      return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    }
    return std::nullopt;
  }

  std::uintmax_t LogSize() {
    std::error_code ec;
    auto n = fs::file_size(dir_ / "scheduler.log", ec);
    return ec ? 0 : n;
  }

  // Appends the sockets on `port` (ss -tanp) to <dir>/port-holders.log.
  void NoteHolder(int port) {
    const std::string cmd = "ss -tanp '( sport = :" + std::to_string(port) + " )' >> '" +
                            (dir_ / "port-holders.log").string() + "' 2>&1";
    (void)std::system(cmd.c_str());
  }

  pid_t LaunchScheduler(const std::vector<std::string>& extra) {
    agent::LaunchSpec spec;
    spec.argv = {ARYL_SCHEDULER_BIN, "--endpoint", "tcp://" + listen_host_ + ":" + std::to_string(port_),
                 "--state", state_path_.empty() ? (dir_ / "state.db").string() : state_path_, "--http-port", std::to_string(http_port_),
                 "--heartbeat", "0.2", "--agent-timeout", "3", "--agent-lease", agent_lease_, "--stop-grace", "2",
                 "--log-level", "debug"};
    // Keyless tcp:// is refused without --insecure (authz.h); tests with keys
    // must not get it, since it also admits --curve-allow.
    if (std::find(extra.begin(), extra.end(), "--curve-key") == extra.end() &&
        std::find(extra.begin(), extra.end(), "--insecure") == extra.end())
      spec.argv.push_back("--insecure");
    spec.argv.insert(spec.argv.end(), extra.begin(), extra.end());
    spec.stdout_path = (dir_ / "scheduler.log").string();
    auto pid = launcher_.Launch(spec);
    EXPECT_TRUE(pid.ok()) << pid.status();
    scheduler_pid_ = pid.ok() ? *pid : 0;
    return scheduler_pid_;
  }

  pid_t StartAgent(const std::string& id, int slots, const std::string& pool = "training",
                   std::vector<std::string> extra = {}) {
    agent::LaunchSpec spec;
    endpoint_given_ = true;
    spec.argv = {ARYL_AGENT_BIN, "--scheduler", endpoint_, "--id", id, "--host", "127.0.0.1", "--pool", pool,
                 "--slots", std::to_string(slots), "--gpu-type", "cpu", "--log-dir", (dir_ / ("logs-" + id)).string(),
                 "--log-level", "debug"};
    spec.argv.insert(spec.argv.end(), extra.begin(), extra.end());
    spec.cwd = dir_.string();
    spec.stdout_path = (dir_ / ("agent-" + id + ".log")).string();
    auto pid = launcher_.Launch(spec);
    EXPECT_TRUE(pid.ok()) << pid.status();
    return pid.ok() ? *pid : 0;
  }

  void Kill(pid_t pid) {
    launcher_.Signal(pid, SIGKILL);
    WaitFor([&] {
      launcher_.Poll();
      return !launcher_.Running(pid);
    }, 5);
  }

  std::unique_ptr<p::Client> Client(std::optional<p::CurveClientKeys> curve = std::nullopt) {
    endpoint_given_ = true;
    p::Client::Options o;
    o.endpoint = endpoint_;
    o.curve = curve;
    auto c = p::Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Waits until `n` agents are connected.
  bool WaitAgents(p::Client& c, int n, double timeout_s = 10) {
    return WaitFor([&] {
      auto r = c.Call<p::NodesReply>(p::ListNodes{}, milliseconds(500));
      if (!r.ok()) return false;
      int connected = 0;
      for (const auto& node : r->nodes) connected += node.connected;
      return connected >= n;
    }, timeout_s);
  }

  Result<p::JobId> Submit(p::Client& c, std::vector<std::string> argv, int workers, int min = 0, int max = 0) {
    p::SubmitJob m;
    m.argv = std::move(argv);
    if (min > 0) {
      m.min_workers = min;
      m.max_workers = max;
      // The stand-in programs (sh loops) model a job resized in place: stayers
      // keep running, joiners start. Without saying so, a program that does not
      // link the runtime is resized by a restart (SubmitJob::elastic).
      m.elastic = "inplace";
    } else {
      m.workers = workers;
    }
    ARYL_ASSIGN_OR_RETURN(auto reply, c.Call<p::SubmitReply>(m, milliseconds(3000)));
    return reply.job;
  }

  Result<p::JobStatusReply> Status(p::Client& c, p::JobId job) {
    p::JobStatus m;
    m.job = job;
    return c.Call<p::JobStatusReply>(m, milliseconds(1000));
  }

  bool WaitState(p::Client& c, p::JobId job, p::JobState state, double timeout_s) {
    return WaitFor([&] {
      auto r = Status(c, job);
      return r.ok() && r->row.state == state;
    }, timeout_s);
  }

  std::string Logs() {
    std::string out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().extension() == ".log") out += "==== " + e.path().filename().string() + "\n" + ReadFile(e.path());
    return out.substr(out.size() > 20000 ? out.size() - 20000 : 0);
  }

  fs::path dir_;
  std::string state_path_;  // empty: <dir>/state.db
  std::string listen_host_ = "127.0.0.1";  // the scheduler's address (set endpoint_ with it)
  // Short, so a job that lost its store's agent starts again within ~15 s;
  // a test of scheduler pauses sets the default's 60.
  std::string agent_lease_ = "8";
  int port_ = 0, http_port_ = 0;
  std::string endpoint_;
  bool endpoint_given_ = false;  // an agent or client points at endpoint_
  pid_t scheduler_pid_ = 0;
  agent::ProcessLauncher launcher_;
};


}  // namespace aryl::livetest
