// High availability: aryl-scheduler with its state on etcd
// (`--state etcd://h1:2379,h2:2379,h3:2379/prefix`), one leader at a time
// among the schedulers that share the prefix (docs/operations.md, "High
// availability"; the election protocol in state/etcd/leader_election.h).
//
// The process loops:
//  1. Standby: it binds its endpoint and answers every request with the
//     standby error naming the leader (protocol/scheduler_client.h), so
//     clients and agents given every scheduler's endpoint find the leader;
//     /metrics says aryl_leader 0. It campaigns, watching the leader key,
//     and follows the state: it read it once and applies every change a
//     leader writes as its watch delivers it (state/etcd/state_follower.h).
//  2. Elected: it closes the standby socket, catches its copy of the state up
//     to the new term (a fenced marker write, then the watch up to it; the
//     whole state is read only when the copy is broken) and starts the
//     Daemon on the same endpoint under that term. Agents
//     re-register; the daemon reconciles their running workers with the
//     journal, so workers that run keep running with the same PIDs.
//  3. Deposed (lease lost, or a fenced write failed): the Daemon stops and
//     the process is a standby again. A stop (SIGTERM) resigns, so a standby
//     takes over at once instead of after the lease's TTL.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "aryl/daemon/daemon.h"
#include "aryl/status.h"

namespace aryl::daemon {

struct HaOptions {
  std::string state_url;          // etcd://h1:2379,h2:2379/prefix
  std::int64_t lease_ttl = 3;     // seconds: failover takes about this long after a leader dies
  std::string advertise;          // endpoint clients reach this scheduler at; empty: DaemonOptions::endpoint
  std::string name;               // for status; empty: hostname:pid
  double etcd_timeout = 2.0;      // seconds per etcd request
  std::string etcd_ca, etcd_cert, etcd_key;  // TLS to etcd (https:// endpoints)
};

bool IsEtcdStateUrl(const std::string& state);

// Runs until `stop`; returns the error that ended it (bad options, a state
// that cannot be read) or Ok after a clean stop.
Status RunHighlyAvailable(DaemonOptions options, const HaOptions& ha, const std::atomic<bool>& stop);

}  // namespace aryl::daemon
