// SessionCore: this agent's standing with the scheduler, as decisions apart
// from the wire. aryl-agent's SchedulerSession (scheduler_session.h) runs it
// behind the blocking ZeroMQ client; the driven cluster (simtest/driven) runs
// the same object over its in-memory faulty wire, on virtual time.
//
// What it decides (agent.h, steps 1-2; protocol/messages.h):
//  1. Registration: one try a second until one is answered; each carries the
//     agent's report (its workers and unacknowledged exits, AgentCore's), this
//     process's instance and the next sequence number (one counter with the
//     heartbeats). Its answer renews the lease from the try's send time (not
//     the answer's receipt: lease.h) and sets the heartbeat interval.
//  2. Heartbeats on that interval while registered, numbered; each
//     HeartbeatAck of the scheduler epoch registered with renews the lease
//     from its heartbeat's send time. An ack of another epoch (a scheduler
//     restarted since) is ignored.
//  3. A leader whose acks stopped for AckTimeout() is left for another of the
//     list (only with several schedulers): the agent registers again.
//  4. Term fencing: a scheduler message (an AgentRegistered included) of a
//     term below the newest seen is refused (messages.h, "Term fencing"); a
//     registration answered with a deposed term asks for a failover.
//  5. An Error push from a standby or from a scheduler that does not know
//     this agent means registering again, now.
//  6. Start confirmation (messages.h, d-f): the newest report the scheduler
//     acknowledged (a registration's answer, a HeartbeatAck taken) goes in
//     every registration and heartbeat as `acked`; a StartWorkers whose
//     ack_floor is below it was overtaken by a later acknowledgement and is
//     refused.
//
// States:
//  1. kUnregistered: not registered with any leader (a new process, or told
//     to register again); a registration is due a second after the last try.
//  2. kRegistering: a registration is on its way; its answer, its failure or
//     its timeout (the agent's request timeout) settles it.
//  3. kRegistered: the leader took the registration; heartbeats are due.
//  4. kFrozen: the leader cannot decide (its state store is unreachable) but
//     acks the heartbeats of the agents it knows; this agent had registered
//     before, so it heartbeats on and keeps its lease.
//
// Transitions (kTable, from --event--> to):
//  a. kUnregistered --kRegister--> kRegistering (MakeRegister)
//  b. kRegistering --kAccepted--> kRegistered (OnRegistered, term current)
//  c. kRegistering --kDeposedAnswer--> kUnregistered (OnRegistered of a
//     deposed term: a failover is wanted)
//  d. kRegistering --kFailed--> kUnregistered (OnRegisterFailed: timeout,
//     standby, refused, a frozen leader before any registration)
//  e. kRegistering --kFrozenLeader--> kFrozen (OnRegisterFailed: frozen, after
//     a registration with some leader)
//  f. kRegistered, kFrozen --kAckTimeout--> kUnregistered (LeaderLeft, after
//     FailoverDue): a registration is due at once
//  g. kUnregistered, kRegistered, kFrozen --kForgotten--> kUnregistered
//     (OnError: standby or unknown agent): a registration is due at once
// Anything else is refused: Next() answers nullopt and the transition leaves
// the state as it was (a late answer to a registration already settled, an
// Error while a registration is on its way: its answer decides).
//
// Pure: times are passed in; nothing is sent here. Thread safety: none (the
// agent's loop owns it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "aryl/protocol/messages.h"
#include "aryl/status.h"
#include "lease.h"

namespace aryl::agent {

class SessionCore {
 public:
  enum class State { kUnregistered, kRegistering, kRegistered, kFrozen };
  enum class Event { kRegister, kAccepted, kDeposedAnswer, kFailed, kFrozenLeader, kAckTimeout, kForgotten };
  struct Row {
    State from;
    Event event;
    State to;
  };
  static constexpr Row kTable[] = {
      {State::kUnregistered, Event::kRegister, State::kRegistering},      // a
      {State::kRegistering, Event::kAccepted, State::kRegistered},        // b
      {State::kRegistering, Event::kDeposedAnswer, State::kUnregistered}, // c
      {State::kRegistering, Event::kFailed, State::kUnregistered},        // d
      {State::kRegistering, Event::kFrozenLeader, State::kFrozen},        // e
      {State::kRegistered, Event::kAckTimeout, State::kUnregistered},     // f
      {State::kFrozen, Event::kAckTimeout, State::kUnregistered},         // f
      {State::kUnregistered, Event::kForgotten, State::kUnregistered},    // g
      {State::kRegistered, Event::kForgotten, State::kUnregistered},      // g
      {State::kFrozen, Event::kForgotten, State::kUnregistered},          // g
  };
  // Seconds between registration tries.
  static constexpr double kRegisterRetry = 1.0;

  static std::optional<State> Next(State from, Event event);
  static std::string_view Name(State s);
  static std::string_view Name(Event e);

  // `instance`: this process's identity for the scheduler (drawn at random by
  // the binary, from the seed by the simulation). `several_schedulers`: the
  // list has more than one (failover, 3). `request_timeout`: how long a
  // registration waits for its answer (RegisterOverdue).
  SessionCore(std::uint64_t instance, bool several_schedulers, double request_timeout)
      : instance_(instance), several_schedulers_(several_schedulers), request_timeout_(request_timeout) {}

  // 1. Unregistered and the last try is over kRegisterRetry old.
  bool RegisterDue(double now) const {
    return state_ == State::kUnregistered && now - last_register_try_ > kRegisterRetry;
  }
  // a. The registration to send at `now`: `report` (the agent's) with this
  // process's instance and the next sequence number.
  protocol::AgentRegister MakeRegister(protocol::AgentRegister report, double now);
  // A registration on its way whose answer has not come within the request
  // timeout (an asynchronous wire; a blocking client times out by itself).
  bool RegisterOverdue(double now) const {
    return state_ == State::kRegistering && now - register_sent_ >= request_timeout_;
  }

  struct Registered {
    enum class Kind {
      kRegistered,  // b: the lease renewed from the send time
      kDeposed,     // c: a deposed leader answered; fail over
      kStale,       // no registration on its way: ignored
    } kind = Kind::kStale;
    bool scheduler_restarted = false;  // b: an epoch other than the one registered with before
  };
  // b, c. The answer to the registration on its way, taken at `now`.
  Registered OnRegistered(const protocol::AgentRegistered& reply, double now);

  enum class Failed {
    kUnreachable,  // d: timeout
    kStandby,      // d: a standby answered
    kFrozen,       // e: a frozen leader, registered with before: heartbeat on
    kRefused,      // d: any other refusal (a frozen leader before any registration too)
    kStale,        // no registration on its way: ignored
  };
  // d, e. The registration on its way failed with `why` at `now`.
  Failed OnRegisterFailed(const Status& why, double now);

  // 2. Registered (or frozen) and the interval passed since the last heartbeat
  // (to a microsecond: a virtual clock's steps add up in floating point).
  bool HeartbeatDue(double now) const {
    return registered() && now - last_heartbeat_ + 1e-6 >= heartbeat_interval_;
  }
  // The heartbeat to send at `now`: `hb` (the agent's) numbered; its send
  // time is kept for the lease.
  protocol::Heartbeat MakeHeartbeat(protocol::Heartbeat hb, double now);
  // Whether the ack was taken (false: of another scheduler epoch).
  bool OnHeartbeatAck(const protocol::HeartbeatAck& ack, double now);

  // 3. Why the agent should leave its leader at `now` (registered, several
  // schedulers, no ack for over AckTimeout()); nullopt: stay.
  std::optional<std::string> FailoverDue(double now) const;
  // f. The agent left its leader; registration is due at once.
  bool LeaderLeft();
  double AckTimeout() const { return std::max(3 * heartbeat_interval_, 2.0); }

  // 4. Whether `msg` comes from a deposed leader (a term below the newest
  // seen); otherwise remembers its term. Logs a refusal.
  bool FromDeposedLeader(const protocol::Message& msg);
  // 6. Whether `msg` is a StartWorkers that an acknowledgement sent after it
  // overtook (its ack_floor is below acked()): refused, the scheduler gives it
  // up. Logs a refusal.
  bool Overtaken(const protocol::Message& msg) const;
  std::uint64_t acked() const { return acked_; }

  enum class ErrorKind {
    kStandby,       // g: the leader moved; register again
    kUnknownAgent,  // g: the scheduler does not know this agent; register again
    kOther,         // nothing changes
  };
  // 5. An Error push.
  ErrorKind OnError(const protocol::Error& e);

  State state() const { return state_; }
  bool registered() const { return state_ == State::kRegistered || state_ == State::kFrozen; }
  bool ever_registered() const { return ever_registered_; }
  SchedulerLease& lease() { return lease_; }
  const SchedulerLease& lease() const { return lease_; }
  std::uint64_t instance() const { return instance_; }
  std::uint64_t term() const { return term_; }
  std::uint64_t scheduler_epoch() const { return scheduler_epoch_; }
  double heartbeat_interval() const { return heartbeat_interval_; }
  std::uint64_t seq() const { return seq_; }

 private:
  bool Move(Event e);
  // Term fencing: whether term `t` of a `what` is below the newest seen. Term
  // 0 (a scheduler that stamps none) passes only while no term was seen.
  bool Deposed(std::uint64_t t, std::string_view what);

  State state_ = State::kUnregistered;
  std::uint64_t instance_;
  bool several_schedulers_;
  double request_timeout_;
  bool ever_registered_ = false;  // this process has registered with some leader
  double heartbeat_interval_ = 1.0;
  double last_heartbeat_ = 0;
  double last_ack_ = 0;  // the newest registration or HeartbeatAck taken (monotonic)
  double last_register_try_ = -10;
  double register_sent_ = 0;  // kRegistering: when the registration on its way left
  std::uint64_t seq_ = 0;
  std::uint64_t register_seq_ = 0;  // of the registration on its way
  std::uint64_t acked_ = 0;         // 6: the newest report acknowledged
  SchedulerLease lease_;  // how long workers may run without the scheduler
  std::uint64_t term_ = 0;  // the highest scheduler term seen here
  std::uint64_t scheduler_epoch_ = 0;
};

}  // namespace aryl::agent
