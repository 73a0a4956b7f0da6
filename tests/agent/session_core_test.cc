// SessionCore (agent/src/session_core.h): each row of its table driven, and
// the session's rules: the lease renewed from the send time, term fencing,
// a frozen leader heartbeated on, acks of another epoch ignored, failover
// only with several schedulers.
#include "session_core.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "aryl/protocol/scheduler_client.h"

namespace aryl::agent {
namespace {

namespace p = aryl::protocol;
using State = SessionCore::State;
using Event = SessionCore::Event;
using Kind = SessionCore::Registered::Kind;

constexpr double kRequestTimeout = 2;

p::AgentRegistered Answer(std::uint64_t term = 5, std::uint64_t epoch = 7, double lease = 20,
                          double interval = 0.5) {
  p::AgentRegistered r;
  r.agent_id = "t1";
  r.term = term;
  r.scheduler_epoch = epoch;
  r.lease_seconds = lease;
  r.heartbeat_interval_seconds = interval;
  return r;
}

p::HeartbeatAck Ack(std::uint64_t seq, std::uint64_t epoch = 7, double lease = 20) {
  p::HeartbeatAck a;
  a.seq = seq;
  a.scheduler_epoch = epoch;
  a.lease_seconds = lease;
  a.term = 5;
  return a;
}

// A session registered at t=10 (sent then, answered at 10.5) with epoch 7, term 5.
SessionCore Registered(bool several = false) {
  SessionCore s(42, several, kRequestTimeout);
  s.MakeRegister({}, 10);
  EXPECT_EQ(s.OnRegistered(Answer(), 10.5).kind, Kind::kRegistered);
  return s;
}

// Every (state, event) pair: the table's rows and only those.
TEST(SessionCore, NextFollowsTheTableOnly) {
  const State states[] = {State::kUnregistered, State::kRegistering, State::kRegistered, State::kFrozen};
  const Event events[] = {Event::kRegister,     Event::kAccepted,   Event::kDeposedAnswer, Event::kFailed,
                          Event::kFrozenLeader, Event::kAckTimeout, Event::kForgotten};
  std::set<std::pair<State, Event>> rows;
  for (const auto& r : SessionCore::kTable) {
    EXPECT_TRUE(rows.insert({r.from, r.event}).second) << "two rows for one pair";
    EXPECT_EQ(SessionCore::Next(r.from, r.event), r.to);
  }
  for (State s : states)
    for (Event e : events)
      if (!rows.count({s, e}))
        EXPECT_EQ(SessionCore::Next(s, e), std::nullopt) << SessionCore::Name(s) << " " << SessionCore::Name(e);
  EXPECT_EQ(SessionCore::Name(State::kFrozen), "heartbeating-while-frozen");
}

// 1, a: a new process registers at once, then a try a second; each carries
// the instance and the next number of one counter with the heartbeats.
TEST(SessionCore, RegistrationIsDueOnceASecondAndNumbered) {
  SessionCore s(42, false, kRequestTimeout);
  EXPECT_EQ(s.state(), State::kUnregistered);
  EXPECT_TRUE(s.RegisterDue(0));
  p::AgentRegister report;
  report.agent_id = "t1";
  report.slots = 2;
  auto m = s.MakeRegister(report, 100);
  EXPECT_EQ(s.state(), State::kRegistering);
  EXPECT_EQ(m.agent_id, "t1");
  EXPECT_EQ(m.slots, 2);
  EXPECT_EQ(m.instance, 42u);
  EXPECT_EQ(m.seq, 1u);
  EXPECT_FALSE(s.RegisterDue(105)) << "one on its way";
  EXPECT_FALSE(s.registered());
  EXPECT_FALSE(s.HeartbeatDue(105));
  // d: it timed out; the next try a second after the last.
  EXPECT_FALSE(s.RegisterOverdue(101.9));
  EXPECT_TRUE(s.RegisterOverdue(102));
  EXPECT_EQ(s.OnRegisterFailed(Status::Timeout("no answer"), 102), SessionCore::Failed::kUnreachable);
  EXPECT_EQ(s.state(), State::kUnregistered);
  EXPECT_TRUE(s.RegisterDue(102));
  SessionCore quick(43, false, kRequestTimeout);
  quick.MakeRegister({}, 100);
  quick.OnRegisterFailed(p::StandbyError("", 3).ToStatus(), 100.1);
  EXPECT_FALSE(quick.RegisterDue(101.0)) << "a second after the last try";
  EXPECT_TRUE(quick.RegisterDue(101.01));
  EXPECT_EQ(quick.MakeRegister({}, 101.01).seq, 2u);
}

// b: registered, heartbeats at once and then on the scheduler's interval,
// numbered after the registration.
TEST(SessionCore, RegisteredHeartbeatsOnTheIntervalGiven) {
  SessionCore s = Registered();
  EXPECT_EQ(s.state(), State::kRegistered);
  EXPECT_TRUE(s.registered());
  EXPECT_TRUE(s.ever_registered());
  EXPECT_EQ(s.heartbeat_interval(), 0.5);
  EXPECT_EQ(s.scheduler_epoch(), 7u);
  EXPECT_EQ(s.term(), 5u);
  EXPECT_FALSE(s.RegisterDue(20));
  EXPECT_TRUE(s.HeartbeatDue(10.5)) << "the first at once";
  EXPECT_EQ(s.MakeHeartbeat({}, 10.5).seq, 2u);
  EXPECT_FALSE(s.HeartbeatDue(10.9));
  EXPECT_TRUE(s.HeartbeatDue(11.0));
  EXPECT_EQ(s.MakeHeartbeat({}, 11.0).seq, 3u);
}

// b: the lease runs from the registration's send time, and from each acked
// heartbeat's send time, never from when the answer came.
TEST(SessionCore, TheLeaseRunsFromTheSendTimeNotTheReceipt) {
  SessionCore s(42, false, kRequestTimeout);
  s.MakeRegister({}, 10);
  s.OnRegistered(Answer(5, 7, /*lease=*/20), /*now=*/11.5);  // a slow answer
  EXPECT_DOUBLE_EQ(s.lease().until(), 30) << "10 + 20, not 11.5 + 20";
  auto hb = s.MakeHeartbeat({}, 12);
  EXPECT_TRUE(s.OnHeartbeatAck(Ack(hb.seq), /*now=*/15));  // acked 3 s later
  EXPECT_DOUBLE_EQ(s.lease().until(), 32) << "12 + 20, not 15 + 20";
  EXPECT_FALSE(s.lease().Expired(31.9));
  EXPECT_TRUE(s.lease().Expired(32));
}

// b: a scheduler of another epoch (restarted) is noted; its acks count from then on.
TEST(SessionCore, ANewEpochIsNotedAndAnAckOfAnotherEpochIgnored) {
  SessionCore s = Registered();
  auto hb = s.MakeHeartbeat({}, 11);
  EXPECT_FALSE(s.OnHeartbeatAck(Ack(hb.seq, /*epoch=*/8), 11.2)) << "of another epoch";
  EXPECT_DOUBLE_EQ(s.lease().until(), 30) << "unchanged: still the registration's";
  EXPECT_TRUE(s.OnHeartbeatAck(Ack(hb.seq, /*epoch=*/7), 11.3));
  EXPECT_DOUBLE_EQ(s.lease().until(), 31);
  // g: the restarted scheduler does not know the agent; b: it registers again.
  p::Error unknown;
  unknown.code = Status::Code::kFailedPrecondition;
  unknown.message = "unknown agent t1";
  EXPECT_EQ(s.OnError(unknown), SessionCore::ErrorKind::kUnknownAgent);
  EXPECT_EQ(s.state(), State::kUnregistered);
  EXPECT_TRUE(s.RegisterDue(11.4)) << "at once";
  s.MakeRegister({}, 11.4);
  auto again = s.OnRegistered(Answer(6, /*epoch=*/8), 11.5);
  EXPECT_EQ(again.kind, Kind::kRegistered);
  EXPECT_TRUE(again.scheduler_restarted);
  EXPECT_EQ(s.scheduler_epoch(), 8u);
  auto hb2 = s.MakeHeartbeat({}, 12);
  EXPECT_FALSE(s.OnHeartbeatAck(Ack(hb2.seq, /*epoch=*/7), 12.1)) << "the old epoch now";
  EXPECT_TRUE(s.OnHeartbeatAck(Ack(hb2.seq, /*epoch=*/8), 12.2));
}

// 4, c: a registration answered by a deposed leader is refused and asks for
// a failover; any message of a term below the newest seen is refused.
TEST(SessionCore, ADeposedTermIsRefused) {
  SessionCore s = Registered();  // term 5 seen
  p::StopWorkers old;
  old.job = 3;
  old.term = 4;
  EXPECT_TRUE(s.FromDeposedLeader(old));
  p::StopWorkers current = old;
  current.term = 5;
  EXPECT_FALSE(s.FromDeposedLeader(current));
  current.term = 6;
  EXPECT_FALSE(s.FromDeposedLeader(current));
  EXPECT_EQ(s.term(), 6u) << "the newest seen";
  p::StopWorkers unstamped = old;
  unstamped.term = 0;
  EXPECT_TRUE(s.FromDeposedLeader(unstamped)) << "no term, once one was seen";
  EXPECT_TRUE(s.FromDeposedLeader(p::Message{Ack(1)})) << "an ack of term 5 too";
  EXPECT_FALSE(s.FromDeposedLeader(p::Message{p::Error{}})) << "a message without a term";

  // c: its answer refused, a failover wanted, registration due again a second later.
  s.OnError(p::StandbyError("tcp://b:7117", 6));
  s.MakeRegister({}, 20);
  auto deposed = s.OnRegistered(Answer(/*term=*/5), 20.1);
  EXPECT_EQ(deposed.kind, Kind::kDeposed);
  EXPECT_EQ(s.state(), State::kUnregistered);
  EXPECT_FALSE(s.registered());
  EXPECT_DOUBLE_EQ(s.lease().until(), 30) << "no renewal from a deposed leader";
  EXPECT_FALSE(s.RegisterDue(21.0));
  EXPECT_TRUE(s.RegisterDue(21.01));
}

// A new process takes term 0 while it has seen none (a scheduler that stamps none).
TEST(SessionCore, TermZeroPassesOnlyWhileNoneWasSeen) {
  SessionCore s(42, false, kRequestTimeout);
  s.MakeRegister({}, 0);
  EXPECT_EQ(s.OnRegistered(Answer(/*term=*/0), 0.1).kind, Kind::kRegistered);
  p::StartWorkers start;
  EXPECT_FALSE(s.FromDeposedLeader(start));
  start.term = 2;
  EXPECT_FALSE(s.FromDeposedLeader(start));
  start.term = 0;
  EXPECT_TRUE(s.FromDeposedLeader(start));
}

// e: a frozen leader, known before: heartbeat on (the lease kept by its
// acks). d: frozen before any registration is a refusal.
TEST(SessionCore, AFrozenLeaderIsHeartbeatedOnOnlyAfterARegistration) {
  const Status frozen = p::FrozenError("etcd unreachable").ToStatus();
  SessionCore fresh(42, false, kRequestTimeout);
  fresh.MakeRegister({}, 0);
  EXPECT_EQ(fresh.OnRegisterFailed(frozen, 0.1), SessionCore::Failed::kRefused);
  EXPECT_EQ(fresh.state(), State::kUnregistered);
  EXPECT_FALSE(fresh.HeartbeatDue(5));

  SessionCore s = Registered();
  s.OnError(p::StandbyError("", 6));  // told to register again
  s.MakeRegister({}, 12);
  EXPECT_EQ(s.OnRegisterFailed(frozen, 12.1), SessionCore::Failed::kFrozen);
  EXPECT_EQ(s.state(), State::kFrozen);
  EXPECT_TRUE(s.registered());
  EXPECT_FALSE(s.RegisterDue(20));
  EXPECT_TRUE(s.HeartbeatDue(12.1));
  auto hb = s.MakeHeartbeat({}, 12.1);
  EXPECT_TRUE(s.OnHeartbeatAck(Ack(hb.seq), 12.2));
  EXPECT_DOUBLE_EQ(s.lease().until(), 32.1) << "the frozen leader's acks keep the lease";
  // g: out of kFrozen too.
  s.OnError(p::StandbyError("", 7));
  EXPECT_EQ(s.state(), State::kUnregistered);
}

// 3, f: acks stopped for AckTimeout(): fail over with several schedulers only.
TEST(SessionCore, FailoverAfterTheAckTimeoutOnlyWithSeveralSchedulers) {
  SessionCore one = Registered(/*several=*/false);
  SessionCore two = Registered(/*several=*/true);
  EXPECT_EQ(two.AckTimeout(), 2.0) << "max(3 x 0.5, 2)";
  EXPECT_EQ(two.FailoverDue(12.5), std::nullopt) << "last ack at 10.5: 2 s";
  auto why = two.FailoverDue(12.6);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why, "no heartbeat ack for 2.1 s");
  EXPECT_EQ(one.FailoverDue(100), std::nullopt) << "nowhere to go";
  EXPECT_TRUE(two.LeaderLeft());
  EXPECT_EQ(two.state(), State::kUnregistered);
  EXPECT_TRUE(two.RegisterDue(12.6)) << "at once";
  EXPECT_EQ(two.FailoverDue(100), std::nullopt) << "not registered";
  EXPECT_FALSE(two.LeaderLeft()) << "f only from registered or frozen";
  // An ack keeps the leader.
  SessionCore acked = Registered(true);
  auto hb = acked.MakeHeartbeat({}, 12);
  acked.OnHeartbeatAck(Ack(hb.seq), 12.1);
  EXPECT_EQ(acked.FailoverDue(14.0), std::nullopt);
  EXPECT_TRUE(acked.FailoverDue(14.2).has_value());
}

// Refused rows: a late answer to a registration already settled, an Error
// while one is on its way (its answer decides), any other Error.
TEST(SessionCore, LateAnswersAndOtherErrorsChangeNothing) {
  SessionCore s(42, false, kRequestTimeout);
  EXPECT_EQ(s.OnRegistered(Answer(), 1).kind, Kind::kStale) << "none on its way";
  EXPECT_EQ(s.OnRegisterFailed(Status::Timeout("x"), 1), SessionCore::Failed::kStale);
  s.MakeRegister({}, 2);
  EXPECT_EQ(s.OnError(p::StandbyError("", 1)), SessionCore::ErrorKind::kStandby);
  EXPECT_EQ(s.state(), State::kRegistering) << "the registration on its way answers";
  EXPECT_EQ(s.OnRegistered(Answer(), 2.1).kind, Kind::kRegistered);
  EXPECT_EQ(s.OnRegistered(Answer(5, 9), 2.2).kind, Kind::kStale) << "a duplicate answer";
  EXPECT_EQ(s.scheduler_epoch(), 7u);
  p::Error other;
  other.code = Status::Code::kInvalidArgument;
  other.message = "bad heartbeat";
  EXPECT_EQ(s.OnError(other), SessionCore::ErrorKind::kOther);
  EXPECT_EQ(s.state(), State::kRegistered);
}

// 6. The newest acknowledged report goes in every report; a start sent
// before a later acknowledgement arrived is refused.
TEST(SessionCore, ReportsCarryTheNewestAcknowledgedAndOvertakenStartsAreRefused) {
  SessionCore s(42, false, kRequestTimeout);
  EXPECT_EQ(s.MakeRegister({}, 10).acked, 0u) << "nothing acknowledged yet";
  ASSERT_EQ(s.OnRegistered(Answer(), 10.5).kind, Kind::kRegistered);
  EXPECT_EQ(s.acked(), 1u) << "the answer acknowledges registration 1";
  p::Heartbeat h2 = s.MakeHeartbeat({}, 11), h3 = s.MakeHeartbeat({}, 11.5);
  EXPECT_EQ(h2.acked, 1u);
  EXPECT_TRUE(s.OnHeartbeatAck(Ack(h3.seq), 12));
  EXPECT_TRUE(s.OnHeartbeatAck(Ack(h2.seq), 12.1)) << "a late ack is taken";
  EXPECT_EQ(s.acked(), 3u) << "and does not move it back";
  EXPECT_FALSE(s.OnHeartbeatAck(Ack(9, 8), 12.2)) << "another epoch";
  EXPECT_EQ(s.acked(), 3u);
  EXPECT_EQ(s.MakeHeartbeat({}, 12.5).acked, 3u);

  p::StartWorkers start;
  start.job = 1;
  start.workers = {{4, 0, 0}};
  start.ack_floor = 2;  // sent before the ack of report 3
  EXPECT_TRUE(s.Overtaken(p::Message(start)));
  start.ack_floor = 3;
  EXPECT_FALSE(s.Overtaken(p::Message(start)));
  start.ack_floor = 0;
  EXPECT_FALSE(s.Overtaken(p::Message(start))) << "0: not numbered";
  start.ack_floor.reset();
  EXPECT_FALSE(s.Overtaken(p::Message(start))) << "absent: a scheduler of an older version";
  p::NewGeneration ng;
  EXPECT_FALSE(s.Overtaken(p::Message(ng))) << "only starts";
}

}  // namespace
}  // namespace aryl::agent
