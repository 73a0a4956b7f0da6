// elastic_mlp: an MLP on a synthetic classification task, trained with
// aryl::Runtime. Runs alone (one process), at a fixed size
// (ARYL_WORLD_SIZE/ARYL_RANK), or elastically under an agent or
// aryl-rt-launch (ARYL_STORE_ENDPOINT ...). Rank 0 prints one progress line
// per --log-every steps (see examples/common.h) and a final "done" line.
//
//   build/examples/elastic_mlp --steps 200
//   build/bin/aryl-rt-launch --workers 2 --schedule 50:4,100:3 -- build/examples/elastic_mlp --steps 300
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "aryl/elastic_sampler.h"
#include "aryl/elastic_state.h"
#include "aryl/flags.h"
#include "aryl/runtime.h"
#include "common.h"
#include "mlp.h"

using aryl::examples::Mlp;

int main(int argc, char** argv) {
  cxxopts::Options options("elastic_mlp", "MLP on synthetic classification, elastic data parallel");
  options.add_options()("steps", "training steps", cxxopts::value<int64_t>()->default_value("300"))(
      "global-batch", "global batch (fixed across world sizes)", cxxopts::value<int64_t>()->default_value("64"))(
      "dataset", "synthetic samples", cxxopts::value<int64_t>()->default_value("8192"))(
      "features", "input features", cxxopts::value<int64_t>()->default_value("32"))(
      "hidden", "hidden width", cxxopts::value<int64_t>()->default_value("128"))(
      "layers", "hidden layers", cxxopts::value<int>()->default_value("2"))(
      "classes", "classes", cxxopts::value<int64_t>()->default_value("8"))(
      "lr", "learning rate (Adam)", cxxopts::value<double>()->default_value("0.003"))(
      "log-every", "print every N steps", cxxopts::value<int64_t>()->default_value("10"))(
      "device", "cpu or cuda (cuda needs a CUDA libtorch; use ARYL_BACKEND=nccl)",
      cxxopts::value<std::string>()->default_value("cpu"))(
      "threads", "intra-op threads per worker", cxxopts::value<int>()->default_value("1"))(
      "seed", "data and init seed", cxxopts::value<uint64_t>()->default_value("1"))(
      "dropout", "dropout after each hidden layer (aryl::SampleDropout)",
      cxxopts::value<double>()->default_value("0"))(
      "out", "rank 0 saves the final parameters here (torch::save)", cxxopts::value<std::string>()->default_value(""))(
      "sleep-ms", "per-step sleep (tests: keeps a run long enough)", cxxopts::value<int>()->default_value("0"));
  aryl::AddCommonFlags(options);
  auto flags = aryl::ParseFlagsOrExit(options, argc, argv);
  const int64_t steps = flags["steps"].as<int64_t>();
  const int64_t n = flags["dataset"].as<int64_t>();
  const int64_t features = flags["features"].as<int64_t>();
  const int64_t classes = flags["classes"].as<int64_t>();
  const uint64_t seed = flags["seed"].as<uint64_t>();
  torch::set_num_threads(flags["threads"].as<int>());

  // A learnable task: labels from a fixed random linear teacher. Same on every worker.
  torch::manual_seed(seed);
  auto x = torch::randn({n, features});
  auto teacher = torch::randn({features, classes});
  auto y = torch::argmax(x.matmul(teacher), 1);

  const torch::Device device(flags["device"].as<std::string>());
  x = x.to(device);
  y = y.to(device);
  Mlp model(features, flags["hidden"].as<int64_t>(), flags["layers"].as<int>(), classes,
            flags["dropout"].as<double>());
  model->to(device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(flags["lr"].as<double>()));
  aryl::ElasticSampler sampler(n, flags["global-batch"].as<int64_t>(), seed);
  aryl::ElasticState state;
  state.Track(model);
  state.Track(optimizer);
  state.Track(sampler);

  auto rt = aryl::Runtime::FromEnv();
  int64_t params = 0;
  for (auto& p : model->parameters()) params += p.numel();
  aryl::examples::ProgressPrinter progress(flags["log-every"].as<int64_t>());
  double last_loss = 0;
  bool announced = false;
  while (rt.Step(state) && state.step() < steps) {
    if (!announced && rt.Rank() == 0) {
      std::printf("start worker=%s params=%lld world=%d gen=%lld step=%lld\n", rt.WorkerId().c_str(),
                  (long long)params, rt.WorldSize(), (long long)rt.Generation(), (long long)state.step());
      std::fflush(stdout);
      announced = true;
    }
    auto batch = sampler.Local(rt.Rank(), rt.WorldSize());
    auto idx = torch::tensor(batch.indices, torch::kInt64).to(device);
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x.index_select(0, idx), batch.random_keys),
                                                     y.index_select(0, idx));
    loss.backward();
    if (int ms = flags["sleep-ms"].as<int>(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    if (!rt.AllReduceGradients(*model, batch.weight)) continue;  // a peer failed: step abandoned
    optimizer.step();
    last_loss = loss.item<double>();
    rt.ReportLoss(last_loss);
    if (rt.Rank() == 0) {
      progress.Step(state.step() + 1, last_loss, rt.WorldSize(), rt.Generation(), batch.global_size);
    }
  }
  if (rt.status().ok() && state.step() >= steps && rt.Rank() == 0) {
    // params: the sum of |w| over every parameter, so a run can be compared with
    // another of the same flags (a lost or repeated batch moves it).
    double params_abs = 0;
    for (auto& p : model->parameters()) params_abs += p.abs().sum().item<double>();
    std::printf("done steps=%lld loss=%.5f world=%d resizes=%zu params=%.9e\n", (long long)state.step(), last_loss,
                rt.WorldSize(), rt.Resizes().size(), params_abs);
    if (auto out = flags["out"].as<std::string>(); !out.empty()) {
      std::vector<torch::Tensor> params;
      for (auto& p : model->parameters()) params.push_back(p.detach().clone().cpu());
      torch::save(params, out);
    }
  }
  return rt.ExitCode();
}
