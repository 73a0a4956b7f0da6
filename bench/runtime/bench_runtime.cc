// bench_runtime: the runtime's performance harness (one binary, a table per mode).
//
//   bench_runtime resize  [--features 2048 --hidden 4096 --layers 2]   (25M parameters)
//     One run of build/examples/elastic_mlp under a LocalCoordinator:
//       4 workers -> planned shrink to 2 -> planned grow to 4       (in place, aryl)
//       -> stop all, checkpoint, start 2, load -> same to 4         (the torchrun way)
//     Pause of a change = the gap between rank 0's last step before it and the
//     first step after it, minus the median step time at the new size.
//
//   bench_runtime steady  [--workers 2 --steps 30]
//     The same model and data in the same processes, alternating blocks of
//     steps through aryl::Runtime::AllReduceGradients and through a bare c10d
//     ProcessGroupGloo::allreduce_coalesced; reports the median step times.
#include <signal.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "aryl/elastic_sampler.h"
#include "aryl/elastic_state.h"
#include "aryl/flags.h"
#include "aryl/runtime.h"
#include "local_coordinator.h"
#include "mlp.h"

namespace fs = std::filesystem;
using std::chrono::milliseconds;

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double UnixNow() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

void Check(const aryl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench_runtime: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

struct StepLine {
  int64_t step;
  int world;
  double unix_time;
};

std::vector<StepLine> ReadSteps(const std::string& log_dir) {
  std::vector<StepLine> out;
  std::regex re(R"(^step=(\d+) .* world=(\d+) .* unix=([0-9.]+))");
  for (auto& e : fs::directory_iterator(log_dir)) {
    std::ifstream in(e.path());
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
      if (std::regex_search(line, m, re)) out.push_back({std::stoll(m[1]), std::stoi(m[2]), std::stod(m[3])});
    }
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.unix_time < b.unix_time; });
  return out;
}

struct Event {
  std::string name;
  double begin;  // when the change was requested (unix)
  double end;    // when the next phase began (unix)
  int to_world;
};

int Resize(const cxxopts::ParseResult& flags) {
  std::string dir = (fs::temp_directory_path() / ("aryl_bench_rt_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir + "/logs");
  aryl::CoordinatorOptions opt;
  opt.job_id = "bench";
  opt.worker_argv = {flags["example"].as<std::string>(), "--steps", "1000000", "--log-every", "1",
                     "--features", std::to_string(flags["features"].as<int>()), "--hidden",
                     std::to_string(flags["hidden"].as<int>()), "--layers", std::to_string(flags["layers"].as<int>()),
                     "--classes", "10", "--dataset", "1024", "--global-batch",
                     std::to_string(flags["global-batch"].as<int>())};
  opt.log_dir = dir + "/logs";
  opt.checkpoint_dir = dir + "/ckpt";
  opt.timeout = milliseconds(120000);
  opt.env = {{"ARYL_COLLECTIVE_TIMEOUT_MS", "120000"}, {"ARYL_RENDEZVOUS_TIMEOUT_MS", "120000"}};
  auto coord_or = aryl::LocalCoordinator::Start(opt);
  Check(coord_or.status(), "start coordinator");
  auto& c = **coord_or;
  const int per_phase = flags["steps-per-phase"].as<int>();
  auto advance = [&](int steps) {
    Check(c.WaitProgress(std::max<int64_t>(0, c.Progress()) + steps, milliseconds(600000)), "wait progress");
  };
  std::vector<Event> events;
  auto mark_end = [&] {
    if (!events.empty()) events.back().end = UnixNow();
  };
  auto stop_all = [&] {
    Check(c.RequestStop(), "request stop");
    Check(c.WaitAll(milliseconds(300000)), "wait for stop");
    Check(c.ClearStop(), "clear stop");
  };
  std::printf("bench_runtime resize: logs in %s\n", dir.c_str());
  Check(c.Launch(4), "launch");
  advance(per_phase);
  // (a) in place, planned.
  events.push_back({"aryl shrink 4->2", UnixNow(), 0, 2});
  Check(c.Resize(2).status(), "shrink");
  advance(per_phase);
  mark_end();
  events.push_back({"aryl grow 2->4", UnixNow(), 0, 4});
  Check(c.Resize(4).status(), "grow");
  advance(per_phase);
  mark_end();
  // (b) the torchrun way: stop everyone (checkpoint on stop), start, load.
  events.push_back({"torchrun-way 4->2", UnixNow(), 0, 2});
  stop_all();
  Check(c.Launch(2), "relaunch 2");
  advance(per_phase);
  mark_end();
  events.push_back({"torchrun-way 2->4", UnixNow(), 0, 4});
  stop_all();
  Check(c.Launch(4), "relaunch 4");
  advance(per_phase);
  mark_end();
  stop_all();

  auto steps = ReadSteps(dir + "/logs");
  // Median step time per world size over consecutive steps (robust to the
  // few gaps that contain a change).
  std::map<int, std::vector<double>> gaps_by_world;
  for (size_t i = 1; i < steps.size(); ++i) {
    if (steps[i].world == steps[i - 1].world && steps[i].step == steps[i - 1].step + 1) {
      gaps_by_world[steps[i].world].push_back(steps[i].unix_time - steps[i - 1].unix_time);
    }
  }
  // The runtime's own boundary time for the in-place changes (rank 0's report).
  std::vector<double> boundary;
  {
    std::regex re(R"(^aryl: resize .* planned=1 .* total_s=([0-9.]+))");
    std::ifstream in(dir + "/logs/w0.log");
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
      if (std::regex_search(line, m, re)) boundary.push_back(std::stod(m[1]));
    }
  }
  std::printf("\n%-22s %10s %10s %10s %12s\n", "change", "pause_s", "gap_s", "step_s", "boundary_s");
  std::map<std::string, double> pause;
  size_t next_boundary = 0;
  for (auto& e : events) {
    // The gap that ends at rank 0's first step at the new size after the
    // request = pause + one step at the new size.
    double gap = 0;
    for (size_t i = 1; i < steps.size(); ++i) {
      if (steps[i].unix_time > e.begin && steps[i].world == e.to_world && steps[i - 1].world != e.to_world) {
        gap = steps[i].unix_time - steps[i - 1].unix_time;
        break;
      }
    }
    double step_time = Median(gaps_by_world[e.to_world]);
    pause[e.name] = std::max(0.0, gap - step_time);
    std::string b = "-";
    if (e.name.rfind("aryl", 0) == 0 && next_boundary < boundary.size()) {
      b = std::to_string(boundary[next_boundary++]).substr(0, 6);
    }
    std::printf("%-22s %10.3f %10.3f %10.3f %12s\n", e.name.c_str(), pause[e.name], gap, step_time, b.c_str());
  }
  double a = pause["aryl shrink 4->2"] + pause["aryl grow 2->4"];
  double b = pause["torchrun-way 4->2"] + pause["torchrun-way 2->4"];
  std::printf("\nshrink+grow pause: aryl %.3f s, torchrun-way %.3f s, ratio %.1fx\n", a, b, a > 0 ? b / a : 0.0);
  std::printf("step time median: world 2 %.3f s, world 4 %.3f s\n", Median(gaps_by_world[2]),
              Median(gaps_by_world[4]));
  return 0;
}

// ---- steady state ---------------------------------------------------------

using aryl::examples::Mlp;

int SteadyWorker(const cxxopts::ParseResult& flags, int rank, int world, int port) {
  setenv("ARYL_WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("ARYL_RANK", std::to_string(rank).c_str(), 1);
  setenv("ARYL_MASTER_PORT", std::to_string(port).c_str(), 1);
  torch::set_num_threads(1);
  const int64_t features = flags["features"].as<int>(), n = 512;
  torch::manual_seed(1);
  auto x = torch::randn({n, features});
  auto y = torch::randint(0, 10, {n}, torch::kInt64);
  Mlp model(features, flags["hidden"].as<int>(), flags["layers"].as<int>(), 10);
  torch::optim::SGD optimizer(model->parameters(), 0.01);
  aryl::ElasticSampler sampler(n, flags["global-batch"].as<int>(), 1);
  aryl::ElasticState state;
  state.Track(model);
  state.Track(optimizer);
  state.Track(sampler);
  auto rt = aryl::Runtime::FromEnv();
  // The bare baseline: its own store and process group in the same processes.
  c10d::TCPStoreOptions so;
  so.port = uint16_t(port + 1);
  so.isServer = rank == 0;
  so.waitWorkers = false;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  auto pg_opts = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(60000));
  pg_opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, pg_opts);

  const int block = flags["steps"].as<int>();
  std::vector<double> aryl_times, bare_times;
  auto one_step = [&](bool use_runtime) {
    auto t0 = std::chrono::steady_clock::now();
    auto batch = sampler.Local(rank, world);
    auto idx = torch::tensor(batch.indices, torch::kInt64);
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x.index_select(0, idx)), y.index_select(0, idx)).backward();
    if (use_runtime) {
      if (!rt.AllReduceGradients(*model, batch.weight)) std::exit(3);
    } else {
      std::vector<at::Tensor> grads;
      for (auto& p : model->parameters()) grads.push_back(p.grad());
      pg->allreduce_coalesced(grads)->wait();
      for (auto& g : grads) g.mul_(batch.weight);
    }
    optimizer.step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // One Step() to start; each runtime step ends with the Step() that commits it.
  for (int round = 0; round < 3 && (round > 0 || rt.Step(state)); ++round) {
    for (int i = 0; i < block; ++i) {
      double t = one_step(true);
      if (i >= 2) aryl_times.push_back(t);
      if (!rt.Step(state)) return 3;
    }
    for (int i = 0; i < block; ++i) {
      double t = one_step(false);
      if (i >= 2) bare_times.push_back(t);
    }
  }
  if (rank == 0) {
    double a = Median(aryl_times), b = Median(bare_times);
    int64_t params = 0;
    for (auto& p : model->parameters()) params += p.numel();
    std::printf("\n%-10s %8s %12s %14s %14s %10s\n", "workers", "params", "steps/mode", "aryl_step_s", "bare_step_s",
                "overhead");
    std::printf("%-10d %8.1fM %12zu %14.4f %14.4f %9.1f%%\n", world, params / 1e6, aryl_times.size(), a, b,
                100.0 * (a - b) / b);
  }
  std::fflush(stdout);  // the caller leaves with _exit()
  return 0;
}

int Steady(const cxxopts::ParseResult& flags) {
  const int world = flags["workers"].as<int>();
  const int port = 29600 + int(::getpid() % 1000);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(SteadyWorker(flags, r, world, port));
    pids.push_back(pid);
  }
  int worst = 0;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    worst = std::max(worst, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("bench_runtime", "elastic runtime benchmarks: resize | steady");
  options.add_options()("mode", "resize | steady", cxxopts::value<std::string>()->default_value("resize"))(
      "example", "elastic_mlp binary", cxxopts::value<std::string>()->default_value(ARYL_BENCH_EXAMPLE))(
      "features", "input features", cxxopts::value<int>()->default_value("2048"))(
      "hidden", "hidden width", cxxopts::value<int>()->default_value("4096"))(
      "layers", "hidden layers", cxxopts::value<int>()->default_value("2"))(
      "global-batch", "global batch", cxxopts::value<int>()->default_value("32"))(
      "steps-per-phase", "resize: steps between changes", cxxopts::value<int>()->default_value("6"))(
      "workers", "steady: workers", cxxopts::value<int>()->default_value("2"))(
      "steps", "steady: steps per block (3 blocks per mode)", cxxopts::value<int>()->default_value("12"));
  options.parse_positional({"mode"});
  aryl::AddCommonFlags(options);
  auto flags = aryl::ParseFlagsOrExit(options, argc, argv);
  std::string mode = flags["mode"].as<std::string>();
  if (mode == "resize") return Resize(flags);
  if (mode == "steady") return Steady(flags);
  aryl::UsageError("bench_runtime", "unknown mode '" + mode + "' (resize | steady)");
}
