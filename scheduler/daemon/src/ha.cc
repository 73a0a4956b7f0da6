#include "aryl/daemon/ha.h"

#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "aryl/daemon/http_server.h"
#include "aryl/protocol/scheduler_client.h"
#include "daemon_impl.h"
#include "state/etcd/etcd_state_store.h"
#include "state/etcd/leader_election.h"
#include "state/etcd/state_follower.h"

namespace aryl::daemon {

bool IsEtcdStateUrl(const std::string& state) { return state.rfind("etcd://", 0) == 0; }

namespace {

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// The standby's face: its endpoint answers with the leader's address, its
// HTTP port with aryl_leader 0.
class Standby {
 public:
  static Result<std::unique_ptr<Standby>> Start(const DaemonOptions& options,
                                                std::shared_ptr<const LeaderElection> election) {
    std::unique_ptr<Standby> s(new Standby());
    s->election_ = std::move(election);
    p::Server::Options so;
    so.endpoint = options.endpoint;
    // The same keys and role lists as the leader: a client that may talk to
    // the leader may learn where it is, nobody else.
    Daemon::Impl keys;
    keys.opt = options;
    ARYL_RETURN_IF_ERROR(keys.SetUpCurve(so));
    Standby* raw = s.get();
    ARYL_ASSIGN_OR_RETURN(s->server_, p::Server::Start(so, [raw](const p::ReplyTo&, p::Message) {
                            std::lock_guard lock(raw->mu_);
                            return std::optional<p::Message>(p::StandbyError(raw->leader_, raw->term_));
                          }));
    if (keys.peer_credentials) ARYL_RETURN_IF_ERROR(OpenIpcSocket(s->server_->endpoint()));
    if (options.http_port >= 0) {
      ARYL_ASSIGN_OR_RETURN(s->http_, HttpServer::Start(options.http_address, options.http_port,
                                                        [raw](const std::string& path) -> HttpResponse {
                                                          return raw->Http(path);
                                                        }));
    }
    return s;
  }
  void SetLeader(const std::string& endpoint, std::uint64_t term) {
    std::lock_guard lock(mu_);
    leader_ = endpoint;
    term_ = term;
  }
  ~Standby() {
    if (http_) http_->Stop();
    if (server_) {
      server_->Close();
      server_->Join();
    }
  }

 private:
  Standby() = default;
  HttpResponse Http(const std::string& path) {
    std::lock_guard lock(mu_);
    if (path == "/metrics") return {200, "text/plain; version=0.0.4", election_->StandbyMetrics(term_)};
    if (path == "/healthz") return {200, "text/plain", "ok\n"};
    if (path == "/readyz") return {503, "text/plain", "standby\n"};
    if (path == "/status" || path == "/")
      return {200, "application/json",
              nlohmann::json{{"ha", {{"mode", "standby"}, {"leader", leader_}, {"term", term_}}}}.dump(2)};
    return {404, "text/plain", "not found: try /metrics, /status, /healthz or /readyz\n"};
  }
  std::mutex mu_;
  std::string leader_;
  std::uint64_t term_ = 0;
  std::unique_ptr<p::Server> server_;
  std::unique_ptr<HttpServer> http_;
  std::shared_ptr<const LeaderElection> election_;
};

}  // namespace

Status RunHighlyAvailable(DaemonOptions options, const HaOptions& ha, const std::atomic<bool>& stop) {
  const bool tls = !ha.etcd_cert.empty() || !ha.etcd_ca.empty();
  ARYL_ASSIGN_OR_RETURN(auto url, etcd::ParseEtcdUrl(ha.state_url, tls));
  etcd::ClientOptions co;
  co.endpoints = url.endpoints;
  co.request_timeout = ha.etcd_timeout;
  co.ca_file = ha.etcd_ca;
  co.cert_file = ha.etcd_cert;
  co.key_file = ha.etcd_key;
  ARYL_ASSIGN_OR_RETURN(std::unique_ptr<etcd::Client> raw_client, etcd::Client::Connect(co));
  std::shared_ptr<etcd::Client> client(std::move(raw_client));
  if (ha.lease_ttl < 1 || ha.lease_ttl > 300)
    return Status::InvalidArgument("--lease-ttl " + std::to_string(ha.lease_ttl) + " outside 1..300 s");
  ElectionOptions eo;
  eo.prefix = url.prefix;
  eo.endpoint = ha.advertise.empty() ? options.endpoint : ha.advertise;
  if (eo.endpoint.find('*') != std::string::npos)
    return Status::InvalidArgument("--advertise is needed: the endpoint " + eo.endpoint +
                                   " has a wildcard, and standbys must tell clients where this scheduler is");
  eo.name = ha.name.empty() ? HostName() + ":" + std::to_string(::getpid()) : ha.name;
  eo.ttl_seconds = ha.lease_ttl;
  auto election = std::make_shared<LeaderElection>(client, eo);
  int terms = 0;
  while (!stop) {
    // The standby's copy of the state, kept current by a watch (state_follower.h).
    std::unique_ptr<StateFollower> follower;
    {
      EtcdStateStore::Options fo;
      fo.location = ha.state_url;
      fo.prefix = url.prefix;
      auto f = StateFollower::Start(client, fo);
      if (f.ok()) follower = std::move(*f);
      else spdlog::warn("standby: cannot read the state to follow it ({}); a takeover reads it whole",
                        f.status().ToString());
    }
    {
      ARYL_ASSIGN_OR_RETURN(auto standby, Standby::Start(options, election));
      spdlog::info("standby on {} for {} ({}): campaigning", options.endpoint, ha.state_url, eo.name);
      Status c = election->Campaign(stop, [&](const std::string& leader, std::uint64_t term) {
        standby->SetLeader(leader, term);
        if (leader.empty()) spdlog::info("no leader yet");
        else spdlog::info("the leader is {} (term {})", leader, term);
      });
      if (!c.ok()) break;  // stopped
    }
    auto t0 = std::chrono::steady_clock::now();
    EtcdStateStore::Options so;
    so.location = ha.state_url;
    so.prefix = url.prefix;
    so.term = static_cast<std::int64_t>(election->term());
    std::weak_ptr<LeaderElection> weak = election;
    so.on_deposed = [weak](const std::string& why) {
      if (auto e = weak.lock()) e->MarkDeposed(why);
    };
    // A write that finds etcd away freezes the leader at once: the next
    // writes fail without waiting on etcd, and heartbeats are answered.
    so.may_write = [weak] {
      auto e = weak.lock();
      return e && e->CanDecide();
    };
    so.on_unavailable = [weak](const std::string& why) {
      if (auto e = weak.lock()) e->WriteFailed(why);
    };
    Result<std::unique_ptr<EtcdStateStore>> store = Status::Unavailable("no follower");
    std::string how;
    if (follower) {
      const std::size_t loaded = follower->loaded_keys(), watched = follower->watched_events();
      store = follower->TakeOver(so, std::max(2.0, ha.etcd_timeout * 2));
      if (store.ok())
        how = fmt::format("followed as a standby: {} keys read then, {} changes watched since", loaded, watched);
      else
        spdlog::warn("the followed state cannot be taken over ({}): reading it whole", store.status().ToString());
      follower.reset();
    }
    if (!store.ok()) {
      store = EtcdStateStore::Open(client, so);
      if (store.ok()) how = fmt::format("{} state keys read", (*store)->loaded_keys());
    }
    if (!store.ok()) {
      spdlog::error("elected, but the state on {} cannot be read: {}", ha.state_url, store.status().ToString());
      election->Resign();
      if (store.status().IsCorruption() || store.status().code() == Status::Code::kFailedPrecondition)
        return store.status();
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    options.term = election->term();
    // Agents reach a new leader only after their acks stop (2 s) and a try
    // or two through the list: give them that before their workers count
    // as lost (a lone scheduler's restart waits options.restart_grace).
    options.restart_grace = std::max(options.restart_grace, 10.0);
    auto daemon = Daemon::Start(options, std::move(*store), election);
    if (!daemon.ok()) {
      election->Resign();
      return daemon.status();
    }
    ++terms;
    spdlog::info("leading (term {}): state {} and the core rebuilt in {:.0f} ms", election->term(), how,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    (*daemon)->Run(stop);
    (*daemon)->Stop();
    daemon->reset();
    election->Resign();
    if (!stop) spdlog::warn("stepped down after term {}: {}; standby again", options.term, election->Why());
  }
  spdlog::info("stopped after leading {} term(s)", terms);
  return Status::Ok();
}

}  // namespace aryl::daemon
