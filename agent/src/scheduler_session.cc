// This agent's standing with the scheduler (scheduler_session.h).
#include "scheduler_session.h"

#include <spdlog/spdlog.h>

#include <cstdio>

#include "agent_security.h"
#include "aryl/clock.h"
#include "aryl/protocol/security.h"
#include "aryl/protocol/store.h"

namespace aryl::agent {

namespace p = aryl::protocol;
using std::chrono::milliseconds;

namespace {

double Now() { return SystemClock::Default()->NowSeconds(); }

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

Result<std::unique_ptr<SchedulerSession>> SchedulerSession::Connect(const AgentOptions& options,
                                                                    const std::vector<std::string>& endpoints) {
  std::unique_ptr<SchedulerSession> s(new SchedulerSession());
  p::SchedulerClient::Options co;
  co.endpoints = endpoints;
  // A registration may not hold up the loop (workers, the lease) for longer
  // than one request: the next one, a second later, goes on from where it moved.
  co.total_timeout = milliseconds(static_cast<int>(options.request_timeout * 1000));
  ARYL_ASSIGN_OR_RETURN(co.identity, AgentRoute(options.id));
  if (!options.curve_key.empty() || !options.curve_server_key.empty()) {
    if (options.curve_key.empty() || options.curve_server_key.empty())
      return Status::InvalidArgument("CURVE needs both --curve-key and --curve-server-key");
    ARYL_ASSIGN_OR_RETURN(auto kp, p::LoadKeyPair(options.curve_key));
    ARYL_ASSIGN_OR_RETURN(auto server_pub, p::LoadPublicKey(options.curve_server_key));
    co.curve = p::CurveClientKeys{kp.public_key, kp.secret_key, server_pub};
  }
  s->several_schedulers_ = endpoints.size() > 1;
  ARYL_ASSIGN_OR_RETURN(s->client_, p::SchedulerClient::Connect(co));
  s->opt_ = options;
  return s;
}

void SchedulerSession::FailoverIfQuiet(double now) {
  if (!registered_ || !several_schedulers_ || now - last_ack_ <= AckTimeout()) return;
  // The leader went quiet: another scheduler of the list may lead now.
  // The workers keep running; the lease bounds for how long.
  char why[64];
  std::snprintf(why, sizeof why, "no heartbeat ack for %.1f s", now - last_ack_);
  spdlog::warn("{}; registering again through the scheduler list", why);
  Status moved = client_->Failover(why);
  if (!moved.ok()) spdlog::error("scheduler failover: {}", moved.ToString());
  registered_ = false;
  last_register_try_ = -10;
}

void SchedulerSession::Register(p::AgentRegister m) {
  last_register_try_ = Now();
  m.instance = instance_;
  m.seq = ++seq_;  // one counter with the heartbeats (protocol step 1)
  double sent = Now();  // monotonic (clock.h): the lease's clock too
  auto reply = client_->Call<p::AgentRegistered>(m, milliseconds(static_cast<int>(opt_.request_timeout * 1000)));
  if (!reply.ok()) {
    if (reply.status().IsTimeout()) spdlog::debug("register: scheduler not reachable yet");
    else if (p::IsStandbyError(reply.status())) spdlog::info("register: {}", reply.status().message());
    else if (p::IsFrozenError(reply.status()) && ever_registered_) {
      // The leader is there but cannot decide (etcd unreachable): it still
      // acks the heartbeats of the agents it knows, which keeps the
      // workers' lease. Go on heartbeating; register once it decides again.
      spdlog::warn("register: {}; heartbeating on", reply.status().message());
      registered_ = true;
      last_ack_ = Now();
    } else spdlog::error("register refused: {}", reply.status().ToString());
    return;
  }
  if (Deposed(reply->term, "agent_registered")) {
    // A leader that lost its term answered; its successor is elsewhere in the list.
    (void)client_->Failover("it answered with the deposed term " + std::to_string(reply->term));
    return;
  }
  registered_ = true;
  ever_registered_ = true;
  last_ack_ = Now();
  lease_.Renew(sent, reply->lease_seconds);
  if (!reply->store_key.empty()) p::SetProcessStoreAuth({p::StoreAuth::Mode::kRequired, reply->store_key});
  heartbeat_interval_ = reply->heartbeat_interval_seconds;
  if (scheduler_epoch_ != 0 && scheduler_epoch_ != reply->scheduler_epoch) {
    spdlog::info("scheduler restarted; re-registered with {} running workers", m.workers.size());
  }
  scheduler_epoch_ = reply->scheduler_epoch;
  spdlog::info("registered with {} as {} ({} {} x{}, term {})", client_->endpoint(), opt_.id, opt_.pool,
               opt_.gpu_type, opt_.slots, reply->term);
  last_heartbeat_ = 0;
}

void SchedulerSession::Heartbeat(p::Heartbeat hb, double now) {
  last_heartbeat_ = now;
  hb.seq = ++seq_;
  lease_.Sent(hb.seq, now);
  Send(hb);
}

void SchedulerSession::Send(const p::Message& m) {
  Status st = client_->Send(m, milliseconds(200));
  if (!st.ok()) spdlog::debug("send {}: {}", p::TypeName(m), st.ToString());
}

bool SchedulerSession::FromDeposedLeader(const p::Message& msg) {
  auto t = TermOf(msg);
  return t && Deposed(*t, Describe(msg));
}

bool SchedulerSession::Deposed(std::uint64_t t, std::string_view what) {
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

void SchedulerSession::OnHeartbeatAck(const p::HeartbeatAck& a) {
  if (a.scheduler_epoch != scheduler_epoch_) return;
  lease_.Acked(a.seq, a.lease_seconds);
  last_ack_ = Now();
}

void SchedulerSession::OnError(const p::Error& e) {
  if (p::IsStandbyError(e)) {
    // The leader moved; registering asks this standby, which names it.
    spdlog::info("scheduler {}: {}; registering again", client_->endpoint(), e.message);
    registered_ = false;
    last_register_try_ = -10;
  } else if (e.code == Status::Code::kFailedPrecondition) {
    spdlog::info("scheduler does not know this agent ({}); registering again", e.message);
    registered_ = false;
    last_register_try_ = -10;
  } else {
    spdlog::warn("scheduler error: {}", e.message);
  }
}

}  // namespace aryl::agent
