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

std::string RedactedForJournal(const protocol::SubmitJob& m) {
  protocol::SubmitJob copy = m;
  for (auto& [name, value] : copy.env) value = "<redacted>";
  return protocol::Encode(copy);
}

}  // namespace aryl::daemon
