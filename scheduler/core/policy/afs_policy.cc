// afs: Apathetic Future Share (Hwang et al., NSDI'21), AFS-L (job lengths
// known), as implemented here (docs/scheduler.md states the reading): GPUs are
// handed out one size step at a time; each step goes to the job with the
// largest relative throughput gain per GPU divided by its remaining time,
//   ((thr(w') - thr(w)) / thr(w')) / (w' - w) / R(w),
// so a short job wins unless a longer job uses the GPU much more efficiently
// (resource efficiency balanced against short-job priority, with no optimism
// about future shares). Base demands are admitted like Aryl's. Training
// cluster only.
#include <memory>

#include "policies.h"
#include "round_policy.h"

namespace aryl::sched::policy {

std::unique_ptr<Policy> MakeAfs(const SchedulerConfig& c, ReclaimStrategy r) {
  internal::RoundOptions o = OptionsFrom(c);
  o.use_loaned = false;
  o.elastic = true;
  o.extra = internal::ExtraRule::kAfs;
  return std::make_unique<RoundPolicy>("afs", o, r);
}

}  // namespace aryl::sched::policy
