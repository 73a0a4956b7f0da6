#include "run_as.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

namespace aryl::agent {

namespace {

Result<Account> FromPasswd(const struct passwd& pw, const std::string& what) {
  Account a;
  a.name = pw.pw_name;
  a.home = pw.pw_dir ? pw.pw_dir : "/";
  a.credentials.uid = pw.pw_uid;
  a.credentials.gid = pw.pw_gid;
  int n = 64;
  std::vector<gid_t> groups(n);
  if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
    groups.resize(n);
    if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0)
      return Status::IoError("groups of " + what + ": too many");
  }
  groups.resize(n);
  a.credentials.groups = groups;
  return a;
}

}  // namespace

Result<Account> ResolveAccount(const std::string& name) {
  struct passwd pw{};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  int rc = ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0) return Status::IoError("look up account '" + name + "': " + std::strerror(rc));
  if (!found) return Status::NotFound("no local account '" + name + "'");
  return FromPasswd(pw, "account '" + name + "'");
}

Result<Account> ResolveAccount(uid_t uid) {
  struct passwd pw{};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  int rc = ::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found);
  if (rc != 0) return Status::IoError("look up uid " + std::to_string(uid) + ": " + std::strerror(rc));
  if (!found) return Status::NotFound("no local account has uid " + std::to_string(uid));
  return FromPasswd(pw, "uid " + std::to_string(uid));
}

Result<UserMap> UserMap::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("--run-as '" + path + "': cannot open: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str(), path);
}

Result<UserMap> UserMap::Parse(std::string_view text, const std::string& origin) {
  UserMap m;
  m.origin_ = origin;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string owner, account, extra;
    if (!(fields >> owner)) continue;
    std::string where = origin + ":" + std::to_string(line_no);
    if (!(fields >> account) || (fields >> extra))
      return Status::InvalidArgument(where + ": expected '<owner> <account>', got '" + line + "'");
    if (m.by_owner_.count(owner) || (owner == "*" && m.fallback_))
      return Status::InvalidArgument(where + ": owner '" + owner + "' mapped twice");
    auto a = ResolveAccount(account);
    if (!a.ok()) return a.status().WithContext(where);
    if (a->credentials.uid == 0)
      return Status::InvalidArgument(where + ": account '" + account + "' is root; workers never run as root here");
    if (owner == "*") m.fallback_ = *a;
    else m.by_owner_[owner] = *a;
    if (end == text.size()) break;
  }
  return m;
}

Result<Account> UserMap::Lookup(const std::string& owner) const {
  if (auto it = by_owner_.find(owner); it != by_owner_.end()) return it->second;
  if (fallback_) return *fallback_;
  return Status::PermissionDenied("owner '" + owner + "' has no local account in the agent's --run-as map (" +
                                  origin_ + ")");
}

Result<std::optional<Account>> WorkerAccount(const UserMap* map, const std::optional<std::string>& owner,
                                             const std::optional<std::int64_t>& owner_uid) {
  if (map) {
    ARYL_ASSIGN_OR_RETURN(Account a, map->Lookup(owner.value_or("local")));
    return std::optional<Account>(a);
  }
  // root's jobs may run with any account's rights, as may the agent's own.
  if (!owner_uid || *owner_uid == 0 || static_cast<uid_t>(*owner_uid) == ::geteuid())
    return std::optional<Account>();
  if (::geteuid() != 0)
    return Status::PermissionDenied("job of uid " + std::to_string(*owner_uid) + " ('" + owner.value_or("?") +
                                    "'): this agent runs as uid " + std::to_string(::geteuid()) +
                                    " and cannot start workers as another account (run aryl-agent as root)");
  ARYL_ASSIGN_OR_RETURN(Account a, ResolveAccount(static_cast<uid_t>(*owner_uid)));
  return std::optional<Account>(a);
}

}  // namespace aryl::agent
