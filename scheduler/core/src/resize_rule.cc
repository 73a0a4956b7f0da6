#include "aryl/sched/resize_rule.h"

#include <algorithm>
#include <cmath>

namespace aryl::sched {

Seconds ResizePause(const SchedulerConfig& config, const JobInfo& job) {
  return job.measured_pause >= 0 ? job.measured_pause : config.RescalePause(job.spec);
}

Seconds DwellEnd(const SchedulerConfig& config, const JobInfo& job) {
  return std::isfinite(job.last_resize) ? job.last_resize + config.resize_dwell : -kNever;
}

GrowValue ValueOfGrow(const SchedulerConfig& config, const JobInfo& job, double rate_before,
                      double rate_after) {
  GrowValue v;
  if (!(rate_after > rate_before) || !(job.remaining_work > 0)) return v;  // no gain: never pays
  const double horizon = std::min(config.resize_horizon, job.remaining_work / rate_after);
  if (!(rate_before > 0)) {
    // Stalled now: any progress is a gain, and the pause costs no progress.
    v.gain = rate_after * horizon;
    return v;
  }
  v.gain = (rate_after - rate_before) * horizon;
  v.cost = rate_before * (ResizePause(config, job) + config.resize_margin);
  return v;
}

}  // namespace aryl::sched
