// tiresias: discretized two-dimensional least-attained-service (2D-LAS, Gu et
// al., NSDI'19). Non-elastic (every job at its requested size) and preemptive,
// on the training cluster only.
//   1. A job's attained service is GPUs x time it has run (GPU-seconds). The
//      thresholds in SchedulerConfig::tiresias_thresholds split jobs into
//      priority queues: queue 0 below the first threshold, and so on.
//   2. Within a queue, jobs are served first-come first-served (submit time), so
//      priorities change only when a job crosses a threshold.
//   3. Starvation: a queued job that has waited longer than tiresias_starve_factor
//      times the time it has run is promoted to queue 0.
//   4. Each round walks jobs in priority order and selects them while the
//      cluster's GPUs last; selected running jobs keep their placement, selected
//      queued jobs are placed (best fit), and running jobs left out are preempted
//      unless their placement still fits what is left.
#include <algorithm>
#include <memory>
#include <tuple>

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

  int Queue(const ClusterState& state, const JobInfo& j) const {
    if (j.status == JobStatus::kQueued && j.stats.run_time > 0 &&
        state.now() - j.queued_since >= config_.tiresias_starve_factor * j.stats.run_time) {
      return 0;
    }
    int q = 0;
    for (double t : config_.tiresias_thresholds) q += j.stats.gpu_seconds >= t ? 1 : 0;
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
    int capacity = 0;
    for (size_t i = 0; i < servers.size(); ++i) {
      enabled[i] = internal::Usable(servers[i], false);
      avail[i] = enabled[i] ? servers[i].spec.gpus : 0;
      capacity += avail[i];
    }
    // Selection by GPU count in priority order.
    std::vector<JobId> selected;
    std::vector<JobId> left_out;
    for (const Entry& e : order) {
      const JobInfo& j = *state.job(e.id);
      const int demand = j.status == JobStatus::kRunning ? j.workers : j.requested_workers;
      if (demand <= capacity) {
        capacity -= demand;
        selected.push_back(e.id);
      } else if (j.status == JobStatus::kRunning) {
        left_out.push_back(e.id);
      }
    }
    // Running jobs keep their GPUs for now; a left-out job gives them up only
    // when a selected queued job cannot be placed otherwise (lowest priority
    // first), so nothing is preempted needlessly.
    for (const auto* ids : {&selected, &left_out}) {
      for (JobId id : *ids) {
        const JobInfo& j = *state.job(id);
        if (j.status != JobStatus::kRunning) continue;
        for (const auto& [sid, n] : j.placement) avail[state.server_index(sid)] -= n;
      }
    }
    internal::FreeIndex index(state, avail, enabled);
    std::vector<Action> actions;
    std::vector<Action> starts;
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
    for (JobId id : selected) {
      const JobInfo& j = *state.job(id);
      if (j.status != JobStatus::kQueued) continue;
      Placement p = place(j);
      while (p.empty() && !left_out.empty()) {
        const JobInfo& victim = *state.job(left_out.back());
        left_out.pop_back();
        for (const auto& [sid, n] : victim.placement) {
          const int i = state.server_index(sid);
          index.Set(i, index.avail(i) + n);
        }
        Action a;
        a.type = ActionType::kPreempt;
        a.job = victim.spec.id;
        a.reason = "tiresias: preempt (lower 2D-LAS priority, queue " +
                   std::to_string(Queue(state, victim)) + ")";
        actions.push_back(std::move(a));
        p = place(j);
      }
      if (p.empty()) continue;
      for (const auto& [sid, n] : p) index.Take(state.server_index(sid), n);
      Action a;
      a.type = ActionType::kStart;
      a.job = id;
      a.placement = std::move(p);
      a.reason = "tiresias: admit (2D-LAS queue " + std::to_string(Queue(state, j)) + ")";
      starts.push_back(std::move(a));
    }
    actions.insert(actions.end(), starts.begin(), starts.end());
    return actions;
  }

 private:
  std::string name_ = "tiresias";
  SchedulerConfig config_;
  ReclaimStrategy reclaim_;
};

}  // namespace

std::unique_ptr<Policy> MakeTiresias(const SchedulerConfig& c, ReclaimStrategy r) {
  return std::make_unique<TiresiasPolicy>(c, r);
}

}  // namespace aryl::sched::policy
