// bench_liveness: the scheduler's liveness bookkeeping per 50 ms tick
// (NodeRegistry::Heard, Watch and LostNodes, node_registry.h) at 1,000 to
// 100,000 agents. Each tick hears the agents whose 2 s heartbeat falls in it
// (1/40 of them), advances the watch clock and asks for the lost nodes, with
// 1% of the nodes disconnected (failed earlier, not back), as the daemon's
// LivenessTick does. Nothing times out: the cost is what a healthy cluster
// pays every tick. BM_LivenessTick times all of it (the heartbeats grow with
// the cluster by nature: nodes/40 a tick); BM_LivenessPass only the tick's
// own pass (Watch and LostNodes), the heartbeats untimed.
//
//   build/bench/daemon/bench_liveness
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "node_registry.h"

namespace {

using aryl::daemon::LiveNode;
using aryl::daemon::NodeRegistry;

constexpr double kTick = 0.05, kHeartbeat = 2.0, kTimeout = 10.0;
constexpr int kTicksPerBeat = static_cast<int>(kHeartbeat / kTick);

// `nodes` agents, 1 in 100 disconnected, every one heard at wall 1000.
struct Cluster {
  NodeRegistry r;
  std::vector<LiveNode*> by_index;
  double wall = 1000;
  std::int64_t tick = 0;

  explicit Cluster(int nodes) {
    for (int i = 0; i < nodes; ++i) {
      std::string id = "node-" + std::to_string(i);
      LiveNode& n = r.nodes()[id];
      n.id = id;
      r.AssignServer(n);
      r.SetConnected(n, i % 100 != 0);
      by_index.push_back(&n);
    }
    r.Watch(wall, true);
    for (LiveNode* n : by_index) r.Heard(*n, wall);
  }
  void Heartbeats() {
    for (std::size_t i = tick % kTicksPerBeat; i < by_index.size(); i += kTicksPerBeat)
      if (by_index[i]->connected) r.Heard(*by_index[i], wall);
  }
  std::size_t Pass() {
    r.Watch(wall, true);
    return r.LostNodes(kTimeout, [](const LiveNode&) { return false; }).size();
  }
};

void BM_LivenessTick(benchmark::State& state) {
  Cluster c(static_cast<int>(state.range(0)));
  std::size_t lost = 0;
  for (auto _ : state) {
    c.wall += kTick;
    c.Heartbeats();
    lost += c.Pass();
    ++c.tick;
  }
  if (lost != 0) state.SkipWithError("a healthy node was declared lost");
  state.counters["heartbeats_per_tick"] = static_cast<double>(c.by_index.size()) / kTicksPerBeat;
}
BENCHMARK(BM_LivenessTick)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMicrosecond);

void BM_LivenessPass(benchmark::State& state) {
  Cluster c(static_cast<int>(state.range(0)));
  std::size_t lost = 0;
  for (auto _ : state) {
    state.PauseTiming();
    c.wall += kTick;
    c.Heartbeats();
    ++c.tick;
    state.ResumeTiming();
    lost += c.Pass();
  }
  if (lost != 0) state.SkipWithError("a healthy node was declared lost");
}
BENCHMARK(BM_LivenessPass)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
