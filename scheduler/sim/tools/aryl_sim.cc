// aryl-sim: replays job traces against a simulated training + inference cluster
// under one or more scheduling policies and prints a comparison table.
// See docs/simulator.md.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "aryl/flags.h"
#include "aryl/sched/queues.h"
#include "aryl/sched/scheduler.h"
#include "aryl/sched/throughput.h"
#include "aryl/sim/cluster_spec.h"
#include "aryl/sim/demand.h"
#include "aryl/sim/report.h"
#include "aryl/sim/simulator.h"
#include "aryl/sim/teams.h"
#include "aryl/sim/trace.h"
#include "aryl/sim/workload.h"

namespace {

constexpr char kProgram[] = "aryl-sim";

[[noreturn]] void Fail(const aryl::Status& s) {
  std::cerr << kProgram << ": error: " << s.message() << "\n";
  std::exit(1);
}

template <typename T>
T OrUsage(aryl::Result<T> r) {
  if (!r.ok()) aryl::UsageError(kProgram, r.status().message());
  return std::move(r).value();
}

std::vector<std::string> SplitList(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const std::string& v : values) {
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (!item.empty()) out.push_back(item);
    }
  }
  return out;
}

// The GPU types with throughput tables: the subdirectories of `dir`, sorted.
std::vector<std::string> TableTypes(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_directory(ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string JoinComma(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// An output FILE (--json, --timeline, --jobs-csv) must be writable before the
// simulation runs, not found unwritable after it: a usage error otherwise.
void RequireWritableFile(const std::string& flag, const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (file.empty()) aryl::FlagError(kProgram, flag, file, "a file name is not empty");
  if (fs::is_directory(file, ec)) aryl::FlagError(kProgram, flag, file, "is a directory, not a file");
  fs::path parent = fs::path(file).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec)) aryl::FlagError(kProgram, flag, file, "no directory " + parent.string());
  if (::access(parent.c_str(), W_OK) != 0)
    aryl::FlagError(kProgram, flag, file, "cannot write in " + parent.string() + ": " + std::strerror(errno));
  if (fs::exists(file, ec) && ::access(file.c_str(), W_OK) != 0)
    aryl::FlagError(kProgram, flag, file, std::strerror(errno));
}

// --plot DIR: made now (as WritePlots would) and writable.
void RequireWritableDir(const std::string& flag, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (dir.empty()) aryl::FlagError(kProgram, flag, dir, "a directory name is not empty");
  fs::create_directories(dir, ec);
  if (ec) aryl::FlagError(kProgram, flag, dir, "cannot create the directory: " + ec.message());
  if (!fs::is_directory(dir, ec)) aryl::FlagError(kProgram, flag, dir, "not a directory");
  if (::access(dir.c_str(), W_OK) != 0) aryl::FlagError(kProgram, flag, dir, std::strerror(errno));
}

// A default value as cxxopts takes it ("600", "0.5").
std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// data/throughput next to the working directory, else in the source tree.
std::string DefaultThroughputDir() {
  if (std::filesystem::is_directory("data/throughput")) return "data/throughput";
  return std::string(ARYL_SOURCE_DIR) + "/data/throughput";
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options(kProgram, "Trace-driven simulator of Aryl and its baselines (see docs/simulator.md)");
  options.add_options("input")
      ("trace", "Job trace CSV (ITP or Aryl format); repeat or comma-separate to merge",
       cxxopts::value<std::vector<std::string>>())
      ("skip-bad-rows", "Skip (and count) bad trace rows instead of failing")
      ("window", "START:END seconds: keep jobs submitted in [START, END)", cxxopts::value<std::string>())
      ("load", "Compress inter-arrival times by this factor", cxxopts::value<double>()->default_value("1"))
      ("throughput", "Directory of throughput tables <TYPE>/<model>.csv",
       cxxopts::value<std::string>()->default_value(DefaultThroughputDir()))
      ("throughput-row", "Row of each throughput table: usual (nearest the model's usual global batch, "
       "data/throughput/usual_batch.csv), first (smallest batch), largest, or a global batch size",
       cxxopts::value<std::string>()->default_value("usual"))
      ("relative-speed", "Speed of a GPU type without a table for a model, relative to the training type",
       cxxopts::value<double>()->default_value("0.25"))
      ("elastic-fraction", "Fraction of jobs (without an elastic column) made elastic",
       cxxopts::value<double>()->default_value("0"))
      ("elastic-range", "LO:HI: elastic jobs run on [LO x n, HI x n] GPUs (powers of two)",
       cxxopts::value<std::string>()->default_value("0.5:2"))
      ("seed", "Seed for elastic assignment, demand noise and random reclaim",
       cxxopts::value<std::uint64_t>()->default_value("1"));
  options.add_options("cluster")
      ("training", "Training cluster, SERVERSxGPUSxTYPE", cxxopts::value<std::string>()->default_value("64x8xA100"))
      ("inference", "Inference cluster, SERVERSxGPUSxTYPE or none",
       cxxopts::value<std::string>()->default_value("48x8xT4"))
      ("inference-demand", "FILE (CSV time_s,servers), daily:peak=..,trough=..,peak_hour=..,weekend=..,"
       "noise=..,step=.., constant:F or none",
       cxxopts::value<std::string>()->default_value("daily"))
      ("reclaim-deadline", "Seconds the training side has to return reclaimed servers",
       cxxopts::value<double>()->default_value("300"));
  options.add_options("scheduler")
      ("policy", "Comma-separated policies to run side by side",
       cxxopts::value<std::string>()->default_value("baseline,aryl"))
      ("fifo", "FIFO admission instead of shortest-job-first")
      ("queues", "Teams: a CSV of queues (queue,quota_gpus,weight,jobs_share[,gpu_type,borrow_limit,lend_limit,"
       "cohort,priority_mix]); trace jobs are assigned by a hash of their id (docs/simulator.md, \"Teams\")",
       cxxopts::value<std::string>())
      ("quota-min-runtime", "Teams: seconds a job runs before a quota reclaim may preempt it",
       cxxopts::value<double>()->default_value(Num(aryl::sched::SchedulerConfig{}.quota_min_runtime)))
      ("quota-reclaim-deadline", "Teams: seconds within which a queue under quota with pending work gets "
       "its GPUs back (the bound; overrides --quota-min-runtime)",
       cxxopts::value<double>()->default_value(Num(aryl::sched::SchedulerConfig{}.quota_reclaim_deadline)))
      ("min-type-speed", "Keep jobs off GPU types slower than this fraction of their fastest type (0: any)",
       cxxopts::value<double>()->default_value("0"))
      ("inelastic-on-loaned", "Whether inelastic jobs may run on loaned servers when no training server fits",
       cxxopts::value<bool>()->default_value("true"))
      ("hetero-dp", "Heterogeneity-aware data parallelism: aryl gives idle loaned GPUs of another type to "
       "elastic jobs, batch shares proportional to speed",
       cxxopts::value<bool>()->default_value("false"))
      ("checkpoint-interval", "Seconds between checkpoints", cxxopts::value<double>()->default_value("1800"))
      ("rescale-pause", "Seconds a rescale pauses a job", cxxopts::value<double>()->default_value("30"))
      ("restart-pause", "Seconds a restart after preemption costs", cxxopts::value<double>()->default_value("60"))
      ("resume-pause", "Seconds a start after a suspension (a preemption that checkpoints first) costs",
       cxxopts::value<double>()->default_value("10"))
      ("resize-horizon", "Seconds a voluntary grow's gain is counted over (at most the job's remaining time): "
       "it is made only when that gain beats its pause plus --resize-margin (docs/scheduler.md)",
       cxxopts::value<double>()->default_value(Num(aryl::sched::SchedulerConfig{}.resize_horizon)))
      ("resize-dwell", "Seconds a job keeps its size after a resize unless a reclaim, failure or queued "
       "job's base forces a change", cxxopts::value<double>()->default_value(Num(aryl::sched::SchedulerConfig{}.resize_dwell)))
      ("resize-margin", "Seconds of progress a grow must gain on top of its pause",
       cxxopts::value<double>()->default_value(Num(aryl::sched::SchedulerConfig{}.resize_margin)))
      ("knapsack-exact-budget", "Largest knapsack (groups x capacity x options) solved exactly; above it the "
       "core's approximate solver is used (default: the core's)",
       cxxopts::value<std::int64_t>()->default_value(std::to_string(aryl::sched::SchedulerConfig{}.knapsack_exact_budget)))
      ("tick", "Longest gap in seconds between policy rounds while jobs are queued or running (0: none)",
       cxxopts::value<double>()->default_value("600"))
      ("speed-knowledge", "What policies know of job speed: oracle (the true tables), learned (fitted from "
       "noisy step-time samples where jobs ran) or linear (throughput = workers on every type)",
       cxxopts::value<std::string>()->default_value("oracle"))
      ("speed-noise", "learned: log-space std of a measured median step time",
       cxxopts::value<double>()->default_value("0.05"))
      ("speed-window", "learned: seconds a configuration runs before it is measured",
       cxxopts::value<double>()->default_value("60"));
  options.add_options("output")
      ("json", "Write the results as JSON to FILE", cxxopts::value<std::string>())
      ("timeline", "Write the per-interval timeline CSV to FILE", cxxopts::value<std::string>())
      ("jobs-csv", "Write one row per policy and job (submit, first start, finish, waiting, preemptions, "
       "rescales, GPU types) to FILE", cxxopts::value<std::string>())
      ("timeline-interval", "Seconds between timeline samples", cxxopts::value<double>()->default_value("3600"))
      ("plot", "Write timeline.png and jct_cdf.png (gnuplot) into DIR", cxxopts::value<std::string>())
      ("no-progress", "Never draw the progress bar");
  aryl::AddCommonFlags(options);
  auto flags = aryl::ParseFlagsOrExit(options, argc, argv);

  if (!flags.count("trace")) aryl::UsageError(kProgram, "--trace is required");
  const std::vector<std::string> trace_paths = SplitList(flags["trace"].as<std::vector<std::string>>());
  const std::vector<std::string> policies = SplitList({flags["policy"].as<std::string>()});
  if (policies.empty()) aryl::UsageError(kProgram, "--policy: no policy named");
  const std::uint64_t seed = flags["seed"].as<std::uint64_t>();

  aryl::sim::SimConfig config;
  config.training = OrUsage(aryl::sim::ParsePoolSpec(flags["training"].as<std::string>(), "--training"));
  config.inference = OrUsage(aryl::sim::ParsePoolSpec(flags["inference"].as<std::string>(), "--inference"));
  if (config.training.Servers() == 0) aryl::UsageError(kProgram, "--training: the training cluster is empty");
  if (config.training.groups.size() != 1)
    aryl::UsageError(kProgram, "--training: one server group (the reference GPU type) is supported");
  config.reclaim_deadline = flags["reclaim-deadline"].as<double>();
  config.tick = flags["tick"].as<double>();
  config.timeline_interval = flags["timeline-interval"].as<double>();
  config.progress = !flags["no-progress"].as<bool>();
  config.scheduler.fifo = flags["fifo"].as<bool>();
  config.scheduler.min_type_speed = flags["min-type-speed"].as<double>();
  config.scheduler.inelastic_on_loaned = flags["inelastic-on-loaned"].as<bool>();
  config.scheduler.hetero_dp = flags["hetero-dp"].as<bool>();
  config.scheduler.checkpoint_interval = flags["checkpoint-interval"].as<double>();
  config.scheduler.rescale_pause = flags["rescale-pause"].as<double>();
  config.scheduler.restart_pause = flags["restart-pause"].as<double>();
  config.scheduler.resume_pause = flags["resume-pause"].as<double>();
  config.scheduler.resize_horizon = flags["resize-horizon"].as<double>();
  config.scheduler.resize_dwell = flags["resize-dwell"].as<double>();
  config.scheduler.resize_margin = flags["resize-margin"].as<double>();
  config.scheduler.seed = seed;
  config.scheduler.knapsack_exact_budget = flags["knapsack-exact-budget"].as<std::int64_t>();
  {
    const std::string k = flags["speed-knowledge"].as<std::string>();
    if (k == "oracle") {
      config.speed_knowledge = aryl::sim::SpeedKnowledge::kOracle;
    } else if (k == "learned") {
      config.speed_knowledge = aryl::sim::SpeedKnowledge::kLearned;
    } else if (k == "linear") {
      config.speed_knowledge = aryl::sim::SpeedKnowledge::kLinear;
    } else {
      aryl::UsageError(kProgram, "--speed-knowledge: '" + k + "' (oracle, learned or linear)");
    }
  }
  config.speed_noise = flags["speed-noise"].as<double>();
  config.speed_window = flags["speed-window"].as<double>();
  if (!(config.speed_noise >= 0)) aryl::UsageError(kProgram, "--speed-noise: must be >= 0");
  if (!(config.speed_window >= 0)) aryl::UsageError(kProgram, "--speed-window: must be >= 0");
  if (!(config.reclaim_deadline >= 0)) aryl::UsageError(kProgram, "--reclaim-deadline: must be >= 0");
  if (!(config.tick >= 0)) aryl::UsageError(kProgram, "--tick: must be >= 0");
  if (!(config.timeline_interval > 0)) aryl::UsageError(kProgram, "--timeline-interval: must be > 0");
  const double elastic_fraction = flags["elastic-fraction"].as<double>();
  if (!(elastic_fraction >= 0 && elastic_fraction <= 1))
    aryl::UsageError(kProgram, "--elastic-fraction: must be in [0,1]");
  const auto elastic_range = OrUsage(aryl::sim::ParseElasticRange(flags["elastic-range"].as<std::string>()));
  const double load = flags["load"].as<double>();
  if (!(load > 0)) aryl::UsageError(kProgram, "--load: must be > 0");
  std::pair<double, double> window{0, std::numeric_limits<double>::infinity()};
  if (flags.count("window")) window = OrUsage(aryl::sim::ParseWindow(flags["window"].as<std::string>()));
  const std::string training_type = config.training.groups.front().gpu_type;
  config.scheduler.quota_min_runtime = flags["quota-min-runtime"].as<double>();
  config.scheduler.quota_reclaim_deadline = flags["quota-reclaim-deadline"].as<double>();
  if (!(config.scheduler.quota_min_runtime >= 0)) aryl::UsageError(kProgram, "--quota-min-runtime: must be >= 0");
  if (!(config.scheduler.quota_reclaim_deadline >= 0))
    aryl::UsageError(kProgram, "--quota-reclaim-deadline: must be >= 0");
  std::shared_ptr<aryl::sched::QueueConfig> queues;
  if (flags.count("queues")) {
    aryl::sched::QueueCluster cluster;
    cluster.training_gpus[training_type] = config.training.Gpus();
    cluster.default_type = training_type;
    auto parsed = aryl::sched::ReadQueuesFile(flags["queues"].as<std::string>(), cluster);
    if (!parsed.ok()) aryl::UsageError(kProgram, "--queues: " + parsed.status().message());
    queues = std::make_shared<aryl::sched::QueueConfig>(std::move(*parsed));
  }
  for (const std::string& p : policies) {
    std::string base = p.substr(0, p.find(':'));
    auto names = aryl::sched::PolicyNames();
    if (std::find(names.begin(), names.end(), base) == names.end()) {
      std::string known;
      for (const auto& n : names) {
        if (!known.empty()) known += ", ";
        known += n;
      }
      aryl::UsageError(kProgram, "--policy: unknown policy '" + p + "' (known: " + known + ")");
    }
  }

  // The training type needs throughput tables of its own (the other types are
  // scaled by --relative-speed): a type without any is a bad --training value.
  const std::string throughput_dir = flags["throughput"].as<std::string>();
  if (std::filesystem::is_directory(throughput_dir)) {
    const auto types = TableTypes(throughput_dir);
    if (std::find(types.begin(), types.end(), training_type) == types.end())
      aryl::FlagError(kProgram, "--training", flags["training"].as<std::string>(),
                      "no throughput tables for GPU type '" + training_type + "' under " + throughput_dir +
                          " (known: " + (types.empty() ? std::string("none") : JoinComma(types)) + ")");
  }
  // The demand generators are flag values (a bad one exits 2); a FILE's
  // contents are input data (exit 1), read below.
  const std::string demand_spec = flags["inference-demand"].as<std::string>();
  const bool demand_is_file = !(demand_spec.empty() || demand_spec == "none" || demand_spec.rfind("daily", 0) == 0 ||
                                demand_spec.rfind("constant:", 0) == 0);
  if (demand_is_file && !std::filesystem::is_regular_file(demand_spec))
    aryl::FlagError(kProgram, "--inference-demand", demand_spec,
                    "no such file, and not daily:KEY=V,..., constant:F or none");
  if (!demand_is_file)
    (void)OrUsage(aryl::sim::ParseDemand(demand_spec, config.inference.Servers(), seed));
  for (const char* flag : {"json", "timeline", "jobs-csv"})
    if (flags.count(flag)) RequireWritableFile(std::string("--") + flag, flags[flag].as<std::string>());
  if (flags.count("plot")) RequireWritableDir("--plot", flags["plot"].as<std::string>());

  // Inputs.
  auto trace = aryl::sim::ReadTraces(trace_paths, {.skip_bad_rows = flags["skip-bad-rows"].as<bool>()});
  if (!trace.ok()) Fail(trace.status());
  for (const auto& bad : trace->skipped) std::cerr << kProgram << ": skipped " << bad.where << ": " << bad.reason << "\n";
  aryl::sim::ApplyWindow(*trace, window.first, window.second);
  if (auto s = aryl::sim::ApplyLoad(*trace, load); !s.ok()) Fail(s);
  if (trace->jobs.empty()) Fail(aryl::Status::InvalidArgument("no jobs left after --window"));

  aryl::sim::CatalogOptions catalog_options;
  catalog_options.reference_type = training_type;
  catalog_options.relative_speed = flags["relative-speed"].as<double>();
  for (const auto& g : config.inference.groups) catalog_options.other_types.push_back(g.gpu_type);
  {
    const std::string row = flags["throughput-row"].as<std::string>();
    if (row == "usual") {
      catalog_options.batch_size = aryl::sim::kUsualBatch;
    } else if (row == "first") {
      catalog_options.batch_size = 0;
    } else if (row == "largest") {
      catalog_options.batch_size = aryl::sched::ThroughputCsvOptions::kLargestBatch;
    } else {
      char* end = nullptr;
      const long n = std::strtol(row.c_str(), &end, 10);
      if (row.empty() || *end != '\0' || n <= 0)
        aryl::UsageError(kProgram, "--throughput-row: '" + row + "' (usual, first, largest or a global batch size)");
      catalog_options.batch_size = static_cast<int>(n);
    }
  }
  auto catalog = aryl::sim::LoadCatalog(flags["throughput"].as<std::string>(), catalog_options);
  if (!catalog.ok()) Fail(catalog.status());

  aryl::sim::WorkloadOptions workload;
  workload.reference_type = training_type;
  workload.elastic_fraction = elastic_fraction;
  workload.elastic_lo = elastic_range.first;
  workload.elastic_hi = elastic_range.second;
  workload.seed = seed;
  auto jobs = aryl::sim::BuildJobs(*trace, **catalog, workload);
  if (!jobs.ok()) Fail(jobs.status());
  if (queues) {
    if (auto s = aryl::sim::AssignQueues(*jobs, *queues, training_type, config.training.Gpus()); !s.ok())
      aryl::UsageError(kProgram, "--queues: " + flags["queues"].as<std::string>() + ": " + s.message());
    config.scheduler.queues = queues;
  }
  int elastic_jobs = 0;
  for (const auto& j : *jobs) elastic_jobs += j.kind == aryl::sched::JobKind::kElastic;

  auto demand = aryl::sim::ParseDemand(flags["inference-demand"].as<std::string>(), config.inference.Servers(), seed);
  if (!demand.ok()) Fail(demand.status());

  std::printf("aryl-sim: %zu jobs (%d elastic, %zu bad rows skipped) from %zu trace file(s); training %s, "
              "inference %s, demand %s\n\n",
              jobs->size(), elastic_jobs, trace->skipped.size(), trace_paths.size(),
              config.training.ToString().c_str(), config.inference.ToString().c_str(), demand->Describe().c_str());
  std::fflush(stdout);

  aryl::sim::Simulator sim(config, std::move(*jobs), std::move(*demand), std::move(*catalog));
  std::vector<aryl::sim::RunResult> results;
  std::vector<aryl::sim::RunMetrics> metrics;
  for (const std::string& policy : policies) {
    auto r = sim.Run(policy);
    if (!r.ok()) Fail(r.status().WithContext("policy " + policy));
    metrics.push_back(r->metrics);
    results.push_back(std::move(*r));
  }
  std::cout << aryl::sim::FormatTable(metrics) << std::flush;
  if (queues) std::cout << "\n" << aryl::sim::FormatQueueTable(metrics) << std::flush;

  if (flags.count("json")) {
    nlohmann::ordered_json cfg;
    cfg["traces"] = trace_paths;
    cfg["jobs"] = sim.jobs().size();
    cfg["elastic_jobs"] = elastic_jobs;
    cfg["skipped_rows"] = trace->skipped.size();
    cfg["window"] = {window.first, std::isfinite(window.second) ? nlohmann::ordered_json(window.second)
                                                                : nlohmann::ordered_json(nullptr)};
    cfg["load"] = load;
    cfg["seed"] = seed;
    cfg["training"] = config.training.ToString();
    cfg["inference"] = config.inference.ToString();
    cfg["inference_demand"] = flags["inference-demand"].as<std::string>();
    cfg["reclaim_deadline_s"] = config.reclaim_deadline;
    cfg["elastic_fraction"] = elastic_fraction;
    cfg["elastic_range"] = {elastic_range.first, elastic_range.second};
    cfg["relative_speed"] = catalog_options.relative_speed;
    cfg["throughput_row"] = flags["throughput-row"].as<std::string>();
    cfg["fifo"] = config.scheduler.fifo;
  cfg["min_type_speed"] = config.scheduler.min_type_speed;
  cfg["inelastic_on_loaned"] = config.scheduler.inelastic_on_loaned;
  cfg["hetero_dp"] = config.scheduler.hetero_dp;
    cfg["checkpoint_interval_s"] = config.scheduler.checkpoint_interval;
    cfg["rescale_pause_s"] = config.scheduler.rescale_pause;
    cfg["restart_pause_s"] = config.scheduler.restart_pause;
    cfg["resume_pause_s"] = config.scheduler.resume_pause;
    cfg["resize_horizon_s"] = config.scheduler.resize_horizon;
    cfg["resize_dwell_s"] = config.scheduler.resize_dwell;
    cfg["resize_margin_s"] = config.scheduler.resize_margin;
    cfg["tick_s"] = config.tick;
  cfg["knapsack_exact_budget"] = config.scheduler.knapsack_exact_budget;
    // Only without the oracle, so that oracle runs write what they always did.
    if (config.speed_knowledge != aryl::sim::SpeedKnowledge::kOracle) {
      cfg["speed_knowledge"] = aryl::sim::SpeedKnowledgeName(config.speed_knowledge);
      cfg["speed_noise"] = config.speed_noise;
      cfg["speed_window_s"] = config.speed_window;
    }
    // Only with queues, so that runs without write what they always did.
    if (queues) {
      cfg["queues"] = flags["queues"].as<std::string>();
      cfg["quota_min_runtime_s"] = config.scheduler.quota_min_runtime;
      cfg["quota_reclaim_deadline_s"] = config.scheduler.quota_reclaim_deadline;
    }
    cfg["policies"] = policies;
    if (auto s = aryl::sim::WriteJson(flags["json"].as<std::string>(), cfg, metrics); !s.ok()) Fail(s);
  }
  if (flags.count("jobs-csv")) {
    if (auto s = aryl::sim::WriteJobsCsv(flags["jobs-csv"].as<std::string>(), results); !s.ok()) Fail(s);
  }
  if (flags.count("timeline")) {
    if (auto s = aryl::sim::WriteTimelineCsv(flags["timeline"].as<std::string>(), results); !s.ok()) Fail(s);
  }
  if (flags.count("plot")) {
    if (auto s = aryl::sim::WritePlots(flags["plot"].as<std::string>(), results, config.training.Gpus(),
                                       config.inference.Servers(), config.inference.Gpus());
        !s.ok())
      Fail(s);
  }
  return 0;
}
