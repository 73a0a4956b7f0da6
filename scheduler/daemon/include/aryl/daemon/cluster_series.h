// ClusterSeries: the per-job, per-node and per-pool Prometheus series of the
// scheduler, made from one snapshot of its state (docs/operations.md lists them).
//
// Every publication makes each family exactly the snapshot's: a finished job's
// or a removed node's series are gone from the next scrape, so the number of
// series follows the live jobs and known nodes, never the history. The series
// of a job or node are held (Metrics::Series) from its first publication to
// its last, so a publication costs a lookup by id per job and node, not one
// per label set and family. Pool
// series exist for both pools from the start, at 0. A node exports one
// aryl_node_state series per state (1 for the one it is in, 0 otherwise), so a
// state change never leaves a stale series behind. Label values are any text
// (prometheus-cpp escapes them).
//
// Thread safety: as Metrics (thread-safe); Publish is called by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "aryl/daemon/metrics.h"

namespace aryl::daemon {

struct JobSeries {
  std::uint64_t id = 0;
  std::string name;
  int workers = 0;                 // staying workers
  double steps_per_second = 0;     // as the job last reported
  double last_resize_pause = 0;    // seconds, as the runtime measured it; 0 before the first
  std::int64_t preemptions = 0;    // since submission
  std::int64_t rescales = 0;
  double measured_steps_per_second = 0;   // 1 / median step time of the newest summary; 0: none
  double predicted_steps_per_second = 0;  // the speed model at the current size
  std::int64_t checkpoint_failures = 0;   // failed checkpoints reported (memory only)
};

struct NodeSeries {
  std::string name;
  std::string pool;   // "training" | "inference"
  std::string state;  // one of the names given to ClusterSeries
  int gpus = 0;
  int busy = 0;       // GPUs held by training workers
  bool loaned = false;
};

struct ReclaimSeries {
  std::string node;
  std::string pool;
  double slack = 0;   // seconds until its deadline (negative: late)
};

// One queue (team) with --queues; GPUs summed over the types of its quota.
struct QueueSeries {
  std::string queue;
  int quota = 0;     // nominal GPUs on training servers
  int used = 0;      // quota workers on training servers
  int borrowed = 0;  // of used, above the quota
  int lent = 0;      // of its unused quota, borrowed by its cohort
  int loaned = 0;    // workers on loaned inference servers
  int running = 0;   // jobs
  int pending = 0;
};

struct ClusterSnapshot {
  std::vector<JobSeries> jobs;  // live jobs only
  std::vector<NodeSeries> nodes;
  std::vector<ReclaimSeries> reclaims;  // pending ones
  std::vector<QueueSeries> queues;      // the queues file's, in its order
};

class ClusterSeries {
 public:
  // Declares the families in `metrics`; `node_states` are every name a node's
  // state can take.
  ClusterSeries(Metrics& metrics, std::vector<std::string> node_states);
  void Publish(const ClusterSnapshot& snapshot);

  // The families this class owns, for tests and docs.
  static const std::vector<std::string>& Families();

 private:
  // The series of one job, node or pending reclaim, in the order of its
  // families; `seen` is the publication that last had it.
  struct Held {
    std::vector<std::pair<const char*, Metrics::Labels>> labels;
    std::vector<Metrics::Series> series;
    std::uint64_t seen = 0;
  };
  using HeldMap = std::map<std::pair<std::string, std::string>, Held>;
  // The entry of `key`, its series made from make_labels() when new; marked seen.
  template <typename MakeLabels>
  Held& HoldFor(HeldMap& held, std::pair<std::string, std::string> key, MakeLabels make_labels);
  void DropUnseen(HeldMap& held);

  Metrics& metrics_;
  std::vector<std::string> node_states_;
  std::uint64_t publication_ = 0;
  HeldMap jobs_, nodes_, reclaims_;  // by (id, name), (node, pool), (node, pool)
};

}  // namespace aryl::daemon
