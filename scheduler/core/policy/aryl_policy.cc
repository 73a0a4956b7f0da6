// Aryl: loan idle inference servers, admit base demands SJF with backfill, share
// the rest among elastic jobs by a multiple-choice knapsack, reclaim greedily by
// server preemption cost. loan-only and elastic-only switch one mechanism off.
#include <memory>

#include "policies.h"
#include "round_policy.h"

namespace aryl::sched::policy {

std::unique_ptr<Policy> MakeAryl(const SchedulerConfig& c, ReclaimStrategy r) {
  internal::RoundOptions o = OptionsFrom(c);
  o.type_aware = c.type_aware;
  o.use_loaned = true;
  o.elastic = true;
  o.extra = internal::ExtraRule::kKnapsack;
  o.hetero_dp = c.hetero_dp;
  return std::make_unique<RoundPolicy>("aryl", o, r);
}

// Loaning without elasticity: every job runs at its requested size; jobs may use
// loaned servers, so a reclaim preempts whatever runs there.
std::unique_ptr<Policy> MakeLoanOnly(const SchedulerConfig& c, ReclaimStrategy r) {
  internal::RoundOptions o = OptionsFrom(c);
  o.type_aware = c.type_aware;
  o.use_loaned = true;
  o.elastic = false;
  return std::make_unique<RoundPolicy>("loan-only", o, r);
}

// Elasticity without loaning: the knapsack shares the training cluster only.
std::unique_ptr<Policy> MakeElasticOnly(const SchedulerConfig& c, ReclaimStrategy r) {
  internal::RoundOptions o = OptionsFrom(c);
  o.type_aware = c.type_aware;
  o.use_loaned = false;
  o.elastic = true;
  o.extra = internal::ExtraRule::kKnapsack;
  return std::make_unique<RoundPolicy>("elastic-only", o, r);
}

}  // namespace aryl::sched::policy
