// baseline: the training cluster only, no loaning, no elasticity (every job at
// its requested size), SJF or FIFO admission with backfill, never preempts.
#include <memory>

#include "policies.h"
#include "round_policy.h"

namespace aryl::sched::policy {

std::unique_ptr<Policy> MakeBaseline(const SchedulerConfig& c, ReclaimStrategy r) {
  internal::RoundOptions o = OptionsFrom(c);
  o.use_loaned = false;
  o.elastic = false;
  return std::make_unique<RoundPolicy>("baseline", o, r);
}

}  // namespace aryl::sched::policy
