#include "secrets.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace aryl::daemon {

Status PrepareStateFile(const std::string& path) {
  if (path.empty() || path == ":memory:") return Status::Ok();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError("create state file '" + path + "': " + std::strerror(errno));
  ::close(fd);
  return RestrictStateFiles(path);
}

Status RestrictStateFiles(const std::string& path) {
  if (path.empty() || path == ":memory:") return Status::Ok();
  for (const std::string& f : {path, path + "-wal", path + "-shm", path + "-journal"}) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) continue;
    if ((st.st_mode & 077) != 0 && ::chmod(f.c_str(), 0600) != 0)
      return Status::IoError("chmod 600 '" + f + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

std::string SubmitSummary(const protocol::SubmitJob& m) {
  std::string s;
  if (m.workers) s = std::to_string(*m.workers) + (*m.workers == 1 ? " worker" : " workers");
  else s = std::to_string(m.min_workers.value_or(1)) + "-" + std::to_string(m.max_workers.value_or(1)) + " workers";
  s += m.elastic ? " (" + *m.elastic + ")" : "";
  s += ", gpu " + (m.gpu_type.empty() ? std::string("any") : m.gpu_type);
  if (!m.model.empty()) s += ", model " + m.model;
  if (m.total_work > 0) s += ", " + std::to_string(static_cast<long long>(m.total_work)) + " steps";
  std::string argv;
  for (const auto& a : m.argv) argv += (argv.empty() ? "" : " ") + a;
  if (argv.size() > 512) argv = argv.substr(0, 509) + "...";
  s += ", argv: " + argv;
  if (!m.env.empty()) {
    s += ", env:";
    for (const auto& [name, value] : m.env) s += " " + name;
  }
  if (!m.cwd.empty()) s += ", cwd " + m.cwd;
  if (!m.checkpoint_dir.empty()) s += ", checkpoints " + m.checkpoint_dir;
  if (m.max_restarts) s += ", max restarts " + std::to_string(*m.max_restarts);
  s += ", owner " + m.owner.value_or("local");
  return s;
}

}  // namespace aryl::daemon
