// tiresias: discretized two-dimensional least-attained-service (2D-LAS, Gu et
// al., NSDI'19). Non-elastic (every job at its requested size) and preemptive,
// on the training cluster only.
//   1. A job's attained service is GPUs x time it has run (GPU-seconds). The
//      thresholds in SchedulerConfig::tiresias_thresholds split jobs into
//      priority queues: queue 0 below the first threshold, and so on.
//   2. Within a queue, jobs are served first-come first-served (submit time), so
//      priorities change only when a job crosses a threshold.
//   3. Starvation: a queued job that has waited longer than tiresias_starve_factor
//      times the time it has run is promoted to queue 0; its attained service
//      then counts from the promotion.
//   4. Each round walks jobs in priority order. Running jobs keep their GPUs; a
//      queued job is placed (best fit) on free GPUs, and when it does not fit,
//      running jobs of lower priority are preempted, lowest first, until it
//      does (none are preempted when even that would not make it fit).
#include <algorithm>
#include <memory>
#include <tuple>
#include <unordered_map>

#include "../src/round.h"
#include "aryl/sched/state.h"
#include "policies.h"

namespace aryl::sched::policy {
namespace {

class TiresiasPolicy : public Policy {
 public:
  TiresiasPolicy(const SchedulerConfig& c, ReclaimStrategy r) : config_(c), reclaim_(r) {}
  const std::string& name() const override { return name_; }
  bool uses_loaned_servers() const override { return false; }
  ReclaimStrategy reclaim_strategy() const override { return reclaim_; }

  // A starved job is promoted to queue 0 and its attained service counts
  // afresh from the promotion (so that it does not fall back at once when it
  // starts); the promotion point is the policy's only memory.
  int Queue(const ClusterState& state, const JobInfo& j) {
    if (j.status == JobStatus::kQueued && j.stats.run_time > 0 &&
        state.now() - j.queued_since >= config_.tiresias_starve_factor * j.stats.run_time) {
      promoted_at_[j.spec.id] = j.stats.gpu_seconds;
    }
    double service = j.stats.gpu_seconds;
    if (auto it = promoted_at_.find(j.spec.id); it != promoted_at_.end()) service -= it->second;
    int q = 0;
    for (double t : config_.tiresias_thresholds) q += service >= t ? 1 : 0;
    return q;
  }

  std::vector<Action> Schedule(const ClusterState& state) override {
    const auto& servers = state.servers();
    struct Entry {
      int queue;
      Seconds submit;
      JobId id;
    };
    std::vector<Entry> order;
    for (const auto* set : {&state.running(), &state.queued()}) {
      for (JobId id : *set) {
        const JobInfo& j = *state.job(id);
        order.push_back({Queue(state, j), j.spec.submit_time, id});
      }
    }
    std::sort(order.begin(), order.end(), [](const Entry& a, const Entry& b) {
      return std::tie(a.queue, a.submit, a.id) < std::tie(b.queue, b.submit, b.id);
    });
    std::vector<bool> enabled(servers.size());
    std::vector<int> avail(servers.size());
    for (size_t i = 0; i < servers.size(); ++i) {
      enabled[i] = internal::Usable(servers[i], false);
      avail[i] = enabled[i] ? servers[i].spec.gpus : 0;
    }
    // Running jobs keep their GPUs unless a queued job of higher priority needs
    // them.
    for (JobId id : state.running()) {
      for (const auto& [sid, n] : state.job(id)->placement) avail[state.server_index(sid)] -= n;
    }
    internal::FreeIndex index(state, avail, enabled);
    auto place = [&](const JobInfo& j) {
      std::vector<int> types;
      for (int t = 0; t < state.num_types(); ++t) {
        if (j.Allowed(t, j.requested_workers)) types.push_back(t);
      }
      std::stable_sort(types.begin(), types.end(), [&](int a, int b) {
        return j.Thr(a, j.requested_workers) > j.Thr(b, j.requested_workers);
      });
      for (int t : types) {
        Placement p = index.Find(t, true, false, j.requested_workers, false);
        if (!p.empty()) return p;
      }
      return Placement{};
    };
    auto give_back = [&](const JobInfo& j, int sign) {
      for (const auto& [sid, n] : j.placement) {
        const int i = state.server_index(sid);
        index.Set(i, index.avail(i) + sign * n);
      }
    };
    std::vector<bool> preempted(order.size(), false);
    std::vector<Action> actions;
    std::vector<Action> starts;
    for (size_t rank = 0; rank < order.size(); ++rank) {
      const JobInfo& j = *state.job(order[rank].id);
      // A job preempted earlier in this walk competes again at its own rank
      // (it restarts elsewhere when it fits: a migration).
      if (j.status != JobStatus::kQueued && !preempted[rank]) continue;
      Placement p = place(j);
      // Release running jobs of lower priority, lowest first, until the job
      // fits; if it never does, nobody is preempted for it.
      std::vector<size_t> released;
      for (size_t v = order.size(); p.empty() && v-- > rank + 1;) {
        const JobInfo& victim = *state.job(order[v].id);
        if (victim.status != JobStatus::kRunning || preempted[v]) continue;
        give_back(victim, +1);
        released.push_back(v);
        p = place(j);
      }
      if (p.empty()) {
        for (size_t v : released) give_back(*state.job(order[v].id), -1);
        continue;
      }
      for (const auto& [sid, n] : p) index.Take(state.server_index(sid), n);
      // Victims the placement did not need keep running (highest priority first).
      std::sort(released.begin(), released.end());
      for (size_t v : released) {
        const JobInfo& victim = *state.job(order[v].id);
        bool fits = true;
        for (const auto& [sid, n] : victim.placement) {
          fits = fits && index.avail(state.server_index(sid)) >= n;
        }
        if (fits) {
          give_back(victim, -1);
          continue;
        }
        preempted[v] = true;
        Action a;
        a.type = ActionType::kPreempt;
        a.job = victim.spec.id;
        a.reason = "tiresias: preempt (lower 2D-LAS priority, queue " +
                   std::to_string(order[v].queue) + ")";
        actions.push_back(std::move(a));
      }
      Action a;
      a.type = ActionType::kStart;
      a.job = j.spec.id;
      a.placement = std::move(p);
      a.reason = "tiresias: admit (2D-LAS queue " + std::to_string(order[rank].queue) + ")";
      starts.push_back(std::move(a));
    }
    actions.insert(actions.end(), starts.begin(), starts.end());
    return actions;
  }

 private:
  std::string name_ = "tiresias";
  std::unordered_map<JobId, double> promoted_at_;  // job -> attained service at promotion
  SchedulerConfig config_;
  ReclaimStrategy reclaim_;
};

}  // namespace

std::unique_ptr<Policy> MakeTiresias(const SchedulerConfig& c, ReclaimStrategy r) {
  return std::make_unique<TiresiasPolicy>(c, r);
}

}  // namespace aryl::sched::policy
