// Internal: the shared machinery of a scheduling round (admission, elastic
// allocation, placement), used by the policies under policy/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "aryl/sched/state.h"
#include "aryl/sched/types.h"

namespace aryl::sched::internal {

// Free GPUs per server, indexed by (GPU type, pool) and by free count, so that
// best-fit and largest-first queries do not scan every server.
class FreeIndex {
 public:
  // `avail[i]` is the free count of servers()[i]; servers with `enabled[i]` false
  // are left out.
  FreeIndex() = default;
  FreeIndex(const ClusterState& state, const std::vector<int>& avail,
            const std::vector<bool>& enabled) {
    Reset(state, avail, enabled);
  }
  // The index of new counts, keeping the buffers' capacity (a round's
  // scratch: no allocation per round).
  void Reset(const ClusterState& state, const std::vector<int>& avail,
             const std::vector<bool>& enabled);
  int avail(int server) const { return avail_[server]; }
  void Set(int server, int value);
  void Take(int server, int n) { Set(server, avail_[server] - n); }
  // Total free GPUs of `type` in the pools (training, loaned) selected.
  int Total(int type, bool training, bool loaned) const;
  // The server of `type` in the selected pools with the smallest free count >= n
  // (best fit), or the one with the largest free count when none has n; -1 when
  // none has any. Ties: lowest index, training before loaned only when
  // `prefer_loaned` is false.
  int Pick(int type, bool training, bool loaned, int n, bool prefer_loaned) const;
  // Best-fit placement of `n` workers on as few servers as possible; empty when
  // the selected pools do not hold n free GPUs of `type`. Does not take them
  // (the index is used as scratch and restored before it returns).
  Placement Find(int type, bool training, bool loaned, int n, bool prefer_loaned);

 private:
  int Group(int type, bool loaned) const { return type * 2 + (loaned ? 1 : 0); }
  int Bucket(int group, int free) const { return group * (max_gpus_ + 1) + free; }
  // The lowest server index in bucket `b`; -1 when it is empty.
  int First(int b) const;
  void Insert(int b, int server);
  void Erase(int b, int server);
  const ClusterState* state_ = nullptr;
  int max_gpus_ = 0;
  int words_ = 0;                 // 64-bit words per bucket bitset
  std::vector<int> avail_;
  std::vector<int> group_of_;     // per server, -1 when disabled
  // Bucket [group][free] -> servers, as a bitset over server indices (the
  // lowest index is the first set bit) with its population.
  std::vector<std::uint64_t> bits_;
  std::vector<int> counts_;
  // Per bucket, a word below which its bitset is all zero: a full cluster's
  // low servers are not scanned again by every query.
  mutable std::vector<int> first_word_;
  std::vector<int> totals_;       // [group]
};

enum class ExtraRule : std::uint8_t {
  kKnapsack,  // Aryl: multiple-choice knapsack over completion-time reduction
  kOptimus,   // largest marginal completion-time gain per GPU first
  kAfs,       // AFS-L reading: relative throughput gain per GPU over remaining time
};

struct RoundOptions {
  bool use_loaned = true;          // place on loaned servers
  bool elastic = true;             // false: every job runs at requested_workers
  ExtraRule extra = ExtraRule::kKnapsack;
  bool fifo = false;
  bool inelastic_on_loaned = true;
  std::int64_t knapsack_budget = 20'000'000;
  double min_type_speed = 0;  // SchedulerConfig::min_type_speed
  // Aryl's heterogeneous-type rules (docs/scheduler.md, "Slow GPU types"): start
  // a queued job on a type slower than its fastest only when its estimated
  // completion there is earlier than waiting for the fast type, and move a job
  // running on a slower type to its fast type (in admission order) when that
  // frees up and the move pays for itself.
  bool type_aware = false;
  // SchedulerConfig::hetero_dp: loaned GPUs the per-type knapsacks leave idle
  // go to elastic jobs of another home type (one guest type per job), which
  // then run at the speed-weighted sum of their workers.
  bool hetero_dp = false;
};

// Where a queued job stands in the round's admission order, and the GPUs it
// asks for (`demand`): its base size under elasticity, its requested size
// otherwise. The key is its submit time (FIFO) or its remaining time at that
// size on its fastest type (SJF); ties go by submit time, then id.
struct AdmissionPlace {
  double key = 0;
  Seconds submit = 0;
  JobId id = 0;
  int demand = 0;
};
inline AdmissionPlace AdmissionOf(const ClusterState& state, const RoundOptions& opt, const JobInfo& j) {
  const int d = opt.elastic && j.elastic() ? j.base_workers : j.requested_workers;
  double best = 0;
  for (int t = 0; t < state.num_types(); ++t) best = std::max(best, j.Thr(t, d));
  return {opt.fifo ? j.spec.submit_time : (best > 0 ? j.remaining_work / best : kNever), j.spec.submit_time,
          j.spec.id, d};
}

// Queued jobs in admission order, kept across rounds so that a round costs
// nothing per queued job it does not try: bucketed by demand (GPUs at the
// size admission tries), each bucket ordered by (key, submit, id), the order
// RunRound admits in. Brought up to date from ClusterState::queue_log(); a
// job that left the queue is dropped when a walk meets it. A key never
// changes while a job stays queued: its remaining work changes only through
// the events the log records. One queue serves one policy and one state.
class AdmissionQueue {
 public:
  struct Entry {
    double key = 0;
    Seconds submit = 0;
    JobId id = 0;
    bool operator<(const Entry& o) const {
      return std::tie(key, submit, id) < std::tie(o.key, o.submit, o.id);
    }
  };
  void Sync(const ClusterState& state, const RoundOptions& opt);
  // Calls `admit(entry, demand)` in admission order for every queued job
  // whose demand is at most `left()` (asked again before each job), until
  // none is left.
  void Walk(const ClusterState& state, const std::function<int()>& left,
            const std::function<void(const Entry&, int)>& admit);

 private:
  void Insert(const ClusterState& state, const RoundOptions& opt, const JobInfo& job);
  std::map<int, std::set<Entry>> buckets_;                  // demand -> entries
  std::unordered_map<JobId, std::pair<int, Entry>> where_;  // job -> (demand, entry)
  std::uint64_t log_id_ = 0;
  size_t cursor_ = 0;  // queue_log() entries already read
};

// The actions of one non-preemptive round: admissions (kStart) in SJF/FIFO
// order with backfill, then the elastic allocation of the GPUs left (kResize)
// under the resize rule (resize_rule.h). With `keep`, admission walks that
// queue instead of ordering the queue anew (the same decisions). `wakeup`,
// when given, is set to when the first dwell that held a job back ends
// (kNever: none), for Policy::next_wakeup.
std::vector<Action> RunRound(const ClusterState& state, const RoundOptions& options,
                             AdmissionQueue* keep = nullptr, Seconds* wakeup = nullptr);

// Whether training may use server `s` under these options.
bool Usable(const ServerInfo& s, bool use_loaned);

}  // namespace aryl::sched::internal
