// What each queue (team) holds now, as the quota rules count it (queues.h,
// rule 1): for `aryl queues`, the scheduler's per-queue metrics and the
// simulator's tables alike.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "aryl/sched/queues.h"
#include "aryl/sched/state.h"

namespace aryl::sched {

struct QueueUsage {
  std::string queue;
  // Per GPU type that a quota names or a job of the queue holds:
  std::map<std::string, int> quota;     // nominal GPUs on training servers
  std::map<std::string, int> used;      // quota workers on training servers
  std::map<std::string, int> borrowed;  // of `used`, those above the quota
  std::map<std::string, int> lent;      // of its unused quota, what cohort members borrow
  int loaned = 0;   // workers on loaned inference servers (no quota counts them)
  int flexible = 0; // elastic workers above base on training servers (spare capacity)
  int running = 0;  // running jobs
  int pending = 0;  // queued jobs
  double share = 0; // Kueue's weighted share: (borrowed + loaned) / weight
};

// One row per queue of `queues`, in its order. `elastic`: the policy runs
// elastic jobs at base size plus flexible workers (only base workers count
// against quota). Lent capacity is the cohort's borrowed GPUs of a type
// charged to its members' unused quota in queue order, each at most its
// lending limit. Pure; O(running jobs x their servers + queued jobs).
std::vector<QueueUsage> UsageByQueue(const ClusterState& state, const QueueConfig& queues, bool elastic);

}  // namespace aryl::sched
