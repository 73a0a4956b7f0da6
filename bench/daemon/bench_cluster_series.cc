// bench_cluster_series: the cost of publishing the per-job, per-node and
// per-pool Prometheus series (ClusterSeries::Publish) and of rendering
// /metrics, at cluster sizes of the scale runs (docs/performance.md). Each
// iteration publishes a snapshot where one job has finished and one arrived,
// as in a busy cluster, so both the update in place and the removal paths run.
//
//   build/bench/daemon/bench_cluster_series
#include <benchmark/benchmark.h>

#include "aryl/daemon/cluster_series.h"
#include "aryl/daemon/metrics.h"

namespace {

using aryl::daemon::ClusterSeries;
using aryl::daemon::ClusterSnapshot;
using aryl::daemon::Metrics;

const std::vector<std::string> kStates = {"available", "held", "loaned", "reclaiming",
                                          "failed", "disconnected", "draining", "drained"};

ClusterSnapshot Snapshot(int jobs, int nodes, int first_job) {
  ClusterSnapshot s;
  for (int j = 0; j < jobs; ++j)
    s.jobs.push_back({static_cast<std::uint64_t>(first_job + j), "job-" + std::to_string(first_job + j), 4, 2.5, 0.3, 0, 1});
  for (int n = 0; n < nodes; ++n)
    s.nodes.push_back({"node-" + std::to_string(n), n % 4 ? "training" : "inference", n % 4 ? "available" : "loaned", 8,
                       6, n % 4 == 0});
  for (int r = 0; r < nodes / 100; ++r) s.reclaims.push_back({"node-" + std::to_string(r * 4), "inference", 30});
  return s;
}

void BM_Publish(benchmark::State& state) {
  int jobs = static_cast<int>(state.range(0)), nodes = static_cast<int>(state.range(1));
  Metrics m;
  ClusterSeries series(m, kStates);
  std::vector<ClusterSnapshot> snaps = {Snapshot(jobs, nodes, 0), Snapshot(jobs, nodes, 1)};
  int i = 0;
  for (auto _ : state) series.Publish(snaps[i++ % 2]);
  state.counters["series"] = 0;
  for (const auto& f : ClusterSeries::Families()) state.counters["series"] += static_cast<double>(m.SeriesCount(f));
}
BENCHMARK(BM_Publish)->Args({100, 50})->Args({2000, 1000})->Args({10000, 1000})->Unit(benchmark::kMillisecond);

void BM_Render(benchmark::State& state) {
  int jobs = static_cast<int>(state.range(0)), nodes = static_cast<int>(state.range(1));
  Metrics m;
  ClusterSeries series(m, kStates);
  series.Publish(Snapshot(jobs, nodes, 0));
  std::size_t bytes = 0;
  for (auto _ : state) bytes = m.Render().size();
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Render)->Args({100, 50})->Args({2000, 1000})->Args({10000, 1000})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
