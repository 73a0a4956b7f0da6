// LeaderElection: one leader among the schedulers sharing an etcd prefix, by
// an etcd lease (docs/architecture.md, "High availability").
//
// Protocol (P is the state prefix, TTL the lease's seconds):
//  1. Each scheduler grants itself a lease of TTL and keeps it alive every
//     TTL/3 from a thread of its own (LeaseKeepAlive). A keep-alive that
//     answers extends `valid_until` to its send time + the TTL etcd answered:
//     a lower bound of when etcd will expire the lease.
//  2. Campaign: one transaction "if P/leader does not exist (create_revision
//     = 0), put P/leader = {endpoint, name, pid} bound to my lease, else read
//     it". The winner's term is that transaction's revision, which is the key's
//     create_revision: a number no earlier leader had, and the fencing token
//     of every state write (etcd_state_store.h) and every command to agents.
//  3. A loser reports the leader's endpoint and term (the standby's hint to
//     clients) and watches P/leader from the revision it read; when the key
//     is deleted (the leader resigned, or its lease expired) it campaigns
//     again. No polling: the watch returns on the delete.
//  4. The leader decides only while now < valid_until - margin (CanDecide).
//     A keep-alive answering that the lease is gone, or a fenced write that
//     fails, deposes it for good (Deposed): the daemon stops and this process
//     campaigns again as a standby.
//     A state write that gave up on etcd (unreachable, no quorum: WriteFailed)
//     freezes it at once, before the lease runs low: CanDecide is false until
//     a keep-alive sent after the failure is answered (one is sent at once).
//     So one slow write stalls the daemon's thread once, not once per write.
//  5. Resign (a clean stop): delete P/leader if it is still ours and revoke
//     the lease, so a standby takes over at once rather than after TTL.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "aryl/daemon/leadership.h"
#include "aryl/result.h"
#include "aryl/status.h"
#include "state/etcd/etcd_client.h"

namespace aryl::daemon {

struct ElectionOptions {
  std::string prefix;          // "/aryl/"
  std::string endpoint;        // where clients reach this scheduler (the standby's hint)
  std::string name;            // for status and logs (hostname:pid)
  std::int64_t ttl_seconds = 3;
};

class LeaderElection final : public Leadership {
 public:
  LeaderElection(std::shared_ptr<etcd::Client> client, ElectionOptions options);
  ~LeaderElection() override;  // stops the keep-alive thread; does not resign
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // Blocks until this scheduler leads (Ok) or `stop` becomes true
  // (Cancelled). While it waits, `on_leader` is called with the current
  // leader's endpoint and term whenever they change ("" and 0: none).
  Status Campaign(const std::atomic<bool>& stop,
                  const std::function<void(const std::string& endpoint, std::uint64_t term)>& on_leader);
  // Deletes the leader key when it is still ours and revokes the lease.
  void Resign();

  std::uint64_t term() const override { return term_.load(); }
  bool CanDecide() const override;
  bool Deposed() const override { return deposed_.load(); }
  void MarkDeposed(const std::string& why) override;
  // A state write could not reach etcd: no decision until etcd confirms the lease.
  void WriteFailed(const std::string& why);
  std::uint64_t write_failures() const override { return write_failures_.load(); }
  std::string Why() const override;
  std::string StatusJson() const override;

  const std::string& leader_key() const { return leader_key_; }
  std::int64_t lease() const { return lease_.load(); }
  std::uint64_t leader_changes() const override { return leader_changes_.load(); }
  double etcd_round_trip_seconds() const override;
  // The standby's /metrics text: the HA series with aryl_leader 0 and the
  // term of the leader it knows.
  std::string StandbyMetrics(std::uint64_t leader_term) const;

 private:
  Status EnsureLease();
  void KeepAliveLoop();
  double Now() const;

  std::shared_ptr<etcd::Client> client_;
  ElectionOptions opt_;
  std::string leader_key_;
  std::atomic<std::int64_t> lease_{0};
  std::atomic<std::uint64_t> term_{0};
  std::atomic<bool> leading_{false};
  std::atomic<bool> deposed_{false};
  std::atomic<double> valid_until_{0};  // steady seconds
  std::atomic<std::uint64_t> write_failures_{0};
  std::atomic<double> write_failed_at_{-1};  // steady seconds; cleared by a keep-alive sent later
  bool probe_ = false;                       // keep alive now (under mu_)
  std::atomic<std::uint64_t> leader_changes_{0};
  mutable std::mutex mu_;
  std::string why_;           // of the deposition, or of the last failed keep-alive
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread keepalive_;
  // etcd members' health, read every 2 s off the daemon's thread (StatusJson).
  void HealthLoop();
  std::string health_json_ = "[]";
  std::thread health_;
};

}  // namespace aryl::daemon
