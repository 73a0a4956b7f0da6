// Internal: a Policy that runs the shared non-preemptive round with fixed
// options (Aryl, its ablations, baseline, Optimus, AFS differ only in those).
#pragma once

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "../src/round.h"
#include "aryl/sched/policy.h"

namespace aryl::sched::policy {

class RoundPolicy : public Policy {
 public:
  RoundPolicy(std::string name, internal::RoundOptions options, ReclaimStrategy reclaim)
      : name_(std::move(name)), options_(options), reclaim_(reclaim) {}
  const std::string& name() const override { return name_; }
  std::vector<Action> Schedule(const ClusterState& state) override {
    return internal::RunRound(state, options_, &queue_, &wakeup_);
  }
  // When the first dwell that held a job back in the last round ends
  // (resize_rule.h): a round then may make the resize it held.
  Seconds next_wakeup() const override { return wakeup_; }
  bool uses_loaned_servers() const override { return options_.use_loaned; }
  ReclaimStrategy reclaim_strategy() const override { return reclaim_; }
  bool elastic() const override { return options_.elastic; }
  // The round's admission order (AdmissionOf).
  std::vector<JobId> QueueOrder(const ClusterState& state) const override {
    std::vector<internal::AdmissionPlace> places;
    places.reserve(state.queued().size());
    for (JobId id : state.queued()) places.push_back(internal::AdmissionOf(state, options_, *state.job(id)));
    // With queues a higher priority class goes first (queues.h, rule 2);
    // without, every job has the same class.
    const bool classes = state.config().queues != nullptr;
    auto cls = [&](const internal::AdmissionPlace& p) { return classes ? -state.job(p.id)->spec.priority : 0; };
    std::sort(places.begin(), places.end(), [&](const auto& a, const auto& b) {
      return std::make_tuple(cls(a), a.key, a.submit, a.id) < std::make_tuple(cls(b), b.key, b.submit, b.id);
    });
    std::vector<JobId> order;
    order.reserve(places.size());
    for (const auto& p : places) order.push_back(p.id);
    return order;
  }

 private:
  std::string name_;
  internal::RoundOptions options_;
  ReclaimStrategy reclaim_;
  internal::AdmissionQueue queue_;
  Seconds wakeup_ = kNever;
};

inline internal::RoundOptions OptionsFrom(const SchedulerConfig& c) {
  internal::RoundOptions o;
  o.fifo = c.fifo;
  o.inelastic_on_loaned = c.inelastic_on_loaned;
  o.knapsack_budget = c.knapsack_exact_budget;
  o.min_type_speed = c.min_type_speed;
  return o;
}

}  // namespace aryl::sched::policy
