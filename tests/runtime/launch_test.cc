// aryl-rt-launch as a process: signals sent to the launcher reach its
// workers, and killing it outright leaves no orphaned workers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A process that exited is gone or a zombie (nobody reaped it yet).
bool Alive(pid_t pid) {
  std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  auto close = stat.rfind(')');
  return close == std::string::npos || stat.size() < close + 3 || stat[close + 2] != 'Z';
}

struct Launcher {
  pid_t pid = -1;
  std::string dir, out;
  std::map<std::string, pid_t> workers;

  // Starts `workers` rt_test_workers that train slowly, and waits until
  // rank 0 has committed steps (the launcher printed every worker's pid).
  void Start(const std::string& name, int n) {
    dir = (fs::temp_directory_path() / ("aryl_launch_" + name + "_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    out = dir + "/launcher.out";
    std::vector<std::string> args = {ARYL_RT_LAUNCH, "--workers", std::to_string(n), "--grace", "20",
                                     "--log-dir", dir, "--checkpoint-dir", dir + "/ckpt", "--",
                                     ARYL_RT_TEST_WORKER, "--steps", "100000", "--sleep-ms", "20"};
    pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setpgid(0, 0);  // the test's own signals stay ours
      std::FILE* f = std::freopen(out.c_str(), "w", stdout);
      (void)f;
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    auto deadline = Clock::now() + std::chrono::seconds(60);
    std::regex re("worker (\\w+) pid (\\d+)");
    while (Clock::now() < deadline) {
      std::string text = ReadAll(out);
      workers.clear();
      for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
        workers[(*it)[1]] = pid_t(std::stol((*it)[2]));
      }
      if (int(workers.size()) == n && ReadAll(dir + "/w0.log").find("step=10 ") != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL() << "workers did not start training:\n" << ReadAll(out) << ReadAll(dir + "/w0.log");
  }

  // Waits for the launcher to exit; its exit status (128+signal when killed).
  int Wait(std::chrono::seconds timeout) {
    auto deadline = Clock::now() + timeout;
    int st = 0;
    while (::waitpid(pid, &st, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

  bool AllWorkersGone(std::chrono::seconds timeout) {
    auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      bool any = false;
      for (auto& [id, p] : workers) any = any || Alive(p);
      if (!any) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  ~Launcher() {
    for (auto& [id, p] : workers) ::kill(p, SIGKILL);
    if (pid > 0) ::kill(pid, SIGKILL);
    fs::remove_all(dir);
  }
};

// SIGTERM to the launcher is forwarded: the workers stop together at a step
// boundary after a checkpoint and exit 0; the launcher exits 128+SIGTERM.
TEST(RtLaunch, ForwardsSigtermToWorkers) {
  Launcher l;
  ASSERT_NO_FATAL_FAILURE(l.Start("sigterm", 2));
  ASSERT_EQ(::kill(l.pid, SIGTERM), 0);
  EXPECT_EQ(l.Wait(std::chrono::seconds(60)), 128 + SIGTERM) << ReadAll(l.out);
  std::string out = ReadAll(l.out);
  EXPECT_NE(out.find("forwarded SIGTERM to 2 workers"), std::string::npos) << out;
  EXPECT_NE(out.find("w0 exited 0"), std::string::npos) << out;
  EXPECT_NE(out.find("w1 exited 0"), std::string::npos) << out;
  EXPECT_TRUE(l.AllWorkersGone(std::chrono::seconds(5)));
  EXPECT_FALSE(fs::is_empty(l.dir + "/ckpt")) << "no checkpoint before stopping";
}

// SIGKILL to the launcher (nothing can be forwarded): the workers get their
// parent-death signal and are gone too.
TEST(RtLaunch, KilledLauncherLeavesNoOrphans) {
  Launcher l;
  ASSERT_NO_FATAL_FAILURE(l.Start("sigkill", 2));
  ASSERT_EQ(::kill(l.pid, SIGKILL), 0);
  EXPECT_EQ(l.Wait(std::chrono::seconds(30)), 128 + SIGKILL);
  EXPECT_TRUE(l.AllWorkersGone(std::chrono::seconds(20))) << "workers outlived the launcher";
}

}  // namespace
