#include "aryl/daemon/cluster_series.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>

namespace aryl::daemon {

namespace {

using Labels = Metrics::Labels;
using Samples = std::map<Labels, double>;

const char* const kPools[] = {"training", "inference"};

}  // namespace

const std::vector<std::string>& ClusterSeries::Families() {
  static const std::vector<std::string> names = {
      "aryl_job_workers", "aryl_job_steps_per_second", "aryl_job_last_resize_pause_seconds",
      "aryl_job_preemptions_total", "aryl_job_rescales_total", "aryl_job_measured_steps_per_second",
      "aryl_job_predicted_steps_per_second", "aryl_job_checkpoint_failures_total",
      "aryl_node_gpus", "aryl_node_gpus_busy", "aryl_node_gpus_loaned", "aryl_node_state",
      "aryl_reclaim_pending_slack_seconds",
      "aryl_pool_gpus", "aryl_pool_gpus_busy", "aryl_pool_gpus_loaned", "aryl_pool_reclaims_pending",
      "aryl_pool_reclaim_min_slack_seconds",
      "aryl_queue_quota_gpus", "aryl_queue_used_gpus", "aryl_queue_borrowed_gpus", "aryl_queue_lent_gpus",
      "aryl_queue_loaned_gpus", "aryl_queue_running_jobs", "aryl_queue_pending_jobs"};
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
  m.DeclareGauge("aryl_job_measured_steps_per_second",
                 "1 / the median step time of a live job's newest step-time summary (0: not measured yet)", {});
  m.DeclareGauge("aryl_job_predicted_steps_per_second",
                 "Steps per second the scheduler's speed model predicts for a live job at its current size", {});
  m.DeclareCounter("aryl_job_checkpoint_failures_total",
                   "Failed checkpoints of a live job (a full disk, an I/O error) since the scheduler started", {});
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
  m.DeclareGauge("aryl_queue_quota_gpus", "A queue's nominal quota of training GPUs (--queues)", {});
  m.DeclareGauge("aryl_queue_used_gpus", "Training GPUs a queue's jobs hold against its quota (base workers)", {});
  m.DeclareGauge("aryl_queue_borrowed_gpus", "Training GPUs a queue holds above its quota, borrowed from its cohort", {});
  m.DeclareGauge("aryl_queue_lent_gpus", "GPUs of a queue's unused quota that other queues of its cohort hold", {});
  m.DeclareGauge("aryl_queue_loaned_gpus", "Workers of a queue's jobs on loaned inference servers", {});
  m.DeclareGauge("aryl_queue_running_jobs", "Running jobs of a queue", {});
  m.DeclareGauge("aryl_queue_pending_jobs", "Queued jobs of a queue", {});
}

template <typename MakeLabels>
ClusterSeries::Held& ClusterSeries::HoldFor(HeldMap& held, std::pair<std::string, std::string> key,
                                            MakeLabels make_labels) {
  auto it = held.find(key);
  if (it == held.end()) {
    it = held.emplace(std::move(key), Held{}).first;
    it->second.labels = make_labels();
    for (const auto& [family, l] : it->second.labels) it->second.series.push_back(metrics_.Hold(family, l));
  }
  it->second.seen = publication_;
  return it->second;
}

void ClusterSeries::DropUnseen(HeldMap& held) {
  for (auto it = held.begin(); it != held.end();) {
    if (it->second.seen == publication_) {
      ++it;
      continue;
    }
    for (const auto& [family, l] : it->second.labels) metrics_.Drop(family, l);
    it = held.erase(it);
  }
}

void ClusterSeries::Publish(const ClusterSnapshot& s) {
  ++publication_;
  for (const auto& j : s.jobs) {
    std::string id = std::to_string(j.id);
    Held& h = HoldFor(jobs_, {id, j.name}, [&] {
      // "job_id", not "job": Prometheus sets "job" to the scrape job (the
      // scheduler's would become "exported_job" and merge jobs of one name).
      Labels l{{"job_id", id}, {"name", j.name}};
      return std::vector<std::pair<const char*, Labels>>{
          {"aryl_job_workers", l}, {"aryl_job_steps_per_second", l}, {"aryl_job_last_resize_pause_seconds", l},
          {"aryl_job_preemptions_total", l}, {"aryl_job_rescales_total", l},
          {"aryl_job_measured_steps_per_second", l}, {"aryl_job_predicted_steps_per_second", l},
          {"aryl_job_checkpoint_failures_total", l}};
    });
    h.series[0].Set(j.workers);
    h.series[1].Set(j.steps_per_second);
    h.series[2].Set(j.last_resize_pause);
    h.series[3].Set(static_cast<double>(j.preemptions));
    h.series[4].Set(static_cast<double>(j.rescales));
    h.series[5].Set(j.measured_steps_per_second);
    h.series[6].Set(j.predicted_steps_per_second);
    h.series[7].Set(static_cast<double>(j.checkpoint_failures));
  }
  DropUnseen(jobs_);

  struct PoolSums { double gpus = 0, busy = 0, loaned = 0, pending = 0; std::optional<double> min_slack; };
  std::map<std::string, PoolSums> pools;
  for (const char* p : kPools) pools[p];
  for (const auto& n : s.nodes) {
    Held& h = HoldFor(nodes_, {n.name, n.pool}, [&] {
      Labels l{{"node", n.name}, {"pool", n.pool}};
      std::vector<std::pair<const char*, Labels>> labels = {
          {"aryl_node_gpus", l}, {"aryl_node_gpus_busy", l}, {"aryl_node_gpus_loaned", l}};
      for (const auto& st : node_states_) labels.push_back({"aryl_node_state", {{"node", n.name}, {"state", st}}});
      return labels;
    });
    h.series[0].Set(n.gpus);
    h.series[1].Set(n.busy);
    h.series[2].Set(n.loaned ? n.gpus : 0);
    for (std::size_t k = 0; k < node_states_.size(); ++k) h.series[3 + k].Set(node_states_[k] == n.state ? 1 : 0);
    PoolSums& ps = pools[n.pool];
    ps.gpus += n.gpus;
    ps.busy += n.busy;
    ps.loaned += n.loaned ? n.gpus : 0;
  }
  DropUnseen(nodes_);
  for (const auto& r : s.reclaims) {
    Held& h = HoldFor(reclaims_, {r.node, r.pool}, [&] {
      return std::vector<std::pair<const char*, Labels>>{
          {"aryl_reclaim_pending_slack_seconds", {{"node", r.node}, {"pool", r.pool}}}};
    });
    h.series[0].Set(r.slack);
    PoolSums& ps = pools[r.pool];
    ps.pending += 1;
    ps.min_slack = std::min(ps.min_slack.value_or(r.slack), r.slack);
  }
  DropUnseen(reclaims_);
  Samples pool_gpus, pool_busy, pool_loaned, pool_pending, min_slack;
  for (const auto& [pool, ps] : pools) {
    Labels l{{"pool", pool}};
    pool_gpus[l] = ps.gpus;
    pool_busy[l] = ps.busy;
    pool_loaned[l] = ps.loaned;
    pool_pending[l] = ps.pending;
    if (ps.min_slack) min_slack[l] = *ps.min_slack;
  }
  metrics_.Replace("aryl_pool_gpus", pool_gpus);
  metrics_.Replace("aryl_pool_gpus_busy", pool_busy);
  metrics_.Replace("aryl_pool_gpus_loaned", pool_loaned);
  metrics_.Replace("aryl_pool_reclaims_pending", pool_pending);
  metrics_.Replace("aryl_pool_reclaim_min_slack_seconds", min_slack);
  // Queues are the file's few: their series are replaced whole.
  static const char* const kQueueFamilies[] = {"aryl_queue_quota_gpus",   "aryl_queue_used_gpus",
                                               "aryl_queue_borrowed_gpus", "aryl_queue_lent_gpus",
                                               "aryl_queue_loaned_gpus",  "aryl_queue_running_jobs",
                                               "aryl_queue_pending_jobs"};
  Samples per_queue[std::size(kQueueFamilies)];
  for (const auto& q : s.queues) {
    Labels l{{"queue", q.queue}};
    const int values[] = {q.quota, q.used, q.borrowed, q.lent, q.loaned, q.running, q.pending};
    for (std::size_t f = 0; f < std::size(kQueueFamilies); ++f) per_queue[f][l] = values[f];
  }
  for (std::size_t f = 0; f < std::size(kQueueFamilies); ++f) metrics_.Replace(kQueueFamilies[f], per_queue[f]);
}

}  // namespace aryl::daemon
