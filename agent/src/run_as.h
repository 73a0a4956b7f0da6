// Run-as-user (docs/security.md, "Workers and local accounts"): an agent that
// runs as root starts each job's workers as the local account that the job's
// owner (the submitting key's name, StartWorkers.owner) maps to, so one
// user's job cannot read another's files, signal its processes or speak for
// its workers on the worker channel.
//
// The map is a file of "<owner> <account>" lines; '#' starts a comment; the
// owner "*" maps every owner not listed. Accounts are resolved when the file
// is loaded (a missing account is an error naming file:line); root (uid 0) is
// never a target. An owner with no mapping is refused: its workers do not
// start and the job sees the reason, as for an exec error.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/agent/process.h"
#include "aryl/result.h"

namespace aryl::agent {

struct Account {
  std::string name;
  std::string home;
  Credentials credentials;  // uid, primary gid, supplementary groups
};

class UserMap {
 public:
  static Result<UserMap> Load(const std::string& path);
  // `origin` names the text in errors ("file:line").
  static Result<UserMap> Parse(std::string_view text, const std::string& origin);

  // The account for `owner`, or PermissionDenied naming the owner and the map.
  Result<Account> Lookup(const std::string& owner) const;
  size_t size() const { return by_owner_.size() + (fallback_ ? 1 : 0); }

 private:
  std::string origin_;
  std::map<std::string, Account> by_owner_;
  std::optional<Account> fallback_;
};

// The local account `name` with its groups (getpwnam_r, getgrouplist).
Result<Account> ResolveAccount(const std::string& name);
// The local account with uid `uid`, with its groups (getpwuid_r).
Result<Account> ResolveAccount(uid_t uid);

// The account a job's workers run as; nullopt: the agent's own. With a map
// (--run-as), the one mapped to the job's `owner` ("local" when unnamed).
// Without one, a job whose owner the scheduler knows by uid (keyless ipc://,
// `owner_uid`) runs as that uid: a root agent switches to it; any other agent
// runs only its own account's and root's jobs (another account's would gain
// the agent's rights) and refuses the rest with PermissionDenied.
Result<std::optional<Account>> WorkerAccount(const UserMap* map, const std::optional<std::string>& owner,
                                             const std::optional<std::int64_t>& owner_uid);

}  // namespace aryl::agent
