// aryl-simtest: runs seeds of the live system's deterministic simulation
// (aryl/simtest/live_sim.h) and reports every invariant violation with the
// command that replays it.
//   aryl-simtest --seeds 1:1000 [--faults kill,loan,network]
//   aryl-simtest --replay 42 [--faults ...]   one seed, every event printed
//   aryl-simtest --daemon --seeds 1:200 [--faults kill,loan,pause,restart,partition,disk]
//                the daemon's own handlers and state (daemon_sim.h)
//   aryl-simtest --daemon --replay 42 --daemon-log   with the daemon's log lines
// Exit codes: 0 no violation, 1 violations, 2 usage error.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "aryl/simtest/live_sim.h"
#ifdef ARYL_SIMTEST_DAEMON
#include "aryl/simtest/daemon_sim.h"
#endif

namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "aryl-simtest: %s\nusage: aryl-simtest [--daemon] --seeds A:B [--faults LIST] | [--daemon] --replay SEED "
               "[--faults LIST]\n",
               why.c_str());
  return 2;
}

bool ParseU64(const std::string& s, std::uint64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t first = 1, last = 100;
  bool replay = false, daemon = false, daemon_log = false;
  unsigned faults = aryl::simtest::kFaultAll;
  std::string faults_text = "all";
  const char* faults_arg = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)flag;
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::printf("aryl-simtest --seeds A:B [--faults kill,loan,network|all|none] | --replay SEED\n"
                  "aryl-simtest --daemon --seeds A:B [--faults kill,loan,pause,restart,partition,disk,agent,ckpt,cdisk,loss,dup,delay,oneway,lag|process|network|all|none]\n"
                  "Runs the live system's deterministic simulation for each seed (docs/simtest.md); --daemon\n"
                  "runs the scheduler daemon's own handlers and state under seeded faults; with --replay,\n"
                  "--daemon-log adds the daemon's own log lines to the trace, at virtual time.\n");
      return 0;
    } else if (a == "--version") {
      std::printf("aryl-simtest 1\n");
      return 0;
    } else if (a == "--seeds") {
      const char* v = value("--seeds");
      if (!v) return Usage("--seeds needs A:B");
      std::string s = v;
      auto colon = s.find(':');
      if (colon == std::string::npos || !ParseU64(s.substr(0, colon), first) || !ParseU64(s.substr(colon + 1), last) ||
          last < first)
        return Usage("--seeds '" + s + "': want A:B with A <= B, two unsigned 64-bit numbers");
    } else if (a == "--replay") {
      const char* v = value("--replay");
      if (!v || !ParseU64(v, first)) return Usage(std::string("--replay '") + (v ? v : "") + "': want a seed");
      last = first;
      replay = true;
    } else if (a == "--faults") {
      faults_arg = value("--faults");
      if (!faults_arg) return Usage("--faults needs a list");
    } else if (a == "--daemon-log") {
      daemon_log = true;
    } else if (a == "--daemon") {
#ifdef ARYL_SIMTEST_DAEMON
      daemon = true;
#else
      return Usage("--daemon: this build has no daemon (aryl_driven_cluster was not built)");
#endif
    } else {
      return Usage("unknown argument '" + a + "'");
    }
  }
#ifdef ARYL_SIMTEST_DAEMON
  if (daemon) {
    faults = aryl::simtest::kDaemonAll;
    if (faults_arg) {
      auto f = aryl::simtest::ParseDaemonFaults(faults_arg);
      if (!f.ok()) return Usage(f.status().message());
      faults = *f;
    }
    faults_text = aryl::simtest::DaemonFaultsString(faults);
  } else
#endif
  if (faults_arg) {
    auto f = aryl::simtest::ParseFaults(faults_arg);
    if (!f.ok()) return Usage(f.status().message());
    faults = *f;
    faults_text = aryl::simtest::FaultsString(faults);
  }
  const std::string mode = daemon ? "--daemon " : "";
  auto t0 = std::chrono::steady_clock::now();
  std::uint64_t seeds = 0, violations = 0, completed = 0, kills = 0, generations = 0, abandoned = 0;
  std::uint64_t checkpoints = 0, torn = 0, failed = 0, corrupted = 0;
  std::int64_t retrained = 0;
  for (std::uint64_t seed = first;; ++seed) {
    aryl::simtest::Options opt;
    opt.seed = seed;
    opt.faults = faults;
    opt.trace = replay;
    opt.daemon_log = daemon_log;
#ifdef ARYL_SIMTEST_DAEMON
    auto out = daemon ? aryl::simtest::RunDaemonSeed(opt) : aryl::simtest::RunSeed(opt);
#else
    auto out = aryl::simtest::RunSeed(opt);
#endif
    ++seeds;
    completed += out.completed;
    kills += static_cast<std::uint64_t>(out.kills);
    generations += static_cast<std::uint64_t>(out.generations);
    abandoned += static_cast<std::uint64_t>(out.abandoned);
    checkpoints += static_cast<std::uint64_t>(out.checkpoints);
    torn += static_cast<std::uint64_t>(out.torn);
    failed += static_cast<std::uint64_t>(out.checkpoints_failed);
    corrupted += static_cast<std::uint64_t>(out.checkpoints_corrupted);
    retrained = std::max(retrained, out.retrained);
    if (replay) {
      for (const auto& line : out.trace) std::printf("%s\n", line.c_str());
      std::printf("seed %llu: %s at %.1f s, step %lld, %lld generations, %lld kills, %lld abandoned, %lld events\n",
                  (unsigned long long)seed, out.completed ? "completed" : "not completed", out.end_time,
                  (long long)out.steps, (long long)out.generations, (long long)out.kills, (long long)out.abandoned,
                  (long long)out.events);
    }
    for (const auto& v : out.violations) {
      ++violations;
      std::printf("seed %llu: %s at %.3f s: %s  (replay: aryl-simtest %s--replay %llu --faults %s)\n",
                  (unsigned long long)seed, v.invariant.c_str(), v.time, v.what.c_str(), mode.c_str(),
                  (unsigned long long)seed, faults_text.c_str());
    }
    if (seed == last) break;
  }
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%llu completed, %llu kills, %llu generations (%llu abandoned by agents), %.2f s wall\n",
               (unsigned long long)completed, (unsigned long long)kills, (unsigned long long)generations,
               (unsigned long long)abandoned, wall);
  if (daemon) {
    std::printf("%llu checkpoints, %llu torn, at most %lld steps trained again by one fresh start\n",
                (unsigned long long)checkpoints, (unsigned long long)torn, (long long)retrained);
    std::printf("%llu checkpoint writes failed, %llu checkpoint files corrupted\n", (unsigned long long)failed,
                (unsigned long long)corrupted);
  }
  std::printf("%llu seeds, %llu violations\n", (unsigned long long)seeds, (unsigned long long)violations);
  return violations > 0 ? 1 : 0;
}
