#include "aryl/daemon/cluster_series.h"

#include <algorithm>
#include <map>

namespace aryl::daemon {

namespace {

using Labels = Metrics::Labels;
using Samples = std::map<Labels, double>;

const char* const kPools[] = {"training", "inference"};

}  // namespace

const std::vector<std::string>& ClusterSeries::Families() {
  static const std::vector<std::string> names = {
      "aryl_job_workers", "aryl_job_steps_per_second", "aryl_job_last_resize_pause_seconds",
      "aryl_job_preemptions_total", "aryl_job_rescales_total",
      "aryl_node_gpus", "aryl_node_gpus_busy", "aryl_node_gpus_loaned", "aryl_node_state",
      "aryl_reclaim_pending_slack_seconds",
      "aryl_pool_gpus", "aryl_pool_gpus_busy", "aryl_pool_gpus_loaned", "aryl_pool_reclaims_pending",
      "aryl_pool_reclaim_min_slack_seconds"};
  return names;
}

ClusterSeries::ClusterSeries(Metrics& metrics, std::vector<std::string> node_states)
    : metrics_(metrics), node_states_(std::move(node_states)) {
  Metrics& m = metrics_;
  m.DeclareGauge("aryl_job_workers", "Workers of a live job (staying ones)", {});
  m.DeclareGauge("aryl_job_steps_per_second", "Training steps per second a live job last reported", {});
  m.DeclareGauge("aryl_job_last_resize_pause_seconds",
                 "Pause of a live job's last resize, as the runtime measured it (0 before the first)", {});
  m.DeclareCounter("aryl_job_preemptions_total", "Preemptions of a live job since it was submitted", {});
  m.DeclareCounter("aryl_job_rescales_total", "Rescales of a live job since it was submitted", {});
  m.DeclareGauge("aryl_node_gpus", "GPUs (slots) of a node", {});
  m.DeclareGauge("aryl_node_gpus_busy", "GPUs of a node held by training workers", {});
  m.DeclareGauge("aryl_node_gpus_loaned", "GPUs of an inference node loaned to training", {});
  m.DeclareGauge("aryl_node_state", "A node's state: 1 for the state it is in, 0 for the others", {});
  m.DeclareGauge("aryl_reclaim_pending_slack_seconds",
                 "A server being reclaimed: seconds left until its deadline (negative: late)", {});
  std::vector<std::string> pools;
  for (const char* p : kPools) pools.push_back(std::string("pool=\"") + p + "\"");
  m.DeclareGauge("aryl_pool_gpus", "GPUs (slots) of a pool's known nodes", pools);
  m.DeclareGauge("aryl_pool_gpus_busy", "GPUs of a pool held by training workers", pools);
  m.DeclareGauge("aryl_pool_gpus_loaned", "GPUs of a pool loaned to training (inference servers)", pools);
  m.DeclareGauge("aryl_pool_reclaims_pending", "Servers of a pool being reclaimed (deadline not yet met)", pools);
  m.DeclareGauge("aryl_pool_reclaim_min_slack_seconds",
                 "Least slack (seconds to the deadline) among a pool's pending reclaims; absent when none", {});
}

void ClusterSeries::Publish(const ClusterSnapshot& s) {
  Samples workers, rate, pause, preempt, rescales;
  for (const auto& j : s.jobs) {
    Labels l{{"job", std::to_string(j.id)}, {"name", j.name}};
    workers[l] = j.workers;
    rate[l] = j.steps_per_second;
    pause[l] = j.last_resize_pause;
    preempt[l] = static_cast<double>(j.preemptions);
    rescales[l] = static_cast<double>(j.rescales);
  }
  metrics_.Replace("aryl_job_workers", workers);
  metrics_.Replace("aryl_job_steps_per_second", rate);
  metrics_.Replace("aryl_job_last_resize_pause_seconds", pause);
  metrics_.Replace("aryl_job_preemptions_total", preempt);
  metrics_.Replace("aryl_job_rescales_total", rescales);

  Samples gpus, busy, loaned, state, pool_gpus, pool_busy, pool_loaned, pool_pending, slack, min_slack;
  for (const char* p : kPools) {
    Labels l{{"pool", p}};
    pool_gpus[l] = pool_busy[l] = pool_loaned[l] = pool_pending[l] = 0;
  }
  for (const auto& n : s.nodes) {
    Labels l{{"node", n.name}, {"pool", n.pool}};
    Labels pl{{"pool", n.pool}};
    gpus[l] = n.gpus;
    busy[l] = n.busy;
    loaned[l] = n.loaned ? n.gpus : 0;
    for (const auto& st : node_states_) state[{{"node", n.name}, {"state", st}}] = st == n.state ? 1 : 0;
    pool_gpus[pl] += n.gpus;
    pool_busy[pl] += n.busy;
    pool_loaned[pl] += n.loaned ? n.gpus : 0;
  }
  for (const auto& r : s.reclaims) {
    Labels pl{{"pool", r.pool}};
    slack[{{"node", r.node}, {"pool", r.pool}}] = r.slack;
    pool_pending[pl] += 1;
    auto [it, fresh] = min_slack.try_emplace(pl, r.slack);
    if (!fresh) it->second = std::min(it->second, r.slack);
  }
  metrics_.Replace("aryl_node_gpus", gpus);
  metrics_.Replace("aryl_node_gpus_busy", busy);
  metrics_.Replace("aryl_node_gpus_loaned", loaned);
  metrics_.Replace("aryl_node_state", state);
  metrics_.Replace("aryl_reclaim_pending_slack_seconds", slack);
  metrics_.Replace("aryl_pool_gpus", pool_gpus);
  metrics_.Replace("aryl_pool_gpus_busy", pool_busy);
  metrics_.Replace("aryl_pool_gpus_loaned", pool_loaned);
  metrics_.Replace("aryl_pool_reclaims_pending", pool_pending);
  metrics_.Replace("aryl_pool_reclaim_min_slack_seconds", min_slack);
}

}  // namespace aryl::daemon
