#include "daemon_impl.h"

namespace aryl::daemon {

// Every 50 ms on the server thread, in this order: failed agents first (their
// workers are gone), then the jobs that lost workers converge, then reclaims
// and the inference demand, then the published status.
void Daemon::Impl::Tick() {
  double now = WallNow();
  // Frames the transport refused (undecodable, bad envelope) are bad requests too.
  std::uint64_t rejected = server->stats().rejected;
  if (rejected > rejected_counted) metrics.Inc("aryl_bad_requests_total", "", double(rejected - rejected_counted));
  rejected_counted = rejected;
  LivenessTick(now);
  ConvergeTick(now);
  ReclaimTick(now);
  DemandTick(now);
  if (now - last_tick > 0.5) {
    last_tick = now;
    PublishSnapshot();
  }
}

}  // namespace aryl::daemon
