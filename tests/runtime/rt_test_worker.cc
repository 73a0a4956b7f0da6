// A training worker for the runtime's multi-process tests: a small MLP on a
// deterministic synthetic task, trained through aryl::Runtime. Writes the
// final parameters (rank 0) and each committed step's samples (every rank).
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "aryl/elastic_sampler.h"
#include "aryl/elastic_state.h"
#include "aryl/flags.h"
#include "aryl/runtime.h"

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Net);

int main(int argc, char** argv) {
  cxxopts::Options options("rt_test_worker", "runtime test worker");
  options.add_options()("steps", "steps", cxxopts::value<int64_t>()->default_value("60"))(
      "global-batch", "global batch", cxxopts::value<int64_t>()->default_value("24"))(
      "dataset", "samples", cxxopts::value<int64_t>()->default_value("200"))(
      "optimizer", "sgd|adam", cxxopts::value<std::string>()->default_value("adam"))(
      "sleep-ms", "per-step sleep", cxxopts::value<int>()->default_value("0"))(
      "sleep-us-per-sample", "sleep per sample of the local batch (compute that scales with workers)",
      cxxopts::value<int>()->default_value("0"))(
      "ballast-mb", "an extra, untrained parameter of this size (large all-reduces)",
      cxxopts::value<int>()->default_value("0"))(
      "out", "final parameters file (rank 0)", cxxopts::value<std::string>()->default_value(""))(
      "samples-dir", "per-worker committed samples", cxxopts::value<std::string>()->default_value(""))(
      "exit-rank", "this rank returns 0 from main at --exit-step (an early clean exit)",
      cxxopts::value<int>()->default_value("-1"))(
      "exit-step", "the step of --exit-rank's early exit", cxxopts::value<int64_t>()->default_value("0"));
  auto flags = aryl::ParseFlagsOrExit(options, argc, argv);
  const int64_t steps = flags["steps"].as<int64_t>();
  const int64_t n = flags["dataset"].as<int64_t>();
  torch::set_num_threads(1);

  torch::manual_seed(1234);  // the data is the same on every worker
  auto x = torch::randn({n, 16});
  auto y = torch::argmax(x.narrow(1, 0, 4) + 0.5 * x.narrow(1, 4, 4), 1);
  torch::manual_seed(42);
  Net model;
  if (int mb = flags["ballast-mb"].as<int>(); mb > 0) {
    model->register_parameter("ballast", torch::zeros({int64_t(mb) << 18}));  // 4-byte floats
  }
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (flags["optimizer"].as<std::string>() == "sgd") {
    opt = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  } else {
    opt = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(0.01));
  }
  aryl::ElasticSampler sampler(n, flags["global-batch"].as<int64_t>(), 7);
  int64_t epoch_marker = 0;
  aryl::ElasticState state;
  state.Track(model);
  state.Track(*opt);
  state.Track(sampler);
  state.Track("epoch_marker", &epoch_marker);

  auto rt = aryl::Runtime::FromEnv();
  std::ofstream samples;
  if (auto dir = flags["samples-dir"].as<std::string>(); !dir.empty()) {
    samples.open(dir + "/" + rt.WorkerId() + ".txt", std::ios::app);
  }
  int sleep_ms = flags["sleep-ms"].as<int>();
  const int sleep_us_per_sample = flags["sleep-us-per-sample"].as<int>();
  const int exit_rank = flags["exit-rank"].as<int>();
  const int64_t exit_step = flags["exit-step"].as<int64_t>();
  while (rt.Step(state) && state.step() < steps) {
    if (rt.Rank() == exit_rank && state.step() == exit_step) {
      std::printf("early exit at step=%lld\n", (long long)state.step());
      return 0;  // the Runtime reports "completed" as it goes out of scope
    }
    auto batch = sampler.Local(rt.Rank(), rt.WorldSize());
    auto idx = torch::tensor(batch.indices, torch::kInt64);
    opt->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x.index_select(0, idx)), y.index_select(0, idx));
    loss.backward();
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    if (sleep_us_per_sample > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_per_sample * int64_t(batch.indices.size())));
    rt.ReportLocalBatch(double(batch.indices.size()));
    if (!rt.AllReduceGradients(*model, batch.weight)) continue;
    opt->step();
    epoch_marker = batch.epoch;
    if (samples.is_open()) {
      samples << state.step() << " " << batch.epoch;
      for (auto i : batch.indices) samples << " " << i;
      samples << "\n" << std::flush;
    }
    if (rt.Rank() == 0 && state.step() % 10 == 0) {
      std::printf("step=%lld loss=%.5f world=%d gen=%lld\n", (long long)state.step(), loss.item<double>(),
                  rt.WorldSize(), (long long)rt.Generation());
      std::fflush(stdout);
    }
  }
  if (rt.status().ok() && state.step() >= steps && rt.Rank() == 0) {
    std::printf("done step=%lld world=%d resizes=%zu\n", (long long)state.step(), rt.WorldSize(), rt.Resizes().size());
    if (auto out = flags["out"].as<std::string>(); !out.empty()) {
      std::vector<torch::Tensor> params;
      for (auto& p : model->parameters()) params.push_back(p.detach().clone());
      torch::save(params, out);
    }
  }
  return rt.ExitCode();
}
