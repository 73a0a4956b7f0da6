// KeyRoles (authz.h) and the daemon's per-request authorization: one check per
// message type, run by Handle before the message's handler.
#include "authz.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "aryl/protocol/security.h"
#include "daemon_impl.h"

namespace aryl::daemon {
namespace fs = std::filesystem;

namespace {

// NAME -> key from a directory of NAME.pub files or a file of "NAME KEY" lines.
Result<std::map<std::string, std::string>> LoadNamedKeys(const std::string& path) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      if (e.path().extension() != ".pub") continue;
      ARYL_ASSIGN_OR_RETURN(std::string key, protocol::LoadPublicKey(e.path().string()));
      out[e.path().stem().string()] = key;
    }
    if (ec) return Status::IoError("list '" + path + "': " + ec.message());
    if (out.empty()) return Status::InvalidArgument("key list directory '" + path + "' has no .pub files");
    return out;
  }
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read key list '" + path + "'");
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::istringstream ss(line);
    std::string name, key, extra;
    if (!(ss >> name) || name[0] == '#') continue;
    std::string where = path + ":" + std::to_string(lineno) + ": ";
    if (!(ss >> key) || (ss >> extra)) return Status::InvalidArgument(where + "expected 'NAME KEY'");
    if (!protocol::IsValidZ85Key(key)) return Status::InvalidArgument(where + "not a 40-character Z85 CURVE key");
    if (out.count(name)) return Status::InvalidArgument(where + "name '" + name + "' listed twice");
    out[name] = key;
  }
  if (out.empty()) return Status::InvalidArgument("key list '" + path + "' has no keys");
  return out;
}

}  // namespace

Result<KeyRoles> KeyRoles::Load(const RoleLists& lists) {
  KeyRoles kr;
  auto add = [&](const std::string& path, unsigned role, const char* what) -> Status {
    if (path.empty()) return Status::Ok();
    ARYL_ASSIGN_OR_RETURN(auto named, LoadNamedKeys(path));
    for (const auto& [name, key] : named) {
      auto [it, fresh] = kr.by_key_.try_emplace(key, Identity{name, 0, false});
      if (!fresh && it->second.name != name)
        return Status::InvalidArgument(std::string(what) + " list '" + path + "': key of '" + name +
                                       "' is already listed as '" + it->second.name + "'");
      if (role != kAgentRole && (it->second.roles & kAgentRole))
        return Status::InvalidArgument(std::string(what) + " list '" + path + "': key of '" + name +
                                       "' is also an agent key; an agent key must not be a user's or an "
                                       "operator's (it would act as a node and as a person)");
      it->second.roles |= role;
      if (role == kAgentRole) it->second.agent_bound = true;
    }
    return Status::Ok();
  };
  ARYL_RETURN_IF_ERROR(add(lists.agents, kAgentRole, "agents"));
  ARYL_RETURN_IF_ERROR(add(lists.users, kUserRole, "users"));
  ARYL_RETURN_IF_ERROR(add(lists.operators, kOperatorRole, "operators"));
  if (!lists.allow.empty()) {
    ARYL_ASSIGN_OR_RETURN(auto keys, protocol::LoadAllowList(lists.allow));
    for (const auto& key : keys) {
      auto [it, fresh] = kr.by_key_.try_emplace(key, Identity{key.substr(0, 8), 0, false});
      it->second.roles |= kAgentRole | kUserRole | kOperatorRole;
    }
    kr.legacy_ = true;
  }
  return kr;
}

std::set<std::string> KeyRoles::Keys() const {
  std::set<std::string> keys;
  for (const auto& [k, id] : by_key_) keys.insert(k);
  return keys;
}

std::optional<Identity> KeyRoles::Find(const std::string& key) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

bool IsLocalEndpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string host = endpoint.substr(6);
  auto colon = host.rfind(':');
  if (colon != std::string::npos) host = host.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The directory of an ipc:// socket exists (created 0755 when missing) so that
// the bind succeeds and every local account can reach the socket.
Status PrepareIpcSocketDir(const std::string& endpoint) {
  std::string path = endpoint.substr(6);
  if (path.empty() || path[0] == '@') return Status::Ok();  // abstract namespace
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) return Status::Ok();
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return Status::Ok();
  fs::create_directories(dir, ec);
  if (ec)
    return Status::PermissionDenied("cannot create the directory of " + endpoint + ": " + ec.message() +
                                    " (run as root, or give --endpoint ipc://<a writable dir>/scheduler.sock)");
  if (::chmod(dir.c_str(), 0755) != 0)
    return Status::IoError("chmod 755 '" + dir.string() + "': " + std::strerror(errno));
  return Status::Ok();
}

Status OpenIpcSocket(const std::string& endpoint) {
  std::string path = endpoint.substr(6);
  if (path.empty() || path[0] == '@') return Status::Ok();
  // Every local account may connect: the scheduler tells them apart by uid.
  if (::chmod(path.c_str(), 0666) != 0)
    return Status::IoError("chmod 666 '" + path + "': " + std::strerror(errno));
  return Status::Ok();
}

// --- the daemon's checks ------------------------------------------------------------------

Status Daemon::Impl::SetUpCurve(p::Server::Options& so) {
  bool lists = !opt.curve_agents.empty() || !opt.curve_users.empty() || !opt.curve_operators.empty();
  if (opt.curve_secret_key.empty()) {
    if (lists || !opt.curve_allow.empty())
      return Status::InvalidArgument("--curve-agents/--curve-users/--curve-operators/--curve-allow need --curve-key");
    if (opt.endpoint.rfind("ipc://", 0) == 0) {
      peer_credentials = true;
      return PrepareIpcSocketDir(opt.endpoint);
    }
    if (opt.endpoint.rfind("inproc://", 0) == 0) return Status::Ok();  // this process only
    if (!opt.insecure)
      return Status::InvalidArgument(
          "refusing to listen on " + opt.endpoint + " without CURVE: " +
          (IsLocalEndpoint(opt.endpoint) ? "every local account" : "anyone who reaches it") +
          " could submit as any user and register as an agent (run commands as the agents' account, read "
          "other jobs' secrets). Listen on an ipc:// socket (the default; local users are told apart by their "
          "uid), give --curve-key with role lists (docs/security.md), or pass --insecure");
    spdlog::warn("INSECURE: listening on {} without CURVE (--insecure): anyone who reaches it can submit "
                 "jobs, impersonate agents and run commands on every agent",
                 opt.endpoint);
    return Status::Ok();
  }
  if (!lists && opt.curve_allow.empty())
    return Status::InvalidArgument("--curve-key needs --curve-agents, --curve-users and --curve-operators");
  // One list for everyone makes every user key an agent (it could register a
  // node and receive other users' workers, secrets included): opt-in only.
  if (!opt.curve_allow.empty() && !opt.insecure)
    return Status::InvalidArgument(
        "--curve-allow gives every listed key every role (a user key could register as an agent and receive "
        "other users' jobs): list agent, user and operator keys apart with --curve-agents, --curve-users and "
        "--curve-operators (docs/security.md), or pass --insecure to accept it");
  ARYL_ASSIGN_OR_RETURN(auto kp, p::LoadKeyPair(opt.curve_secret_key));
  ARYL_ASSIGN_OR_RETURN(KeyRoles kr, KeyRoles::Load({opt.curve_agents, opt.curve_users, opt.curve_operators,
                                                     opt.curve_allow}));
  if (kr.legacy())
    spdlog::warn("--curve-allow: its keys have every role and may act as any agent; use --curve-agents, "
                 "--curve-users and --curve-operators to bind keys to roles (docs/security.md)");
  p::CurveServerKeys keys;
  keys.public_key = kp.public_key;
  keys.secret_key = kp.secret_key;
  keys.allowed_clients = kr.Keys();
  public_key = kp.public_key;
  roles = std::move(kr);
  so.curve = keys;
  return Status::Ok();
}


Identity LocalIdentity(std::uint32_t uid, std::uint32_t self) {
  Identity id;
  id.uid = uid;
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  id.name = ::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found ? std::string(pw.pw_name)
                                                                                 : "uid-" + std::to_string(uid);
  id.roles = uid == 0 || uid == self ? kAgentRole | kUserRole | kOperatorRole : kUserRole;
  return id;
}

Identity Daemon::Impl::Caller(const p::ReplyTo& from) const {
  if (!roles && peer_credentials) {
    if (!from.peer.uid) return Identity{"unidentified local peer", 0, true};
    auto it = local_identities.find(*from.peer.uid);
    if (it == local_identities.end() || local_identities.size() > 4096) {
      if (local_identities.size() > 4096) local_identities.clear();
      it = local_identities.emplace(*from.peer.uid, LocalIdentity(*from.peer.uid, ::geteuid())).first;
    }
    return it->second;
  }
  if (!roles) return Identity{};
  auto id = roles->Find(from.peer.user_id);
  if (!id) return Identity{"unknown key " + from.peer.user_id.substr(0, 8), 0, true};
  return *id;
}

std::optional<std::string> Daemon::Impl::JobOwner(p::JobId job) {
  auto it = jobs.find(job);
  if (it != jobs.end()) return it->second.spec.owner.value_or("local");
  auto rec = store->GetJob(job);
  if (!rec.ok()) return std::nullopt;
  auto spec = p::DecodeAs<p::SubmitJob>(rec->spec_json);
  return spec.ok() ? std::optional<std::string>(spec->owner.value_or("local")) : std::nullopt;
}

bool IsRouteOf(const std::string& route, const std::string& agent) {
  return route == agent || (route.size() > agent.size() + 1 && route.compare(0, agent.size(), agent) == 0 &&
                            route[agent.size()] == '#');
}

std::optional<p::Message> Daemon::Impl::Authorize(const p::ReplyTo& from, p::Message& msg) {
  Identity who = Caller(from);
  std::string type(p::TypeName(msg));
  auto refuse = [&](const std::string& why) -> std::optional<p::Message> {
    metrics.Inc("aryl_refused_requests_total", "type=\"" + type + "\"");
    spdlog::warn("refused {} from key '{}'{}: {}", type, who.name,
                 from.peer.address.empty() ? "" : " at " + from.peer.address, why);
    return Err(Status::PermissionDenied(type + " refused for key '" + who.name + "': " + why));
  };
  auto need = [&](unsigned roles, const char* what) -> std::optional<p::Message> {
    if (who.roles & roles) return std::nullopt;
    return refuse(std::string("needs the ") + what + " role");
  };
  // An agent key may speak only for the agent id that is its name.
  auto as_agent = [&](const std::string& agent_id) -> std::optional<p::Message> {
    if (auto r = need(kAgentRole, "agent")) return r;
    if (who.agent_bound && agent_id != who.name)
      return refuse("this key is agent '" + who.name + "', not '" + agent_id + "'");
    return std::nullopt;
  };
  // Reports about a job come only from an agent that runs one of its workers.
  auto runs_job = [&](p::JobId job) -> std::optional<p::Message> {
    if (auto r = need(kAgentRole, "agent")) return r;
    if (!who.agent_bound) return std::nullopt;
    auto it = jobs.find(job);
    if (it == jobs.end()) return std::nullopt;  // ignored by the handler anyway
    for (const auto& [id, w] : it->second.workers)
      if (w.agent == who.name) return std::nullopt;
    return refuse("agent '" + who.name + "' runs no worker of job " + std::to_string(job));
  };
  auto owns = [&](p::JobId job) -> std::optional<p::Message> {
    if (auto r = need(kUserRole | kOperatorRole, "user")) return r;
    if (who.Has(kOperatorRole)) return std::nullopt;
    auto owner = JobOwner(job);
    if (owner && *owner != who.name)
      return refuse("job " + std::to_string(job) + " belongs to '" + *owner + "'");
    return std::nullopt;
  };
  return std::visit(
      [&](auto& m) -> std::optional<p::Message> {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, p::AgentRegister>) {
          if (auto r = as_agent(m.agent_id)) return r;
          if (m.cluster_id != opt.cluster_id) {
            metrics.Inc("aryl_refused_requests_total", "type=\"" + type + "\"");
            spdlog::warn("refused agent {}: it belongs to cluster '{}', this scheduler runs '{}'", m.agent_id,
                         m.cluster_id, opt.cluster_id);
            return Err(Status::FailedPrecondition("agent '" + m.agent_id + "' is configured for cluster '" +
                                                  m.cluster_id + "' but this scheduler runs cluster '" +
                                                  opt.cluster_id + "' (--cluster-id)"));
          }
          for (const auto& e : m.exited)
            if (auto r = as_agent(e.agent_id)) return r;
          return std::nullopt;
        } else if constexpr (std::is_same_v<T, p::Heartbeat> || std::is_same_v<T, p::WorkerExited>) {
          if (auto r = as_agent(m.agent_id)) return r;
          if constexpr (std::is_same_v<T, p::WorkerExited>) {
            auto it = jobs.find(m.job);
            if (who.agent_bound && it != jobs.end()) {
              auto w = it->second.workers.find(m.worker);
              if (w != it->second.workers.end() && w->second.agent != who.name)
                return refuse("worker " + std::to_string(m.worker) + " of job " + std::to_string(m.job) +
                              " runs on '" + w->second.agent + "'");
            }
          }
          return std::nullopt;
        } else if constexpr (std::is_same_v<T, p::ServingReport>) {
          return as_agent(m.agent_id);
        } else if constexpr (std::is_same_v<T, p::JobProgress> || std::is_same_v<T, p::ResizeReport>) {
          return runs_job(m.job);
        } else if constexpr (std::is_same_v<T, p::CheckpointReport>) {
          if (auto r = as_agent(m.agent_id)) return r;
          return runs_job(m.job);
        } else if constexpr (std::is_same_v<T, p::LogReadReply>) {
          return as_agent(m.agent_id);  // and the handler takes it only from the agent asked
        } else if constexpr (std::is_same_v<T, p::DescribeJob> || std::is_same_v<T, p::JobLogs>) {
          return owns(m.job);
        } else if constexpr (std::is_same_v<T, p::ListEvents>) {
          if (m.job != 0) return owns(m.job);
          return need(kUserRole | kOperatorRole, "user");  // the handler keeps a user's rows to their jobs
        } else if constexpr (std::is_same_v<T, p::DescribeNode>) {
          return need(kUserRole | kOperatorRole, "user");
        } else if constexpr (std::is_same_v<T, p::SubmitJob>) {
          if (auto r = need(kUserRole | kOperatorRole, "user")) return r;
          m.owner = who.name;
          m.owner_uid.reset();
          if (who.uid) m.owner_uid = *who.uid;
          return std::nullopt;
        } else if constexpr (std::is_same_v<T, p::JobStatus> || std::is_same_v<T, p::CancelJob> ||
                             std::is_same_v<T, p::WatchJob>) {
          return owns(m.job);
        } else if constexpr (std::is_same_v<T, p::ListJobs> || std::is_same_v<T, p::ListNodes> ||
                             std::is_same_v<T, p::StatusRequest> || std::is_same_v<T, p::ListQueues> ||
                             std::is_same_v<T, p::UsageRequest>) {
          return need(kUserRole | kOperatorRole, "user");
        } else if constexpr (std::is_same_v<T, p::PoolOffer> || std::is_same_v<T, p::PoolReclaim> ||
                             std::is_same_v<T, p::NodeCommand> || std::is_same_v<T, p::ReloadQueues>) {
          return need(kOperatorRole, "operator");
        } else {
          return std::nullopt;  // not a request the scheduler takes: its handler refuses it
        }
      },
      msg);
}

}  // namespace aryl::daemon
