#include "agent_security.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "aryl/protocol/env_policy.h"
#include "aryl/protocol/store.h"

namespace aryl::agent {
namespace fs = std::filesystem;

Status MakePrivateDir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("create directory '" + dir.string() + "': " + ec.message());
  if (::chmod(dir.c_str(), 0700) != 0)
    return Status::IoError("chmod 700 '" + dir.string() + "': " + std::strerror(errno));
  return Status::Ok();
}

Result<fs::path> WorkerSocketPath(const fs::path& log_dir, const std::string& id, bool shared) {
  std::string name = ".agent-";
  for (char c : id) name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  fs::path dir = fs::absolute(log_dir) / name;
  // sun_path holds 107 characters.
  if (shared || (dir / "worker.sock").string().size() > 100) {
    std::string tmpl = (fs::temp_directory_path() / "aryl-agent-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) return Status::IoError("mkdtemp " + tmpl + ": " + std::strerror(errno));
    dir = tmpl;
  }
  ARYL_RETURN_IF_ERROR(MakePrivateDir(dir));
  return dir / "worker.sock";
}

Status MakeSocketReachable(const fs::path& socket) {
  if (::chmod(socket.parent_path().c_str(), 0711) != 0)
    return Status::IoError("chmod 711 '" + socket.parent_path().string() + "': " + std::strerror(errno));
  if (::chmod(socket.c_str(), 0666) != 0)
    return Status::IoError("chmod 666 '" + socket.string() + "': " + std::strerror(errno));
  return Status::Ok();
}

Result<std::string> AgentRoute(const std::string& id) {
  ARYL_ASSIGN_OR_RETURN(std::string random, protocol::NewStoreKey());
  return id + "#" + random.substr(0, 16);
}

std::function<bool(const std::string&)> WorkerEnvFilter(const std::string& list) {
  if (list == "all") return nullptr;
  protocol::EnvPolicy keep;
  keep.deny = {"*"};
  keep.allow = protocol::EnvPolicy::ParseList(list.empty() ? kDefaultWorkerEnv : list);
  return [keep](const std::string& name) { return keep.Allows(name); };
}

Status CheckJobEnv(const std::map<std::string, std::string>& env, const std::string& deny,
                   const std::string& allow) {
  return protocol::EnvPolicy::FromFlags(deny, allow).Check(env);
}

}  // namespace aryl::agent
