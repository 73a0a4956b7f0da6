// bench_scheduler: the scheduling core at production scale.
//
//   BM_Round/servers/jobs/settled/noqueue: one full aryl round (admission + knapsack +
//     placement) on <servers> 8-GPU servers (a fifth of them loaned) with <jobs>
//     running and <jobs> queued jobs, half of them elastic; settled=1 after one
//     round has been applied; noqueue=1 without the queued jobs (the largest
//     knapsack). The policy is pure, so the same state is scheduled every
//     iteration.
//   BM_Reclaim/loaned/k/servers: the greedy reclaim decision for k of <loaned>
//     loaned servers on <servers> servers, the cluster busy as above (1.6
//     running jobs per server, no queue).
//   BM_Image/servers/running/queued/step: a driver's snapshot of the state
//     (busy as in BM_Round): step=0 the copy of its image
//     (ClusterState::Image), step=1 the state built again from it
//     (ClusterState::FromImage), as the daemon did on its serving thread for
//     every core snapshot; step=2 the copy into the last image's memory
//     (ClusterState::ImageInto) emptied after each (the helper thread's
//     clear, as the daemon did until the image was kept whole); step=3 into
//     the last image kept whole, alternately of two states of the same size
//     whose jobs differ (models, sizes, placements), what the daemon does now
//     (docs/performance.md, issue 39).
//   BM_Knapsack/jobs/capacity: the knapsack dispatcher alone.
//   BM_FitSpeed/configs: one speed-model fit (FitSpeed, speed_model.h) of a job
//     measured at <configs> configurations (1, 2, 4, ... A100s over 8-GPU
//     servers, plus 2 T4s from 3 configurations on), 5% noise, from the
//     optimistic prior; configs=1 is a job seen at its start size only.
//
// Run (from the repository root):
//   build-sched/bench/scheduler/bench_scheduler --benchmark_repetitions=10
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>

#include "aryl/sched/knapsack.h"
#include "aryl/sched/policy.h"
#include "aryl/sched/reclaim.h"
#include "aryl/sched/speed_model.h"
#include "aryl/sched/state.h"
#include "aryl/sched/throughput.h"

namespace aryl::sched {
namespace {

std::shared_ptr<const ThroughputCatalog> Catalog() {
  auto c = std::make_shared<ThroughputCatalog>();
  const std::vector<int> sizes = {1, 2, 4, 8, 16, 32, 64};
  // Shapes of the measured A100 tables (resnet50, vgg16, bert at their first row).
  (void)c->AddTable("resnet50", "A100", {sizes, {6.8, 11.8, 18.3, 21.3, 21.5, 22.7, 21.0}});
  (void)c->AddTable("vgg16", "A100", {sizes, {5.1, 9.0, 14.8, 19.3, 25.9, 30.6, 29.5}});
  (void)c->AddTable("bert", "A100", {sizes, {6.0, 8.6, 10.4, 11.1, 11.0, 10.6, 9.2}});
  (void)c->AddTable("linear", "A100", {sizes, {1, 2, 4, 8, 16, 32, 64}});
  return c;
}

// A busy cluster: `servers` 8-GPU servers, `loaned` of them loaned inference
// servers, `running` jobs placed (base on training, flexible on loaned) and
// `queued` jobs waiting; half of the jobs elastic.
// With `mixed`, every fourth job runs its base workers on loaned servers (so
// that a reclaim must preempt some jobs, not only shrink).
ClusterState BusyCluster(int servers, int loaned, int running, int queued, std::uint64_t seed,
                         bool mixed = false) {
  std::vector<ServerSpec> specs;
  for (int i = 0; i < servers; ++i) {
    ServerSpec s;
    s.id = i;
    s.name = "s";
    s.name += std::to_string(i);
    s.pool = i < servers - loaned ? Pool::kTraining : Pool::kInference;
    s.gpu_type = "A100";
    s.gpus = 8;
    specs.push_back(s);
  }
  auto st = ClusterState::Create(specs, Catalog(), SchedulerConfig{});
  ClusterState state = std::move(st).value();
  for (int i = servers - loaned; i < servers; ++i) (void)state.LoanServer(i);
  std::mt19937_64 rng(seed);
  const char* models[] = {"resnet50", "vgg16", "bert", "linear"};
  const int sizes[] = {1, 1, 2, 2, 4, 4, 8, 1};
  int train_cursor = 0, loan_cursor = servers - loaned;
  std::vector<int> free(servers, 8);
  // First fit from `cursor`; all or nothing.
  auto take = [&](int& cursor, int end, int n, Placement& p) {
    int c = cursor;
    Placement got;
    while (n > 0 && c < end) {
      const int t = std::min(n, free[c]);
      if (t > 0) {
        got[c] += t;
        n -= t;
      }
      if (n > 0 || free[c] == t) ++c;
    }
    if (n > 0) return false;
    for (const auto& [sid, k] : got) {
      free[sid] -= k;
      p[sid] += k;
    }
    while (cursor < end && free[cursor] == 0) ++cursor;
    return true;
  };
  for (int j = 0; j < running + queued; ++j) {
    JobSpec spec;
    spec.id = j + 1;
    spec.model = models[rng() % 4];
    spec.total_work = 1e4 + static_cast<double>(rng() % 10'000'000);
    const int n = sizes[rng() % 8];
    if (j % 2 == 0) {
      spec.kind = JobKind::kInelastic;
      spec.min_workers = spec.max_workers = n;
    } else {
      spec.kind = JobKind::kElastic;
      spec.min_workers = n;
      spec.max_workers = n * (2 + static_cast<int>(rng() % 4));
    }
    (void)state.AddJob(spec);
    if (j >= running) continue;
    Placement p;
    const JobInfo& info = *state.job(spec.id);
    const int base = info.elastic() ? info.base_workers : n;
    const bool on_loaned_first = mixed && j % 4 == 0;
    bool placed = on_loaned_first ? take(loan_cursor, servers, base, p) : false;
    if (!placed) {
      p.clear();
      placed = take(train_cursor, servers - loaned, base, p);
    }
    if (!placed) {
      p.clear();
      placed = take(loan_cursor, servers, base, p);
    }
    if (!placed) continue;  // full: stays queued
    if (info.elastic()) {
      // Some flexible workers, on loaned servers.
      int extra = static_cast<int>(rng() % (spec.max_workers - base + 1));
      while (extra > 0 && !info.Allowed(0, base + extra)) --extra;
      Placement q = p;
      if (extra > 0 && take(loan_cursor, servers, extra, q)) p = q;
    }
    Action a;
    a.type = ActionType::kStart;
    a.job = spec.id;
    a.placement = p;
    (void)state.Apply(a);
  }
  (void)state.AdvanceTo(600);
  return state;
}

// Applies `actions` in passes, each action once it fits (the Scheduler's order);
// returns how many could not be applied.
size_t ApplyAll(ClusterState& state, std::vector<Action> actions) {
  while (!actions.empty()) {
    std::vector<Action> rest;
    for (auto& a : actions) {
      if (!state.Apply(a).ok()) rest.push_back(std::move(a));
    }
    if (rest.size() == actions.size()) break;
    actions = std::move(rest);
  }
  return actions.size();
}

// range(2) == 1: the cluster as left by one round (the steady state a driver
// sees from the second event on); 0: the freshly built, unbalanced cluster.
// range(3) == 1: no queued jobs, so every free GPU goes to the knapsack.
void BM_Round(benchmark::State& bm) {
  const int servers = static_cast<int>(bm.range(0));
  const int jobs = static_cast<int>(bm.range(1));
  const int queued = bm.range(3) == 1 ? 0 : jobs;
  ClusterState state = BusyCluster(servers, servers / 5, jobs, queued, 1);
  auto policy = std::move(MakePolicy("aryl", SchedulerConfig{})).value();
  if (bm.range(2) == 1 && ApplyAll(state, policy->Schedule(state)) != 0) {
    bm.SkipWithError("a round's actions did not apply");
    return;
  }
  if (Status s = state.CheckInvariants(); !s.ok()) {
    bm.SkipWithError(s.ToString().c_str());
    return;
  }
  size_t actions = 0;
  for (auto _ : bm) {
    auto out = policy->Schedule(state);
    actions = out.size();
    benchmark::DoNotOptimize(out);
  }
  bm.counters["running"] = static_cast<double>(state.running().size());
  bm.counters["queued"] = static_cast<double>(state.queued().size());
  bm.counters["actions"] = static_cast<double>(actions);
  bm.counters["gpus"] = state.total_gpus();
  bm.counters["used"] = state.used_gpus();
}
BENCHMARK(BM_Round)
    ->ArgNames({"servers", "jobs", "settled", "noqueue"})
    ->Args({125, 200, 0, 0})
    ->Args({625, 1000, 0, 0})
    ->Args({1250, 2000, 0, 0})
    ->Args({1250, 2000, 1, 0})
    ->Args({1250, 2000, 0, 1})
    // How a round's cost grows with the cluster (issue 39): 25k, 50k and
    // 100,000 GPUs, jobs in proportion.
    ->Args({3125, 5000, 0, 0})
    ->Args({6250, 10000, 0, 0})
    ->Args({12500, 20000, 0, 0})
    ->Args({12500, 20000, 1, 0})
    ->Unit(benchmark::kMillisecond);

void BM_Reclaim(benchmark::State& bm) {
  const int loaned = static_cast<int>(bm.range(0));
  const int k = static_cast<int>(bm.range(1));
  const int servers = static_cast<int>(bm.range(2));
  ClusterState state = BusyCluster(servers, loaned, servers * 8 / 5, 0, 2, /*mixed=*/true);
  if (Status s = state.CheckInvariants(); !s.ok()) {
    bm.SkipWithError(s.ToString().c_str());
    return;
  }
  Reclaim r;
  r.count = k;
  ReclaimCost cost;
  for (auto _ : bm) {
    auto d = DecideReclaim(state, r, ReclaimStrategy::kGreedy, 1);
    cost = d->cost;
    benchmark::DoNotOptimize(d);
  }
  int busy = 0;
  for (ServerId s : state.LoanedServers()) busy += state.server(s)->used > 0;
  bm.counters["busy_loaned"] = busy;
  bm.counters["preemptions"] = cost.preemptions;
}
BENCHMARK(BM_Reclaim)
    ->ArgNames({"loaned", "k", "servers"})
    ->Args({400, 100, 1250})
    ->Args({4000, 1000, 12500})  // 100,000 GPUs, 32,000 of them loaned
    ->Unit(benchmark::kMillisecond);

void BM_Image(benchmark::State& bm) {
  const int servers = static_cast<int>(bm.range(0));
  ClusterState state =
      BusyCluster(servers, servers / 5, static_cast<int>(bm.range(1)), static_cast<int>(bm.range(2)), 4);
  const bool restore = bm.range(3) == 1;
  StateImage reused;
  if (bm.range(3) == 3) {
    ClusterState other =
        BusyCluster(servers, servers / 5, static_cast<int>(bm.range(1)), static_cast<int>(bm.range(2)), 5);
    bool flip = false;
    for (auto _ : bm) {
      (flip ? other : state).ImageInto(reused);
      benchmark::DoNotOptimize(reused);
      flip = !flip;
    }
    bm.counters["jobs"] = static_cast<double>(reused.jobs.size());
    return;
  }
  for (auto _ : bm) {
    if (bm.range(3) == 2) {
      state.ImageInto(reused);
      benchmark::DoNotOptimize(reused);
      bm.PauseTiming();  // emptied by the helper thread
      reused.jobs.clear();
      reused.servers.clear();
      bm.ResumeTiming();
      continue;
    }
    if (!restore) {
      StateImage image = state.Image();
      benchmark::DoNotOptimize(image);
      bm.PauseTiming();  // its destruction is the helper thread's
      image = StateImage();
      bm.ResumeTiming();
      continue;
    }
    bm.PauseTiming();
    StateImage image = state.Image();
    bm.ResumeTiming();
    auto restored = ClusterState::FromImage(std::move(image), Catalog(), SchedulerConfig{});
    if (!restored.ok()) {
      bm.SkipWithError(restored.status().ToString().c_str());
      return;
    }
    bm.PauseTiming();
    restored = Status::Cancelled("");
    bm.ResumeTiming();
  }
  bm.counters["jobs"] = static_cast<double>(state.running().size() + state.queued().size());
}
BENCHMARK(BM_Image)
    ->ArgNames({"servers", "running", "queued", "step"})
    ->Args({5000, 8000, 32000, 0})
    ->Args({5000, 8000, 32000, 1})
    ->Args({5000, 8000, 32000, 2})
    ->Args({5000, 8000, 32000, 3})
    ->Args({12500, 20000, 80000, 0})
    ->Args({12500, 20000, 80000, 1})
    ->Args({12500, 20000, 80000, 2})
    ->Args({12500, 20000, 80000, 3})
    ->Unit(benchmark::kMillisecond);

void BM_Knapsack(benchmark::State& bm) {
  const int n = static_cast<int>(bm.range(0));
  const int capacity = static_cast<int>(bm.range(1));
  std::mt19937_64 rng(3);
  std::vector<KnapsackGroup> groups(n);
  for (auto& g : groups) {
    g.options.push_back({0, 0});
    const int m = 1 + static_cast<int>(rng() % 24);
    const double scale = 100 + static_cast<double>(rng() % 10000);
    for (int k = 1; k <= m; ++k) g.options.push_back({k, scale * k / (k + 4.0) - 30});
  }
  bool exact = false;
  for (auto _ : bm) {
    auto s = SolveKnapsack(groups, capacity, SchedulerConfig{}.knapsack_exact_budget);
    exact = s.exact;
    benchmark::DoNotOptimize(s);
  }
  bm.counters["exact"] = exact;
}
BENCHMARK(BM_Knapsack)->ArgNames({"jobs", "capacity"})->Args({100, 400})->Args({1000, 1000})->Args({1000, 5000})
    ->Unit(benchmark::kMillisecond);

void BM_FitSpeed(benchmark::State& bm) {
  const int configs = static_cast<int>(bm.range(0));
  SpeedParams truth;
  truth.alpha_c = 0.02;
  truth.beta_c = 0.004;
  truth.alpha_r = 0.05;
  truth.beta_r = 0.004;
  truth.alpha_n = 0.15;
  truth.beta_n = 0.01;
  truth.gamma = 2;
  truth.type_speed["T4"] = 0.3;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0, 0.05);
  std::vector<StepSample> samples;
  for (int i = 0; i < configs; ++i) {
    StepSample s;
    const bool t4 = i >= 2 && i == configs - 1;
    s.gpu_type = t4 ? "T4" : "A100";
    s.workers = t4 ? 2 : 1 << i;
    s.nodes = (s.workers + 7) / 8;
    s.local_batch = 256.0 / s.workers;
    s.step_time = truth.StepTime(s.gpu_type, s.workers, s.nodes, s.local_batch) * std::exp(noise(rng));
    s.spread = 0.05 * s.step_time;
    samples.push_back(s);
  }
  const SpeedPrior prior{OptimisticParams(), 10.0, 10.0};
  int evaluations = 0;
  for (auto _ : bm) {
    Result<SpeedFit> fit = FitSpeed(samples, prior, "A100");
    evaluations = fit.ok() ? fit->evaluations : -1;
    benchmark::DoNotOptimize(fit);
  }
  bm.counters["evaluations"] = evaluations;
}
BENCHMARK(BM_FitSpeed)->ArgName("configs")->Arg(1)->Arg(4)->Arg(8)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace aryl::sched

BENCHMARK_MAIN();
