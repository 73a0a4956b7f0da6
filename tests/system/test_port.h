// FreePort: a TCP port for a test's listener that no concurrent test takes.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <system_error>

#include "aryl/port_range.h"

namespace aryl::livetest {

namespace fs = std::filesystem;

// A port for a test's scheduler or HTTP endpoint: below the kernel's
// ephemeral range (32768-60999) and the schedulers' MASTER_PORT range
// (20000-32767), so that no other test's outgoing connection or bind to port 0
// (an agent's store, a Gloo pair) can take it between this pick and the bind.
// Tests run concurrently (ctest -j) and restart their schedulers on the same
// port, so a port that is free now may be another test's between its
// restarts: each pick holds an flock(2) on /tmp/aryl-test-ports/PORT until
// this process exits (the descriptor is never closed), and a port whose lock
// another process (or an earlier pick here) holds is skipped.
inline int FreePort() {
  static std::mt19937_64 rng{std::random_device{}()};
  const fs::path locks = fs::temp_directory_path() / "aryl-test-ports";
  std::error_code ec;
  if (fs::create_directory(locks, ec)) fs::permissions(locks, fs::perms::all | fs::perms::sticky_bit, ec);
  auto reserve = [&](int port) {
    const std::string path = (locks / std::to_string(port)).string();
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return true;  // cannot reserve (another user's file): let the bind decide
    (void)::fchmod(fd, 0666);  // past the umask: other users' tests take part too
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;  // held until exit
    ::close(fd);
    return false;
  };
  auto port = PickPort(PortRange{10000, 19999}, rng(), [&](int p) { return !PortBindable(p) || !reserve(p); });
  return port.value_or(10000);
}

}  // namespace aryl::livetest
