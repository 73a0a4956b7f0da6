#include "aryl/protocol/env_policy.h"

#include <sstream>

namespace aryl::protocol {
namespace {

bool Matches(const std::string& pattern, const std::string& name) {
  if (!pattern.empty() && pattern.back() == '*')
    return name.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0;
  return pattern == name;
}

}  // namespace

std::vector<std::string> EnvPolicy::DefaultDeny() {
  return {// the dynamic loader (glibc, macOS) and glibc's other code-loading hooks
          "LD_*", "DYLD_*", "GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCPATH", "MALLOC_*", "NLSPATH",
          "RESOLV_HOST_CONF", "RES_OPTIONS", "GLIBC_TUNABLES",
          // interpreters that run or load code named by the environment
          "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONINSPECT",
          "PERL5LIB", "PERLLIB", "PERL5OPT", "RUBYLIB", "RUBYOPT", "NODE_OPTIONS", "NODE_PATH", "JAVA_TOOL_OPTIONS",
          "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "BASH_ENV", "ENV", "BASH_FUNC_*",
          "LUA_INIT*", "LUA_PATH*", "LUA_CPATH*", "TCLLIBPATH", "OPENSSL_CONF", "OPENSSL_ENGINES",
          // shells: xtrace prints PS4, which bash expands (runs $(...)) before every command
          "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH",
          // Python's hooks that import a module named by the environment
          "PYTHONWARNINGS", "PYTHONBREAKPOINT", "PYTHONUSERBASE",
          // programs run by name: BROWSER (webbrowser, via PYTHONWARNINGS), editors, pagers
          "BROWSER", "EDITOR", "VISUAL", "PAGER", "GIT_*", "PERL5DB", "PERLDB_OPTS",
          // where programs are found: a job's PATH would choose what its own argv[0] runs
          "PATH"};
}

std::vector<std::string> EnvPolicy::ParseList(const std::string& comma_separated) {
  std::vector<std::string> out;
  std::stringstream ss(comma_separated);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

EnvPolicy EnvPolicy::FromFlags(const std::string& deny, const std::string& allow) {
  EnvPolicy policy;
  if (deny == "none") policy.deny.clear();
  else if (!deny.empty()) policy.deny = ParseList(deny);
  policy.allow = ParseList(allow);
  return policy;
}

bool EnvPolicy::Allows(const std::string& name) const {
  for (const auto& p : allow)
    if (Matches(p, name)) return true;
  for (const auto& p : deny)
    if (Matches(p, name)) return false;
  return true;
}

Status EnvPolicy::Check(const std::map<std::string, std::string>& env) const {
  for (const auto& [name, value] : env)
    if (!Allows(name))
      return Status::InvalidArgument("field 'env': variable '" + name +
                                     "' is not allowed (it can inject code into the job's processes; "
                                     "see docs/security.md, --env-allow)");
  return Status::Ok();
}

}  // namespace aryl::protocol
