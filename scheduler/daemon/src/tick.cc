#include "daemon_impl.h"

namespace aryl::daemon {

// Every 50 ms on the server thread, in this order: failed agents first (their
// workers are gone), then the jobs that lost workers converge, then reclaims
// and the inference demand, then the speed fits finished on the fitting thread
// (each marks a round due), then one scheduling round for every event applied
// since the last, then the published status.
void Daemon::Impl::Tick() {
  double now = WallNow();
  if (leadership) {
    metrics.Set("aryl_leader", "", leadership->CanDecide() ? 1 : 0);
    metrics.Set("aryl_leader_term", "", static_cast<double>(leadership->term()));
    if (std::uint64_t changes = leadership->leader_changes(); changes > leader_changes_counted) {
      metrics.Inc("aryl_leader_changes_total", "", static_cast<double>(changes - leader_changes_counted));
      leader_changes_counted = changes;
    }
    metrics.Set("aryl_etcd_round_trip_seconds", "", leadership->etcd_round_trip_seconds());
  }
  if (Frozen()) {
    if (!was_frozen) spdlog::error("not deciding: {}", leadership->Why());
    was_frozen = true;
    // Agents' last heartbeats are not judged while frozen: a thaw gives each
    // one agent timeout from now.
    return;
  }
  if (was_frozen) {
    was_frozen = false;
    spdlog::info("deciding again (term {})", leadership->term());
    for (auto& [id, n] : nodes)
      if (n.connected) Heard(n);
  }
  // Frames the transport refused (undecodable, bad envelope) are bad requests too.
  std::uint64_t rejected = port->rejected();
  if (rejected > rejected_counted) metrics.Inc("aryl_bad_requests_total", "", double(rejected - rejected_counted));
  rejected_counted = rejected;
  LivenessTick(now);
  ConvergeTick(now);
  ReclaimTick(now);
  ServingTick(now);
  DemandTick(now);
  LogRelayTick(now);
  SpeedFitTick();
  RoundTick();
  PollSnapshot();
  // The status snapshot: within 0.1 s of a change, every 0.5 s otherwise, and
  // never more than 5% of this thread's time however many jobs it lists.
  double every = std::max(snapshot_dirty ? 0.1 : 0.5, 20 * publish_seconds);
  if (now - last_tick > every) {
    last_tick = now;
    PublishSnapshot();
  }
}

}  // namespace aryl::daemon
