// aryl-rt-launch: runs a training program elastically on this machine,
// playing the agent's part (store, worker processes, generations).
//
//   aryl-rt-launch --workers 2 --schedule 20:4,40:3,60:1,80:2 -- build/examples/elastic_mlp --steps 100
//
// --schedule STEP:WORLD,... resizes once rank 0 committed STEP steps;
// --kill STEP:WORKER sends SIGKILL to a worker (fault injection); --agent
// drives the workers through the agent messages instead of store keys
// (worker ids are then 0, 1, ...).
//
// SIGTERM and SIGINT are forwarded to every worker (the runtime then stops
// all of them at one step boundary, after a checkpoint); workers still
// running after --grace seconds are killed. Workers get SIGKILL when the
// launcher dies (PR_SET_PDEATHSIG), so killing it leaves no orphans.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <sstream>
#include <thread>

#include "aryl/flags.h"
#include "aryl/logging.h"
#include "local_coordinator.h"

namespace {

std::vector<std::pair<int64_t, std::string>> ParsePairs(const std::string& text) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) aryl::UsageError("aryl-rt-launch", "bad STEP:VALUE item '" + item + "'");
    out.emplace_back(std::stoll(item.substr(0, colon)), item.substr(colon + 1));
  }
  return out;
}

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal = sig; }

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("aryl-rt-launch", "Run a training program elastically on this machine");
  options.add_options()("workers", "initial workers", cxxopts::value<int>()->default_value("2"))(
      "schedule", "resizes STEP:WORLD,...", cxxopts::value<std::string>()->default_value(""))(
      "kill", "SIGKILL STEP:WORKER,...", cxxopts::value<std::string>()->default_value(""))(
      "job", "job id", cxxopts::value<std::string>()->default_value("local"))(
      "backend", "gloo|fake", cxxopts::value<std::string>()->default_value("gloo"))(
      "checkpoint-dir", "checkpoint directory", cxxopts::value<std::string>()->default_value(""))(
      "log-dir", "per-worker logs (default: inherit stdout)", cxxopts::value<std::string>()->default_value(""))(
      "store", "tcp://127.0.0.1:* (project store) or c10d", cxxopts::value<std::string>()->default_value("tcp://127.0.0.1:*"))(
      "agent", "announce generations as agent messages over ipc:// (numeric job id)")(
      "timeout", "seconds before giving up", cxxopts::value<int>()->default_value("600"))(
      "grace", "seconds workers get after a forwarded SIGTERM/SIGINT", cxxopts::value<int>()->default_value("30"))(
      "command", "program and arguments", cxxopts::value<std::vector<std::string>>());
  options.parse_positional({"command"});
  aryl::AddCommonFlags(options);
  auto flags = aryl::ParseFlagsOrExit(options, argc, argv);
  if (!flags.count("command")) aryl::UsageError("aryl-rt-launch", "missing the program to run (after --)");
  if (flags["workers"].as<int>() < 1)
    aryl::FlagError("aryl-rt-launch", "--workers", std::to_string(flags["workers"].as<int>()), "must be >= 1");
  if (flags["timeout"].as<int>() < 1)
    aryl::FlagError("aryl-rt-launch", "--timeout", std::to_string(flags["timeout"].as<int>()), "must be >= 1");

  aryl::CoordinatorOptions opt;
  opt.worker_argv = flags["command"].as<std::vector<std::string>>();
  opt.job_id = flags["job"].as<std::string>();
  opt.backend = flags["backend"].as<std::string>();
  opt.checkpoint_dir = flags["checkpoint-dir"].as<std::string>();
  opt.log_dir = flags["log-dir"].as<std::string>();
  opt.store = flags["store"].as<std::string>();
  opt.agent = flags.count("agent") > 0;
  if (opt.agent && flags["job"].as<std::string>() == "local") opt.job_id = "1";
  auto coord = aryl::LocalCoordinator::Start(opt);
  if (!coord.ok()) {
    std::fprintf(stderr, "aryl-rt-launch: %s\n", coord.status().ToString().c_str());
    return 1;
  }
  auto& c = **coord;
  std::printf("aryl-rt-launch: store %s\n", c.store_endpoint().c_str());
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::map<std::string, pid_t> announced;
  auto print_new_workers = [&] {
    for (auto& [id, pid] : c.running()) {
      if (announced.emplace(id, pid).second) std::printf("aryl-rt-launch: worker %s pid %d\n", id.c_str(), int(pid));
    }
    std::fflush(stdout);
  };
  if (auto s = c.Launch(flags["workers"].as<int>()); !s.ok()) {
    std::fprintf(stderr, "aryl-rt-launch: %s\n", s.ToString().c_str());
    return 1;
  }
  print_new_workers();
  int forwarded = 0;
  std::chrono::steady_clock::time_point grace_end;
  auto schedule = ParsePairs(flags["schedule"].as<std::string>());
  auto kills = ParsePairs(flags["kill"].as<std::string>());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(flags["timeout"].as<int>());
  size_t next_resize = 0, next_kill = 0;
  while (!c.Reap()) {
    if (int sig = g_signal.exchange(0); sig != 0) {
      int n = c.SignalAll(sig);
      std::printf("aryl-rt-launch: forwarded %s to %d workers\n", sig == SIGINT ? "SIGINT" : "SIGTERM", n);
      std::fflush(stdout);
      if (forwarded == 0) grace_end = std::chrono::steady_clock::now() + std::chrono::seconds(flags["grace"].as<int>());
      forwarded = sig;
    }
    if (forwarded != 0) {
      if (std::chrono::steady_clock::now() > grace_end) {
        std::printf("aryl-rt-launch: grace period over: SIGKILL %d workers\n", c.SignalAll(SIGKILL));
        std::fflush(stdout);
        grace_end = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;  // no more resizes once stopping
    }
    int64_t progress = c.Progress();
    if (next_resize < schedule.size() && progress >= schedule[next_resize].first) {
      auto g = c.Resize(std::stoi(schedule[next_resize].second));
      std::printf("aryl-rt-launch: step %lld: resize to %s: %s\n", (long long)progress,
                  schedule[next_resize].second.c_str(), g.ok() ? ("gen " + std::to_string(*g)).c_str()
                                                                : g.status().ToString().c_str());
      std::fflush(stdout);
      print_new_workers();
      ++next_resize;
    }
    if (next_kill < kills.size() && progress >= kills[next_kill].first) {
      auto s = c.Kill(kills[next_kill].second, SIGKILL);
      std::printf("aryl-rt-launch: step %lld: SIGKILL %s: %s\n", (long long)progress, kills[next_kill].second.c_str(),
                  s.ToString().c_str());
      std::fflush(stdout);
      ++next_kill;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "aryl-rt-launch: timed out\n");
      return 124;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (forwarded != 0) {
    for (auto& [id, code] : c.exit_codes()) std::printf("aryl-rt-launch: %s exited %d\n", id.c_str(), code);
    return 128 + forwarded;
  }
  int worst = 0;
  for (auto& [id, code] : c.exit_codes()) {
    std::printf("aryl-rt-launch: %s exited %d\n", id.c_str(), code);
    if (code != 0 && code != 128 + SIGKILL) worst = std::max(worst, code);
  }
  return worst;
}
