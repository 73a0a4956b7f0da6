// Start confirmation, the scheduler's side (protocol/messages.h, "Start
// confirmation", d-f): whether a StartWorkers that an agent's report does not
// list is given up. Pure: the daemon (agents.cc, Reconcile and ConfirmStarts)
// passes the report and the start; the tests drive it directly.
//
// Rules, for a start not yet confirmed (its worker never listed) and a report
// (registration or heartbeat) of its agent's current process that does not
// list it:
//  0. The worker was reloaded after a failed state write had given it up in
//     memory (kFloorByTime): it may have run and ended, its exit not yet
//     recorded and on its way again (the agent resends it until acked). Not
//     listed says nothing then: the time rule of 1, which gives the exit time.
//  1. The report carries no `acked` (an agent of an older version, or a new
//     process's first registration, before any acknowledgement): a
//     registration settles nothing (it may have left before the start
//     arrived); a heartbeat gives the start up once it went out
//     `confirm_seconds` of watching ago (the time rule).
//  2. The start's floor is unknown (0: made before any numbered report of
//     its agent was acknowledged; a guard, since a connected agent that
//     numbers its reports has had its registration acknowledged): it is
//     numbered with this report's seq and waited for.
//  3. The report's `acked` is above the floor: an acknowledgement sent after
//     the start reached the agent before this report left, so the agent took
//     the start before it (and would list the worker, or has reported its
//     exit) or refuses it for ever: given up.
//  4. Otherwise it is waited for, however late the wire is: a lost agent is
//     settled by its lease (NodeFailed), not here.
#pragma once

#include <cstdint>

namespace aryl::daemon {

struct StartReport {
  std::uint64_t seq = 0;    // the report's number (0: unnumbered)
  std::uint64_t acked = 0;  // its `acked` (0: absent or none yet)
  bool registration = false;
};

enum class StartVerdict { kWait, kGone };

inline constexpr std::uint64_t kFloorByTime = ~std::uint64_t{0};  // rule 0

// `floor`: the start's ack_floor, numbered here when unknown (rule 2).
// `watched`: watch seconds since the StartWorkers went out.
inline StartVerdict JudgeUnlistedStart(std::uint64_t& floor, double watched, const StartReport& r,
                                       double confirm_seconds) {
  if (r.acked == 0 || floor == kFloorByTime)  // 1, 0
    return !r.registration && watched > confirm_seconds ? StartVerdict::kGone : StartVerdict::kWait;
  if (floor == 0) {  // 2
    floor = r.seq;
    return StartVerdict::kWait;
  }
  return r.acked > floor ? StartVerdict::kGone : StartVerdict::kWait;  // 3, 4
}

}  // namespace aryl::daemon
