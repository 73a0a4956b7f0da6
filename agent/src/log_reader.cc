#include "log_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace aryl::agent {

namespace p = aryl::protocol;

std::string WorkerLogPath(const std::string& log_dir, p::JobId job, p::WorkerId worker, const std::string& stream) {
  return (std::filesystem::path(log_dir) / ("job-" + std::to_string(job)) /
          ("worker-" + std::to_string(worker) + (stream == "stderr" ? ".err" : ".out")))
      .string();
}

p::LogReadReply ReadWorkerLog(const std::string& log_dir, const std::string& agent_id, const p::LogRead& m) {
  p::LogReadReply r;
  r.request = m.request;
  r.agent_id = agent_id;
  r.offset = m.offset;
  auto fail = [&](Status::Code code, const std::string& why) {
    r.error_code = code;
    r.error = why;
    return r;
  };
  if (Status v = m.Validate(); !v.ok()) return fail(Status::Code::kInvalidArgument, v.message());
  std::string what = "the " + m.stream + " log of job " + std::to_string(m.job) + " worker " + std::to_string(m.worker);
  std::string path = WorkerLogPath(log_dir, m.job, m.worker, m.stream);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return fail(Status::Code::kNotFound, what + " is gone (" + path + " no longer exists)");
    return fail(Status::Code::kIoError, "cannot open " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(Status::Code::kIoError, path + " is not a regular file");
  }
  r.size = st.st_size;
  if (m.offset > r.size) {
    ::close(fd);
    return fail(Status::Code::kOutOfRange, "offset " + std::to_string(m.offset) + " is past the end of " + what +
                                               " (" + std::to_string(r.size) + " bytes; was it truncated?)");
  }
  std::size_t want = static_cast<std::size_t>(std::min<std::int64_t>(m.max_bytes, r.size - m.offset));
  r.data.data.resize(want);
  std::size_t got = 0;
  while (got < want) {
    ssize_t n = ::pread(fd, r.data.data.data() + got, want - got, static_cast<off_t>(m.offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  r.data.data.resize(got);
  return r;
}

}  // namespace aryl::agent
