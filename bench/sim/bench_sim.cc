// bench_sim: how fast aryl-sim replays the shipped ITP traces, in the manner of
// nccl-tests: one harness that sweeps workload sizes and policies, checks each
// run (every fidelity check must pass, every job must complete) and prints a
// table. Each run executes in a forked child so that its peak RSS is its own.
//
//   bench_sim [--policies aryl,baseline] [--training 125x8xA100]
//             [--inference 64x8xT4] [--elastic-fraction 0.5] [--load 1]
//             [--speed-knowledge oracle|learned|linear] [--data DIR]
//
// Sizes: the first trace file, the first four, then all of them merged. Each row
// reports CPU microseconds per job and the average number of queued jobs (from
// hourly samples), so that a per-job cost growing with the queue shows.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "aryl/flags.h"
#include "aryl/sim/cluster_spec.h"
#include "aryl/sim/demand.h"
#include "aryl/sim/simulator.h"
#include "aryl/sim/trace.h"
#include "aryl/sim/workload.h"

namespace {

struct Outcome {
  bool ok = false;
  double wall_s = 0;
  double max_rss_mib = 0;
  double cpu_s = 0;  // user + system CPU time of the child
  long long jobs = 0;
  double avg_queued = 0;  // mean of the hourly queued-job samples
  char message[512] = {};
};

// Runs `policy` on `traces` in a child process; returns its timing and peak RSS.
Outcome RunInChild(const std::string& data, const std::vector<std::string>& traces, const std::string& policy,
                   const std::string& training, const std::string& inference, double elastic_fraction,
                   double load, aryl::sim::SpeedKnowledge speed) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Outcome out;
    auto fail = [&](const aryl::Status& s) {
      std::snprintf(out.message, sizeof(out.message), "%s", s.ToString().c_str());
      (void)!write(fds[1], &out, sizeof(out));
      _exit(1);
    };
    const auto start = std::chrono::steady_clock::now();
    auto trace = aryl::sim::ReadTraces(traces);
    if (!trace.ok()) fail(trace.status());
    if (load != 1) {
      if (auto s = aryl::sim::ApplyLoad(*trace, load); !s.ok()) fail(s);
    }
    aryl::sim::SimConfig config;
    config.training = *aryl::sim::ParsePoolSpec(training, "--training");
    config.inference = *aryl::sim::ParsePoolSpec(inference, "--inference");
    config.progress = false;
    config.speed_knowledge = speed;
    auto catalog = aryl::sim::LoadCatalog(data + "/throughput", {.reference_type = config.training.groups[0].gpu_type,
                                                                  .relative_speed = 0.25,
                                                                  .other_types = {config.inference.groups[0].gpu_type}});
    if (!catalog.ok()) fail(catalog.status());
    auto jobs = aryl::sim::BuildJobs(*trace, **catalog, {.elastic_fraction = elastic_fraction, .seed = 1});
    if (!jobs.ok()) fail(jobs.status());
    auto demand = aryl::sim::ParseDemand("daily", config.inference.Servers(), 1);
    if (!demand.ok()) fail(demand.status());
    aryl::sim::Simulator sim(config, std::move(*jobs), std::move(*demand), std::move(*catalog));
    auto r = sim.Run(policy);
    if (!r.ok()) fail(r.status());
    out.ok = true;
    out.jobs = r->metrics.jobs_completed;
    double queued = 0;
    for (const auto& s : r->timeline) queued += s.queued_jobs;
    out.avg_queued = r->timeline.empty() ? 0 : queued / static_cast<double>(r->timeline.size());
    out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (void)!write(fds[1], &out, sizeof(out));
    _exit(0);
  }
  close(fds[1]);
  Outcome out;
  if (read(fds[0], &out, sizeof(out)) != static_cast<ssize_t>(sizeof(out))) out.ok = false;
  close(fds[0]);
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  out.max_rss_mib = usage.ru_maxrss / 1024.0;  // KiB on Linux
  out.cpu_s = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
              usage.ru_stime.tv_usec * 1e-6;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("bench_sim", "aryl-sim throughput on the shipped ITP traces");
  options.add_options()
      ("policies", "Policies to time", cxxopts::value<std::string>()->default_value("aryl,baseline"))
      ("training", "Training cluster", cxxopts::value<std::string>()->default_value("125x8xA100"))
      ("inference", "Inference cluster", cxxopts::value<std::string>()->default_value("64x8xT4"))
      ("elastic-fraction", "Fraction of elastic jobs", cxxopts::value<double>()->default_value("0.5"))
      ("load", "Compress inter-arrival times by this factor", cxxopts::value<double>()->default_value("1"))
      ("speed-knowledge", "oracle, learned or linear (docs/simulator.md)",
       cxxopts::value<std::string>()->default_value("oracle"))
      ("data", "Data directory", cxxopts::value<std::string>()->default_value(ARYL_SOURCE_DIR "/data"))
      ("all-only", "Only the full merged workload");
  aryl::AddCommonFlags(options);
  auto flags = aryl::ParseFlagsOrExit(options, argc, argv);
  const std::string data = flags["data"].as<std::string>();
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(data + "/traces/itp")) {
    if (e.path().extension() == ".csv") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> policies;
  {
    std::string p = flags["policies"].as<std::string>();
    std::size_t start = 0;
    while (start <= p.size()) {
      std::size_t comma = p.find(',', start);
      if (comma == std::string::npos) comma = p.size();
      if (comma > start) policies.push_back(p.substr(start, comma - start));
      start = comma + 1;
    }
  }
  const std::string knowledge = flags["speed-knowledge"].as<std::string>();
  aryl::sim::SpeedKnowledge speed = aryl::sim::SpeedKnowledge::kOracle;
  if (knowledge == "learned") {
    speed = aryl::sim::SpeedKnowledge::kLearned;
  } else if (knowledge == "linear") {
    speed = aryl::sim::SpeedKnowledge::kLinear;
  } else if (knowledge != "oracle") {
    aryl::UsageError("bench_sim", "--speed-knowledge: '" + knowledge + "' (oracle, learned or linear)");
  }
  std::vector<std::vector<std::string>> sizes;
  if (!flags["all-only"].as<bool>()) {
    sizes.push_back({files.begin(), files.begin() + 1});
    if (files.size() > 4) sizes.push_back({files.begin(), files.begin() + 4});
  }
  sizes.push_back(files);

  std::printf("# training %s, inference %s, elastic fraction %.2f, load %.2f, daily demand, speed %s, "
              "one core per run\n",
              flags["training"].as<std::string>().c_str(), flags["inference"].as<std::string>().c_str(),
              flags["elastic-fraction"].as<double>(), flags["load"].as<double>(), knowledge.c_str());
  // CPU seconds is the figure to compare on a shared machine: wall time also counts
  // the time other processes held the core.
  std::printf("%-14s %6s %8s %10s %10s %10s %12s %10s  %s\n", "policy", "files", "jobs", "avg queued", "wall s",
              "CPU s", "peak RSS MiB", "us/job", "check");
  int failures = 0;
  for (const auto& traces : sizes) {
    for (const auto& policy : policies) {
      Outcome o = RunInChild(data, traces, policy, flags["training"].as<std::string>(),
                             flags["inference"].as<std::string>(), flags["elastic-fraction"].as<double>(),
                             flags["load"].as<double>(), speed);
      std::printf("%-14s %6zu %8lld %10.0f %10.2f %10.2f %12.1f %10.1f  %s\n", policy.c_str(), traces.size(), o.jobs,
                  o.avg_queued, o.wall_s, o.cpu_s, o.max_rss_mib, o.jobs > 0 ? o.cpu_s / o.jobs * 1e6 : 0.0,
                  o.ok ? "ok" : o.message);
      std::fflush(stdout);
      failures += !o.ok;
    }
  }
  return failures == 0 ? 0 : 1;
}
