// Who may ask the scheduler for what (docs/security.md).
//
// With CURVE every connection carries its client's public key (protocol::Peer::
// user_id, checked by the ZAP handler against the union of the lists below).
// KeyRoles maps that key to an Identity: a name and a set of roles.
//  1. Agents (--curve-agents): the key's name is the one agent id it may use.
//     Registration, heartbeats and worker/job reports are accepted only from an
//     agent key, for its own id, and reports only about workers it runs.
//  2. Users (--curve-users): submit jobs (the job's owner is the key's name), and
//     list, watch, query, describe, read the logs of and cancel their own jobs;
//     see nodes (describe node: their own jobs' workers only), the summary, and
//     the event journal's cluster rows and their own jobs' rows.
//  3. Operators (--curve-operators): everything a user may do, for every job,
//     pool offer / reclaim and nodes drain / resume / remove. Operators do not
//     act as agents.
//  4. --curve-allow (the older single list): every role, agent ids not bound to
//     keys. Refused unless --insecure (then the scheduler warns at start).
//  An agent key may not also be in the user or operator list.
// Without CURVE on an ipc:// endpoint (the default) local callers are told apart
// by their uid (SO_PEERCRED, protocol::Peer::uid): root and the scheduler's own
// account have every role (agent ids not bound); every other account is a user
// named by its login name, and its jobs carry its uid (SubmitJob::owner_uid) so
// that a root agent runs them as that account.
// Without CURVE on tcp:// (--insecure only) or inproc:// (in-process tests)
// every caller is "local" with every role and agent ids are not bound.
//
// A list is a directory of NAME.pub files (aryl keygen) or a file of
// "NAME KEY" lines ('#' comments). A key in several lists has every role it is
// given.
//
// Thread safety: a loaded KeyRoles is immutable.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "aryl/result.h"

namespace aryl::daemon {

enum Role : unsigned { kAgentRole = 1, kUserRole = 2, kOperatorRole = 4 };

struct Identity {
  std::string name = "local";
  unsigned roles = kAgentRole | kUserRole | kOperatorRole;
  bool agent_bound = false;  // an agent id must equal `name`
  std::optional<std::uint32_t> uid{};  // told apart by uid (keyless ipc://)
  bool Has(unsigned role) const { return (roles & role) != 0; }
};

struct RoleLists {
  std::string agents, users, operators;  // paths; empty: none
  std::string allow;                     // --curve-allow: every role, unbound
};

class KeyRoles {
 public:
  static Result<KeyRoles> Load(const RoleLists& lists);
  // Every key of every list (the ZAP allow-list).
  std::set<std::string> Keys() const;
  // The identity of a CURVE key; nullopt for a key in no list (cannot happen
  // behind the ZAP handler, but is refused all the same).
  std::optional<Identity> Find(const std::string& key) const;
  bool legacy() const { return legacy_; }

 private:
  std::map<std::string, Identity> by_key_;
  bool legacy_ = false;
};

// The identity of a local caller with uid `uid` on a keyless ipc:// endpoint
// (see above); `self` is the scheduler's own uid.
Identity LocalIdentity(std::uint32_t uid, std::uint32_t self);

// Keyless ipc://: the socket's directory exists before the bind (0755 when
// created), and the bound socket is 0666.
Status PrepareIpcSocketDir(const std::string& endpoint);
Status OpenIpcSocket(const std::string& endpoint);

// Whether a ZeroMQ endpoint only accepts connections from this host
// (127.0.0.0/8, ::1, localhost, ipc://, inproc://).
bool IsLocalEndpoint(const std::string& endpoint);

// Whether a DEALER routing id belongs to `agent`: the id itself, or
// "<agent>#<nonce>" (agents add a random nonce under CURVE so that nobody who
// merely knows the agent id can take over its connection and its pushes).
bool IsRouteOf(const std::string& route, const std::string& agent);

}  // namespace aryl::daemon
