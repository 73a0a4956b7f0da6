// SchedulerSession: this agent's standing with the scheduler (agent.h, steps
// 1-2) over the wire: the blocking ZeroMQ client to the leader among
// --scheduler's list, and a SessionCore (session_core.h) that decides
// everything else: registration and its retries, heartbeats, the lease they
// renew (lease.h), the move to another leader when HeartbeatAcks stop, and
// term fencing: messages of a lower scheduler term (messages.h, "Term
// fencing") are refused. (Commands of an older job generation are AgentCore's
// to refuse, agent_core.h.) The driven cluster (simtest/driven) runs the same
// SessionCore over its in-memory wire.
//
// What the agent reports (its workers, its unacknowledged exits) is built by
// the agent and handed in; the core adds its own identity (instance) and
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
#include "session_core.h"

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
  bool RegisterDue(double now) const { return core_.RegisterDue(now); }
  // Sends `m` (what is here; the session adds its instance) and takes the answer.
  void Register(protocol::AgentRegister m);
  bool HeartbeatDue(double now) const { return core_.HeartbeatDue(now); }
  // Sends `hb` (what is here; the session numbers it) as sent at `now`.
  void Heartbeat(protocol::Heartbeat hb, double now);

  // Whether `msg` comes from a deposed leader (a term below the newest seen);
  // otherwise remembers its term. Logs a refusal.
  bool FromDeposedLeader(const protocol::Message& msg) { return core_.FromDeposedLeader(msg); }
  bool Overtaken(const protocol::Message& msg) const { return core_.Overtaken(msg); }
  void OnHeartbeatAck(const protocol::HeartbeatAck& a);
  // An Error push: a standby or a scheduler that does not know this agent
  // means registering again; any other is logged.
  void OnError(const protocol::Error& e);

  // One-way to the leader; a failure is logged at debug level.
  void Send(const protocol::Message& m) override;
  Result<protocol::Message> Receive(std::chrono::milliseconds timeout) { return client_->Receive(timeout); }
  void Close() { client_->Close(); }

  bool registered() const override { return core_.registered(); }
  SchedulerLease& lease() override { return core_.lease(); }

 private:
  SchedulerSession(const AgentOptions& options, bool several_schedulers);

  AgentOptions opt_;
  std::unique_ptr<protocol::SchedulerClient> client_;  // the leader among --scheduler's list
  SessionCore core_;
};

}  // namespace aryl::agent
