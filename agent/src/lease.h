// SchedulerLease: how long this agent's workers may keep running without word
// from the scheduler (protocol/messages.h, step 2; docs/architecture.md,
// "Leases and fencing").
//
// The lease is measured on the agent's own monotonic clock from the moment it
// *sent* the newest heartbeat (or registration) the scheduler acknowledged:
// the scheduler received that heartbeat no earlier, so when the scheduler
// counts `lease` from its receipt, the agent's lease has surely run out first.
// That is what lets the scheduler restart a lost agent's job elsewhere without
// two copies ever training at once.
//
// Pure: times are passed in. Thread safety: none (the agent's loop owns it).
#pragma once

#include <cstdint>
#include <map>

namespace aryl::agent {

class SchedulerLease {
 public:
  // Heartbeat `seq` left at `sent` (monotonic seconds).
  void Sent(std::uint64_t seq, double sent) {
    sent_[seq] = sent;
    while (sent_.size() > kMaxOutstanding) sent_.erase(sent_.begin());
  }
  // The scheduler acknowledged heartbeat `seq`: the lease runs to its send
  // time plus `lease_seconds`. Unknown or older acknowledgements change nothing.
  void Acked(std::uint64_t seq, double lease_seconds) {
    auto it = sent_.find(seq);
    if (it == sent_.end()) return;
    Renew(it->second, lease_seconds);
    sent_.erase(sent_.begin(), std::next(it));
  }
  // A registration sent at `sent` was answered.
  void Renew(double sent, double lease_seconds) {
    lease_seconds_ = lease_seconds;
    if (sent + lease_seconds > until_) until_ = sent + lease_seconds;
    held_ = true;
  }
  // Held: granted once and not yet run out at `now`.
  bool Expired(double now) const { return held_ && now >= until_; }
  bool held() const { return held_; }
  // The lease ran out and the workers were stopped: a new grant is needed.
  void Drop() { held_ = false; }
  double until() const { return until_; }
  double lease_seconds() const { return lease_seconds_; }

 private:
  static constexpr std::size_t kMaxOutstanding = 1024;
  std::map<std::uint64_t, double> sent_;  // unacknowledged heartbeats: seq -> send time
  double until_ = 0;
  double lease_seconds_ = 0;
  bool held_ = false;
};

}  // namespace aryl::agent
