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

// This process's identity for the scheduler (AgentRegister::instance).
std::uint64_t DrawInstance() {
  return std::random_device{}() * 4294967296ull + std::random_device{}() + 1;
}

}  // namespace

Result<std::unique_ptr<SchedulerSession>> SchedulerSession::Connect(const AgentOptions& options,
                                                                    const std::vector<std::string>& endpoints) {
  std::unique_ptr<SchedulerSession> s(new SchedulerSession(options, endpoints.size() > 1));
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
  ARYL_ASSIGN_OR_RETURN(s->client_, p::SchedulerClient::Connect(co));
  return s;
}

SchedulerSession::SchedulerSession(const AgentOptions& options, bool several_schedulers)
    : opt_(options), core_(DrawInstance(), several_schedulers, options.request_timeout) {}

void SchedulerSession::FailoverIfQuiet(double now) {
  auto why = core_.FailoverDue(now);
  if (!why) return;
  // The leader went quiet: another scheduler of the list may lead now.
  // The workers keep running; the lease bounds for how long.
  spdlog::warn("{}; registering again through the scheduler list", *why);
  Status moved = client_->Failover(*why);
  if (!moved.ok()) spdlog::error("scheduler failover: {}", moved.ToString());
  core_.LeaderLeft();
}

void SchedulerSession::Register(p::AgentRegister m) {
  const std::size_t workers = m.workers.size();
  m = core_.MakeRegister(std::move(m), Now());
  auto reply = client_->Call<p::AgentRegistered>(m, milliseconds(static_cast<int>(opt_.request_timeout * 1000)));
  if (!reply.ok()) {
    switch (core_.OnRegisterFailed(reply.status(), Now())) {
      case SessionCore::Failed::kUnreachable: spdlog::debug("register: scheduler not reachable yet"); break;
      case SessionCore::Failed::kStandby: spdlog::info("register: {}", reply.status().message()); break;
      case SessionCore::Failed::kFrozen:
        spdlog::warn("register: {}; heartbeating on", reply.status().message());
        break;
      case SessionCore::Failed::kRefused: spdlog::error("register refused: {}", reply.status().ToString()); break;
      case SessionCore::Failed::kStale: break;
    }
    return;
  }
  auto taken = core_.OnRegistered(*reply, Now());
  if (taken.kind == SessionCore::Registered::Kind::kDeposed) {
    // A leader that lost its term answered; its successor is elsewhere in the list.
    (void)client_->Failover("it answered with the deposed term " + std::to_string(reply->term));
    return;
  }
  if (taken.kind != SessionCore::Registered::Kind::kRegistered) return;
  if (!reply->store_key.empty()) p::SetProcessStoreAuth({p::StoreAuth::Mode::kRequired, reply->store_key});
  if (taken.scheduler_restarted) spdlog::info("scheduler restarted; re-registered with {} running workers", workers);
  spdlog::info("registered with {} as {} ({} {} x{}, term {})", client_->endpoint(), opt_.id, opt_.pool,
               opt_.gpu_type, opt_.slots, reply->term);
}

void SchedulerSession::Heartbeat(p::Heartbeat hb, double now) { Send(core_.MakeHeartbeat(std::move(hb), now)); }

void SchedulerSession::Send(const p::Message& m) {
  Status st = client_->Send(m, milliseconds(200));
  if (!st.ok()) spdlog::debug("send {}: {}", p::TypeName(m), st.ToString());
}

void SchedulerSession::OnHeartbeatAck(const p::HeartbeatAck& a) { (void)core_.OnHeartbeatAck(a, Now()); }

void SchedulerSession::OnError(const p::Error& e) {
  switch (core_.OnError(e)) {
    case SessionCore::ErrorKind::kStandby:
      // The leader moved; registering asks this standby, which names it.
      spdlog::info("scheduler {}: {}; registering again", client_->endpoint(), e.message);
      break;
    case SessionCore::ErrorKind::kUnknownAgent:
      spdlog::info("scheduler does not know this agent ({}); registering again", e.message);
      break;
    case SessionCore::ErrorKind::kOther: spdlog::warn("scheduler error: {}", e.message); break;
  }
}

}  // namespace aryl::agent
