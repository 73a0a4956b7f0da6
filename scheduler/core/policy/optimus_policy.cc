// optimus (Peng et al., EuroSys'18), as specified for this comparison: base
// demands are admitted like Aryl's; then every free GPU goes, one size step at a
// time, to the job whose completion time drops most per GPU of the step,
// (R(w) - R(w')) / (w' - w), while that gain is positive. No rescale-pause term:
// Optimus re-plans every interval without modelling the pause. Training cluster
// only.
#include <memory>

#include "policies.h"
#include "round_policy.h"

namespace aryl::sched::policy {

std::unique_ptr<Policy> MakeOptimus(const SchedulerConfig& c, ReclaimStrategy r) {
  internal::RoundOptions o = OptionsFrom(c);
  o.use_loaned = false;
  o.elastic = true;
  o.extra = internal::ExtraRule::kOptimus;
  return std::make_unique<RoundPolicy>("optimus", o, r);
}

}  // namespace aryl::sched::policy
