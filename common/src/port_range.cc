#include "aryl/port_range.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <fstream>

namespace aryl {
namespace {

bool ParseInt(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

Result<PortRange> ParsePortRange(std::string_view text) {
  auto dash = text.find('-');
  PortRange r;
  if (dash == std::string_view::npos || !ParseInt(text.substr(0, dash), &r.lo) ||
      !ParseInt(text.substr(dash + 1), &r.hi))
    return Status::InvalidArgument("expected LO-HI, e.g. 20000-32767");
  if (r.lo < 1024 || r.hi > 65535 || r.lo > r.hi)
    return Status::InvalidArgument("need 1024 <= LO <= HI <= 65535");
  return r;
}

std::optional<PortRange> EphemeralPortRange(const std::string& path) {
  std::ifstream in(path);
  PortRange r;
  if (!(in >> r.lo >> r.hi) || r.lo > r.hi) return std::nullopt;
  return r;
}

std::optional<int> PickPort(const PortRange& range, std::uint64_t salt, const std::function<bool(int)>& taken) {
  // splitmix64's finaliser: neighbouring salts (job 1, job 2) start far apart.
  std::uint64_t h = salt + 0x9E3779B97F4A7C15ull;
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  const int n = range.size();
  const int start = int(h % std::uint64_t(n));
  for (int i = 0; i < n; ++i) {
    int port = range.lo + (start + i) % n;
    if (!taken(port)) return port;
  }
  return std::nullopt;
}

bool PortBindable(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // cannot tell: do not refuse the port for it
  int one = 1;
  // As the listeners do: a port in TIME_WAIT from an earlier start is usable.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace aryl
