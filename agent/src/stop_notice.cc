#include "stop_notice.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

namespace aryl::agent {

namespace fs = std::filesystem;

std::string StopNotice::ToJson() const {
  nlohmann::json j = {{"deadline", std::round(deadline * 1000) / 1000},
                      {"grace_seconds", grace_seconds},
                      {"reason", reason},
                      {"job", job},
                      {"worker", worker}};
  return j.dump() + "\n";
}

Status StopNotices::Prepare() const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Status::IoError("stop notices: cannot create '" + dir_.string() + "': " + ec.message());
  if (::chmod(dir_.c_str(), 0711) != 0)
    return Status::IoError("stop notices: chmod 0711 '" + dir_.string() + "': " + std::strerror(errno));
  return Status::Ok();
}

std::string StopNotices::PathOf(std::int64_t job, std::int64_t worker) const {
  return (dir_ / ("job-" + std::to_string(job) + "-worker-" + std::to_string(worker))).string();
}

Status StopNotices::Write(const StopNotice& n, std::optional<std::pair<uid_t, gid_t>> owner) {
  if (auto it = written_.find({n.job, n.worker}); it != written_.end() && it->second <= n.deadline)
    return Status::Ok();
  const std::string path = PathOf(n.job, n.worker);
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::IoError("stop notice '" + tmp + "': " + std::strerror(errno));
  const std::string text = n.ToJson();
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int err = errno;
  if (ok && owner && ::fchown(fd, owner->first, owner->second) != 0) {
    ok = false;
    err = errno;
  }
  ::close(fd);
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return Status::IoError("stop notice '" + path + "': " + std::strerror(err));
  }
  written_[{n.job, n.worker}] = n.deadline;
  return Status::Ok();
}

Status StopNotices::WriteFor(std::int64_t job, std::int64_t worker, double grace_seconds, const std::string& reason,
                             std::optional<std::pair<uid_t, gid_t>> owner) {
  const double unix_now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return Write({.job = job, .worker = worker, .deadline = unix_now + grace_seconds, .grace_seconds = grace_seconds,
                .reason = reason},
               owner);
}

void StopNotices::Remove(std::int64_t job, std::int64_t worker) {
  written_.erase({job, worker});
  ::unlink(PathOf(job, worker).c_str());
}

}  // namespace aryl::agent
