// The flags that describe a job, shared by `aryl submit` and `aryl-run`.
#pragma once

#include <filesystem>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "aryl/env_file.h"
#include "aryl/flags.h"
#include "aryl/protocol/messages.h"

namespace aryl::cli {

namespace fs = std::filesystem;

inline void AddJobFlags(cxxopts::Options& o) {
  o.add_options()
      ("name", "Job name", cxxopts::value<std::string>()->default_value(""))
      ("workers", "Fixed size (inelastic)", cxxopts::value<int>())
      ("min", "Elastic: fewest workers", cxxopts::value<int>())
      ("max", "Elastic: most workers", cxxopts::value<int>())
      ("gpu-type", "GPU type (default: any)", cxxopts::value<std::string>()->default_value(""))
      ("checkpoint-dir", "Checkpoint directory", cxxopts::value<std::string>()->default_value(""))
      ("model", "Throughput-table model name", cxxopts::value<std::string>()->default_value(""))
      ("steps", "Total steps: the scheduler estimates the finish from the steps left at the measured speed (0: unknown)", cxxopts::value<double>()->default_value("0"))
      ("env", "KEY=VALUE for the workers (repeatable; wins over --env-file)",
       cxxopts::value<std::vector<std::string>>())
      ("env-file", "KEY=VALUE lines for the workers ('#' comments; repeatable)",
       cxxopts::value<std::vector<std::string>>())
      ("cwd", "Workers' working directory (default: this one)", cxxopts::value<std::string>())
      ("elastic", "How the job resizes: inplace (links the runtime) or restart (stop all, start again at the "
       "new size; torchrun style). Default: inplace once the runtime reports, restart until then",
       cxxopts::value<std::string>())
      ("max-restarts", "torchrun --max-restarts: restarts of a failed worker group before the job fails",
       cxxopts::value<int>())
      ("stop-grace", "Seconds the workers get from a stop's notice (SIGTERM and the file $ARYL_STOP_NOTICE names) "
       "to SIGKILL, to checkpoint (default: the scheduler's --stop-grace)", cxxopts::value<double>())
      ("queue", "The team queue the job is charged to (`aryl queues`; default: the default queue)",
       cxxopts::value<std::string>())
      ("priority", "Its priority class in the queue: low, normal or high (default: normal)",
       cxxopts::value<std::string>());
  o.positional_help("-- CMD ARGS...");
}

// Fills `m` from those flags and the command after `--`; a bad value is a
// usage error (exit 2). The caller validates the whole message.
inline void ReadJobFlags(const std::string& prog, const cxxopts::ParseResult& r, protocol::SubmitJob& m) {
  m.name = r["name"].as<std::string>();
  if (r.count("workers")) m.workers = r["workers"].as<int>();
  if (r.count("min")) m.min_workers = r["min"].as<int>();
  if (r.count("max")) m.max_workers = r["max"].as<int>();
  m.gpu_type = r["gpu-type"].as<std::string>();
  m.checkpoint_dir = r["checkpoint-dir"].as<std::string>();
  m.model = r["model"].as<std::string>();
  m.total_work = r["steps"].as<double>();
  RequireAtLeast(prog, "--steps", m.total_work, 0);
  if (r.count("env-file")) {
    for (const auto& path : r["env-file"].as<std::vector<std::string>>()) {
      auto env = ReadEnvFile(path);
      if (!env.ok()) UsageError(prog, env.status().message());
      for (auto& [k, v] : *env) m.env[k] = v;
    }
  }
  std::error_code ec;
  fs::path cwd = r.count("cwd") ? fs::path(r["cwd"].as<std::string>()) : fs::current_path(ec);
  if (!cwd.empty()) m.cwd = fs::absolute(cwd, ec).lexically_normal().string();
  if (r.count("elastic")) {
    m.elastic = r["elastic"].as<std::string>();
    if (*m.elastic != "inplace" && *m.elastic != "restart") FlagError(prog, "--elastic", *m.elastic, "expected inplace or restart");
  }
  if (r.count("max-restarts")) {
    m.max_restarts = r["max-restarts"].as<int>();
    RequireAtLeast(prog, "--max-restarts", double(*m.max_restarts), 0);
  }
  if (r.count("stop-grace")) {
    m.stop_grace = r["stop-grace"].as<double>();
    RequireAtLeast(prog, "--stop-grace", *m.stop_grace, 0);
  }
  if (r.count("queue")) m.queue = r["queue"].as<std::string>();
  if (r.count("priority")) {
    m.priority = r["priority"].as<std::string>();
    if (*m.priority != "low" && *m.priority != "normal" && *m.priority != "high")
      FlagError(prog, "--priority", *m.priority, "expected low, normal or high");
  }
  if (r.count("env")) {
    for (const auto& kv : r["env"].as<std::vector<std::string>>()) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) FlagError(prog, "--env", kv, "expected KEY=VALUE");
      m.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  for (const auto& a : r.unmatched()) m.argv.push_back(a);
}

// Checks a job read by ReadJobFlags as SubmitJob::Validate does, but speaks
// of flags (--min, --max, --workers), not of the message's fields; exits with a
// usage error. `size_flags` names how the size was given, for the messages.
inline void ValidateJobOrExit(const std::string& prog, const protocol::SubmitJob& m,
                              const std::string& size_flags = "--workers N or --min A --max B") {
  if (m.workers && (m.min_workers || m.max_workers))
    UsageError(prog, "give " + size_flags + ", not both a fixed and an elastic size");
  if (!m.workers && !(m.min_workers && m.max_workers)) {
    if (m.min_workers) UsageError(prog, "--min " + std::to_string(*m.min_workers) + " needs --max too");
    if (m.max_workers) UsageError(prog, "--max " + std::to_string(*m.max_workers) + " needs --min too");
    UsageError(prog, "give " + size_flags);
  }
  auto at_least_one = [&](const char* flag, const std::optional<std::int64_t>& v) {
    if (v && *v < 1) FlagError(prog, flag, std::to_string(*v), "must be >= 1");
  };
  at_least_one("--workers", m.workers);
  at_least_one("--min", m.min_workers);
  at_least_one("--max", m.max_workers);
  if (m.min_workers && m.max_workers && *m.min_workers > *m.max_workers)
    UsageError(prog, "--min " + std::to_string(*m.min_workers) + " > --max " + std::to_string(*m.max_workers) +
                         ": the fewest workers must not exceed the most");
  Status v = m.Validate();
  if (v.ok()) return;
  // What is left names a field: say which flag sets it.
  std::string msg = v.message();
  for (const auto& [field, flag] : std::vector<std::pair<std::string, std::string>>{
           {"field 'name': ", "--name: "}, {"field 'env': ", "--env: "}, {"field 'argv[0]': ", "the command: "},
           {"field 'elastic': ", "--elastic: "}, {"field 'gpu_type': ", "--gpu-type: "},
           {"field 'checkpoint_dir': ", "--checkpoint-dir: "}, {"field 'cwd': ", "--cwd: "},
           {"field 'model': ", "--model: "}, {"field 'max_restarts': ", "--max-restarts: "},
           {"field 'stop_grace': ", "--stop-grace: "}}) {
    if (msg.rfind(field, 0) == 0) {
      msg = flag + msg.substr(field.size());
      break;
    }
  }
  UsageError(prog, msg);
}

// A restart-kind elastic job (each resize stops every worker and starts the
// group again at the new size: --elastic restart, or torchrun's --nnodes
// MIN:MAX) without --checkpoint-dir starts again from step 0 at each resize
// unless the script keeps its own checkpoint: the note said at submit, on
// stderr; empty for any other job.
inline std::string NoCheckpointNote(const std::string& prog, const protocol::SubmitJob& m,
                                    protocol::JobId job, bool torchrun_flags) {
  const bool elastic = m.min_workers && m.max_workers && *m.min_workers < *m.max_workers;
  const bool restarts =
      m.elastic == std::optional<std::string>("restart") || (!m.elastic && torchrun_flags);
  if (!elastic || !restarts || !m.checkpoint_dir.empty()) return "";
  return prog + ": note: job " + std::to_string(job) +
         " resizes by restarting all its workers (--elastic restart) and has no --checkpoint-dir: "
         "unless the script saves a checkpoint and resumes from it, every resize starts it again "
         "from step 0\n";
}

}  // namespace aryl::cli
