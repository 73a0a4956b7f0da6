// Leadership: what a scheduler that shares its state with standbys asks before
// it decides (docs/architecture.md, "High availability").
//
// With the SQLite backend there is one scheduler and no Leadership (null): it
// always decides. With etcd (state/etcd/leader_election.h), the daemon:
//  1. decides (handles events, runs rounds, answers submissions) only while
//     CanDecide(): its lease on the leader key is surely still valid;
//  2. while it cannot (etcd unreachable, quorum lost), answers heartbeats so
//     agents keep their workers, refuses everything else with Unavailable
//     "retry", and journals nothing: it is frozen, not deposed;
//  3. stops (Daemon::Run returns) once Deposed(): its lease expired at etcd or
//     a fenced write found another leader; the process goes back to standby.
// Every command to agents carries term() (the leader key's create revision),
// so agents refuse a deposed leader's late commands.
#pragma once

#include <cstdint>
#include <string>

namespace aryl::daemon {

class Leadership {
 public:
  virtual ~Leadership() = default;
  virtual std::uint64_t term() const = 0;
  virtual bool CanDecide() const = 0;
  virtual bool Deposed() const = 0;
  // A fenced write found the leader key changed: leadership is lost for good.
  virtual void MarkDeposed(const std::string& why) = 0;
  // How many state writes have found etcd unavailable (each froze it, 2.):
  // a request compares it before and after it is handled, since the freeze
  // may lift (a later keep-alive answered) before the handler returns.
  virtual std::uint64_t write_failures() const = 0;
  // Leader changes this scheduler has seen since it started: as a standby
  // (a new leader named) and by winning an election itself (aryl_leader_changes_total).
  virtual std::uint64_t leader_changes() const = 0;
  // The last successful etcd request's round trip (aryl_etcd_round_trip_seconds).
  virtual double etcd_round_trip_seconds() const = 0;
  // Why it cannot decide now ("" when it can), for refusals and logs.
  virtual std::string Why() const = 0;
  // For `aryl status` and /status: {"mode", "term", "leader", "lease_ttl",
  // "etcd": [{"endpoint", "healthy", "round_trip_ms", "error"}], ...}.
  virtual std::string StatusJson() const = 0;
};

}  // namespace aryl::daemon
