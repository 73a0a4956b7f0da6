// The flags that describe a job, shared by `aryl submit` and `aryl-run`.
#pragma once

#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "aryl/flags.h"
#include "aryl/protocol/messages.h"

namespace aryl::cli {

inline void AddJobFlags(cxxopts::Options& o) {
  o.add_options()
      ("name", "Job name", cxxopts::value<std::string>()->default_value(""))
      ("workers", "Fixed size (inelastic)", cxxopts::value<int>())
      ("min", "Elastic: fewest workers", cxxopts::value<int>())
      ("max", "Elastic: most workers", cxxopts::value<int>())
      ("gpu-type", "GPU type (default: any)", cxxopts::value<std::string>()->default_value(""))
      ("checkpoint-dir", "Checkpoint directory", cxxopts::value<std::string>()->default_value(""))
      ("model", "Throughput-table model name", cxxopts::value<std::string>()->default_value(""))
      ("steps", "Total steps, for shortest-job-first (0: unknown)", cxxopts::value<double>()->default_value("0"))
      ("env", "KEY=VALUE for the workers (repeatable)", cxxopts::value<std::vector<std::string>>());
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
  if (r.count("env")) {
    for (const auto& kv : r["env"].as<std::vector<std::string>>()) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) FlagError(prog, "--env", kv, "expected KEY=VALUE");
      m.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  for (const auto& a : r.unmatched()) m.argv.push_back(a);
}

}  // namespace aryl::cli
