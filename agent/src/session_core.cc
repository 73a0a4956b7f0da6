// This agent's standing with the scheduler, as decisions (session_core.h).
#include "session_core.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <type_traits>
#include <variant>

#include "aryl/protocol/scheduler_client.h"
#include "aryl/transition_table.h"

namespace aryl::agent {

namespace p = aryl::protocol;

namespace {

// The term a scheduler → agent message carries; nullopt for messages without one.
std::optional<std::uint64_t> TermOf(const p::Message& msg) {
  return std::visit([](const auto& m) -> std::optional<std::uint64_t> {
    if constexpr (requires { m.term; }) return m.term;
    return std::nullopt;
  }, msg);
}

std::string Describe(const p::Message& msg) {
  return std::visit([](const auto& m) {
    std::string what(std::decay_t<decltype(m)>::kType);
    if constexpr (requires { m.job; }) what = "job " + std::to_string(m.job) + ": " + what;
    return what;
  }, msg);
}

}  // namespace

std::optional<SessionCore::State> SessionCore::Next(State from, Event event) {
  return TableNext(kTable, from, event);
}

std::string_view SessionCore::Name(State s) {
  switch (s) {
    case State::kUnregistered: return "unregistered";
    case State::kRegistering: return "registering";
    case State::kRegistered: return "registered";
    case State::kFrozen: return "heartbeating-while-frozen";
  }
  return "?";
}

std::string_view SessionCore::Name(Event e) {
  switch (e) {
    case Event::kRegister: return "register";
    case Event::kAccepted: return "accepted";
    case Event::kDeposedAnswer: return "deposed-answer";
    case Event::kFailed: return "failed";
    case Event::kFrozenLeader: return "frozen-leader";
    case Event::kAckTimeout: return "ack-timeout";
    case Event::kForgotten: return "forgotten";
  }
  return "?";
}

bool SessionCore::Move(Event e) {
  auto to = Next(state_, e);
  if (!to) return false;
  state_ = *to;
  return true;
}

p::AgentRegister SessionCore::MakeRegister(p::AgentRegister report, double now) {
  // a. Called only when due; a try out of turn still counts as the newest.
  (void)Move(Event::kRegister);
  last_register_try_ = now;
  register_sent_ = now;  // monotonic (clock.h): the lease's clock too
  report.instance = instance_;
  report.seq = ++seq_;  // one counter with the heartbeats (protocol step 1)
  register_seq_ = seq_;
  report.acked = acked_;  // 6
  return report;
}

SessionCore::Registered SessionCore::OnRegistered(const p::AgentRegistered& reply, double now) {
  Registered out;
  if (state_ != State::kRegistering) return out;  // kStale
  if (Deposed(reply.term, "agent_registered")) {
    // c. A leader that lost its term answered; its successor is elsewhere in the list.
    Move(Event::kDeposedAnswer);
    out.kind = Registered::Kind::kDeposed;
    return out;
  }
  Move(Event::kAccepted);  // b
  out.kind = Registered::Kind::kRegistered;
  acked_ = std::max(acked_, register_seq_);  // 6
  ever_registered_ = true;
  last_ack_ = now;
  lease_.Renew(register_sent_, reply.lease_seconds);
  heartbeat_interval_ = reply.heartbeat_interval_seconds;
  out.scheduler_restarted = scheduler_epoch_ != 0 && scheduler_epoch_ != reply.scheduler_epoch;
  scheduler_epoch_ = reply.scheduler_epoch;
  last_heartbeat_ = 0;  // the first heartbeat at once
  return out;
}

SessionCore::Failed SessionCore::OnRegisterFailed(const Status& why, double now) {
  if (state_ != State::kRegistering) return Failed::kStale;
  if (p::IsFrozenError(why) && ever_registered_) {
    // e. The leader is there but cannot decide (etcd unreachable): it still
    // acks the heartbeats of the agents it knows, which keeps the workers'
    // lease. Go on heartbeating; register once it decides again.
    Move(Event::kFrozenLeader);
    last_ack_ = now;
    return Failed::kFrozen;
  }
  Move(Event::kFailed);  // d
  if (why.IsTimeout()) return Failed::kUnreachable;
  if (p::IsStandbyError(why)) return Failed::kStandby;
  return Failed::kRefused;
}

p::Heartbeat SessionCore::MakeHeartbeat(p::Heartbeat hb, double now) {
  last_heartbeat_ = now;
  hb.seq = ++seq_;
  hb.acked = acked_;  // 6
  lease_.Sent(hb.seq, now);
  return hb;
}

bool SessionCore::OnHeartbeatAck(const p::HeartbeatAck& ack, double now) {
  if (ack.scheduler_epoch != scheduler_epoch_) return false;
  lease_.Acked(ack.seq, ack.lease_seconds);
  last_ack_ = now;
  acked_ = std::max(acked_, ack.seq);  // 6
  return true;
}

std::optional<std::string> SessionCore::FailoverDue(double now) const {
  if (!registered() || !several_schedulers_ || now - last_ack_ <= AckTimeout()) return std::nullopt;
  char why[64];
  std::snprintf(why, sizeof why, "no heartbeat ack for %.1f s", now - last_ack_);
  return std::string(why);
}

bool SessionCore::LeaderLeft() {
  if (!Move(Event::kAckTimeout)) return false;  // f
  last_register_try_ = -10;
  return true;
}

bool SessionCore::FromDeposedLeader(const p::Message& msg) {
  auto t = TermOf(msg);
  return t && Deposed(*t, Describe(msg));
}

bool SessionCore::Overtaken(const p::Message& msg) const {
  const auto* m = std::get_if<p::StartWorkers>(&msg);
  if (!m || m->ack_floor.value_or(0) == 0 || *m->ack_floor >= acked_) return false;
  std::string workers;
  for (const auto& w : m->workers) workers += (workers.empty() ? "" : ",") + std::to_string(w.worker);
  spdlog::warn("start of job {} workers {} (generation {}) refused: sent before the acknowledgement of report {}, "
               "which overtook it (the scheduler gives it up)",
               m->job, workers, m->generation, acked_);
  return true;
}

bool SessionCore::Deposed(std::uint64_t t, std::string_view what) {
  if (t == 0 ? term_ == 0 : t >= term_) {
    term_ = std::max(term_, t);
    return false;
  }
  if (t == 0)
    spdlog::warn("{} without a term refused: term {} was seen here (a scheduler that stamps no term)", what, term_);
  else
    spdlog::warn("{} of term {} refused: term {} was seen here (a deposed scheduler)", what, t, term_);
  return true;
}

SessionCore::ErrorKind SessionCore::OnError(const p::Error& e) {
  ErrorKind kind = ErrorKind::kOther;
  if (p::IsStandbyError(e)) kind = ErrorKind::kStandby;
  else if (e.code == Status::Code::kFailedPrecondition) kind = ErrorKind::kUnknownAgent;
  if (kind == ErrorKind::kOther) return kind;
  // g. Register again, now (a registration on its way answers for itself).
  if (Move(Event::kForgotten)) last_register_try_ = -10;
  return kind;
}

}  // namespace aryl::agent
