// SchedulerSession: this agent's standing with the scheduler (agent.h, steps
// 1-2): the client to the leader among --scheduler's list, registration and
// its retries, heartbeats, the lease they renew (lease.h), the move to another
// leader when HeartbeatAcks stop, and term fencing: messages of a lower
// scheduler term (messages.h, "Term fencing") are refused. (Commands of an
// older job generation are AgentCore's to refuse, agent_core.h.)
//
// What the agent reports (its workers, its unacknowledged exits) is built by
// the agent and handed in; the session adds its own identity (instance) and
// sequence numbers.
//
// Thread safety: none; the agent's loop owns it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/agent/agent.h"
#include "aryl/protocol/messages.h"
#include "agent_core.h"
#include "aryl/protocol/scheduler_client.h"
#include "lease.h"

namespace aryl::agent {

class SchedulerSession final : public SchedulerLink {
 public:
  // Connects to `endpoints` (--scheduler, parsed) as options.id, with CURVE
  // when options name both keys. Registration is left to the loop.
  static Result<std::unique_ptr<SchedulerSession>> Connect(const AgentOptions& options,
                                                           const std::vector<std::string>& endpoints);

  // A leader whose HeartbeatAcks stopped for AckTimeout() is left for the
  // next of the list (only with several schedulers); the agent registers again.
  void FailoverIfQuiet(double now);
  // Not registered and the last try is over a second old.
  bool RegisterDue(double now) const { return !registered_ && now - last_register_try_ > 1.0; }
  // Sends `m` (what is here; the session adds its instance) and takes the answer.
  void Register(protocol::AgentRegister m);
  bool HeartbeatDue(double now) const { return registered_ && now - last_heartbeat_ >= heartbeat_interval_; }
  // Sends `hb` (what is here; the session numbers it) as sent at `now`.
  void Heartbeat(protocol::Heartbeat hb, double now);

  // Whether `msg` comes from a deposed leader (a term below the newest seen);
  // otherwise remembers its term. Logs a refusal.
  bool FromDeposedLeader(const protocol::Message& msg);
  void OnHeartbeatAck(const protocol::HeartbeatAck& a);
  // An Error push: a standby or a scheduler that does not know this agent
  // means registering again; any other is logged.
  void OnError(const protocol::Error& e);

  // One-way to the leader; a failure is logged at debug level.
  void Send(const protocol::Message& m) override;
  Result<protocol::Message> Receive(std::chrono::milliseconds timeout) { return client_->Receive(timeout); }
  void Close() { client_->Close(); }

  bool registered() const override { return registered_; }
  SchedulerLease& lease() override { return lease_; }

 private:
  SchedulerSession() = default;
  // Term fencing: whether term `t` of a `what` is below the newest seen. Term
  // 0 (a scheduler that stamps none) passes only while no term was seen.
  bool Deposed(std::uint64_t t, std::string_view what);
  // How long without a HeartbeatAck before the agent looks for another leader.
  double AckTimeout() const { return std::max(3 * heartbeat_interval_, 2.0); }

  AgentOptions opt_;
  std::unique_ptr<protocol::SchedulerClient> client_;  // the leader among --scheduler's list
  bool several_schedulers_ = false;                    // --scheduler lists more than one
  bool registered_ = false;
  bool ever_registered_ = false;  // this process has registered with some leader
  double heartbeat_interval_ = 1.0;
  double last_heartbeat_ = 0;
  double last_ack_ = 0;  // the newest registration or HeartbeatAck taken (monotonic)
  double last_register_try_ = -10;
  std::uint64_t seq_ = 0;
  // This process's identity for the scheduler (AgentRegister::instance).
  std::uint64_t instance_ = std::random_device{}() * 4294967296ull + std::random_device{}() + 1;
  SchedulerLease lease_;  // how long workers may run without the scheduler
  std::uint64_t term_ = 0;  // the highest scheduler term seen here
  std::uint64_t scheduler_epoch_ = 0;
};

}  // namespace aryl::agent
