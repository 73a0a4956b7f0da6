// Helpers of the runtime's multi-process tests (elastic_test.cc,
// fault_test.cc): one job's LocalCoordinator, its logs, the fixed-size
// reference run and the checks against it.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "local_coordinator.h"

namespace aryl::testing {

using std::chrono::milliseconds;
namespace fs = std::filesystem;

constexpr int64_t kSteps = 200;
constexpr int64_t kDataset = 200;
constexpr int64_t kGlobalBatch = 24;

struct JobRun {
  std::string dir;
  std::unique_ptr<LocalCoordinator> coord;
};

inline JobRun MakeRun(const std::string& name, int64_t steps, int sleep_ms, std::map<std::string, std::string> env = {},
                      bool checkpoints = false, bool agent = false, const std::string& external_store = "",
                      const std::vector<std::string>& extra_args = {}) {
  JobRun run;
  run.dir = (fs::temp_directory_path() / ("aryl_rt_" + name + "_" + std::to_string(::getpid()))).string();
  if (!checkpoints) fs::remove_all(run.dir);
  fs::create_directories(run.dir + "/samples");
  fs::create_directories(run.dir + "/logs");
  CoordinatorOptions opt;
  opt.job_id = agent ? "77" : name;
  opt.agent = agent;
  opt.worker_argv = {ARYL_RT_TEST_WORKER,   "--steps",   std::to_string(steps), "--sleep-ms",  std::to_string(sleep_ms),
                     "--dataset",           std::to_string(kDataset),           "--global-batch",
                     std::to_string(kGlobalBatch),                              "--out",     run.dir + "/final.pt",
                     "--samples-dir",       run.dir + "/samples"};
  opt.worker_argv.insert(opt.worker_argv.end(), extra_args.begin(), extra_args.end());
  opt.external_store = external_store;
  opt.log_dir = run.dir + "/logs";
  opt.timeout = milliseconds(30000);
  env.emplace("ARYL_FAULT_SETTLE_MS", "1000");
  env.emplace("ARYL_COLLECTIVE_TIMEOUT_MS", "30000");  // workers start slowly on a busy machine
  env.emplace("ARYL_RENDEZVOUS_TIMEOUT_MS", "20000");
  opt.env = env;
  if (checkpoints) opt.checkpoint_dir = run.dir + "/ckpt";
  auto c = LocalCoordinator::Start(opt);
  EXPECT_TRUE(c.ok()) << c.status();
  run.coord = std::move(*c);
  return run;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string Logs(const JobRun& run) {
  std::string all;
  for (auto& e : fs::directory_iterator(run.dir + "/logs")) {
    all += "==== " + e.path().filename().string() + "\n" + ReadAll(e.path().string());
  }
  return all;
}

inline std::vector<torch::Tensor> LoadParams(const JobRun& run) {
  std::vector<torch::Tensor> params;
  torch::load(params, run.dir + "/final.pt");
  return params;
}

// Planned resizes to each of `worlds` in turn while `run` trains: the first
// once `first_at` steps are committed, each next one 5 steps after the last.
// Use as ASSERT_NO_FATAL_FAILURE(ResizeThrough(...)).
inline void ResizeThrough(JobRun& run, std::initializer_list<int> worlds, int64_t first_at, milliseconds wait) {
  int64_t at = first_at;
  for (int world : worlds) {
    ASSERT_TRUE(run.coord->WaitProgress(at, wait).ok()) << Logs(run);
    auto g = run.coord->Resize(world);
    ASSERT_TRUE(g.ok()) << g.status() << "\n" << Logs(run);
    auto members = run.coord->Members();
    ASSERT_TRUE(members.ok());
    EXPECT_EQ(int(members->size()), world);
    at = run.coord->Progress() + 5;
  }
}

// Fixed-size reference: 2 workers, same global batch and data order.
inline const std::vector<torch::Tensor>& Reference() {
  static std::vector<torch::Tensor> params = [] {
    JobRun run = MakeRun("reference", kSteps, 0);
    EXPECT_TRUE(run.coord->Launch(2).ok());
    EXPECT_TRUE(run.coord->WaitAll(milliseconds(60000)).ok()) << Logs(run);
    for (auto& [id, code] : run.coord->exit_codes()) EXPECT_EQ(code, 0) << id << "\n" << Logs(run);
    return LoadParams(run);
  }();
  return params;
}

inline void ExpectSameParams(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, bool* bitwise) {
  ASSERT_EQ(a.size(), b.size());
  *bitwise = true;
  for (size_t i = 0; i < a.size(); ++i) {
    double diff = (a[i] - b[i]).abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-4, 1e-5)) << "param " << i << " max abs diff " << diff;
    if (!torch::equal(a[i], b[i])) *bitwise = false;
  }
}

// Each committed step's samples, from every worker's log: each epoch's samples
// exactly once. With `fault`, a worker's lines may be missing: a SIGKILLed one
// (or a survivor whose part of the all-reduce failed while another's completed)
// never logs a step that the others committed; then every step must still be
// logged by someone and no sample twice in an epoch.
inline void ExpectExactlyOnce(const JobRun& run, bool fault = false) {
  std::map<int64_t, std::multiset<int64_t>> by_epoch;
  std::map<int64_t, int64_t> per_step;
  for (auto& e : fs::directory_iterator(run.dir + "/samples")) {
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      int64_t step, epoch, idx;
      ls >> step >> epoch;
      while (ls >> idx) {
        by_epoch[epoch].insert(idx);
        ++per_step[step];
      }
    }
  }
  ASSERT_FALSE(by_epoch.empty());
  int64_t last_epoch = by_epoch.rbegin()->first;
  for (auto& [epoch, s] : by_epoch) {
    std::set<int64_t> unique(s.begin(), s.end());
    EXPECT_EQ(unique.size(), s.size()) << "epoch " << epoch << " has duplicate samples";
    if (epoch < last_epoch && !fault) {
      EXPECT_EQ(s.size(), size_t(kDataset)) << "epoch " << epoch << " is incomplete";
    }
  }
  EXPECT_EQ(int64_t(per_step.size()), kSteps) << "committed steps logged";
}

}  // namespace aryl::testing
