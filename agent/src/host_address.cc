#include "host_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

namespace aryl::agent {
namespace {

std::string Dotted(const in_addr& a) {
  char buf[INET_ADDRSTRLEN] = {0};
  return ::inet_ntop(AF_INET, &a, buf, sizeof(buf)) ? std::string(buf) : std::string();
}

// The IPv4 addresses `name` resolves to, in resolver order; the resolver's
// message when it resolves to none.
Result<std::vector<std::string>> ResolveIpv4(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) return Status::NotFound(rc != 0 ? ::gai_strerror(rc) : "no address");
  std::vector<std::string> out;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    std::string a = Dotted(reinterpret_cast<const sockaddr_in*>(ai->ai_addr)->sin_addr);
    if (!a.empty() && std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  }
  ::freeaddrinfo(res);
  if (out.empty()) return Status::NotFound("no IPv4 address");
  return out;
}

// Whether a TCP socket binds to `dotted` (any port): an address of this server.
// The error otherwise ("Cannot assign requested address").
Status Bindable(const std::string& dotted) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (::inet_pton(AF_INET, dotted.c_str(), &sa.sin_addr) != 1) return Status::InvalidArgument("not an IPv4 address");
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IoError(std::string("socket: ") + std::strerror(errno));
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::InvalidArgument(std::strerror(err));
  return Status::Ok();
}

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

// The local IPv4 address of the interface that routes to a tcp://host:port
// scheduler; none for ipc:// or a name that does not resolve.
std::optional<std::string> RouteAddressTo(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) != 0) return std::nullopt;
  std::string hostport = endpoint.substr(6);
  auto colon = hostport.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string host = hostport.substr(0, colon), port = hostport.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || !res) return std::nullopt;
  std::optional<std::string> out;
  for (addrinfo* ai = res; ai && !out; ai = ai->ai_next) {
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 && local.sin_addr.s_addr != 0) {
      out = Dotted(local.sin_addr);
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return out;
}

// The first non-loopback IPv4 address of an interface that is up, with its name.
std::optional<std::pair<std::string, std::string>> InterfaceAddress() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::pair<std::string, std::string>> out;
  for (ifaddrs* i = list; i && !out; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    std::string a = Dotted(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr);
    if (!a.empty() && !IsLoopbackAddress(a) && Bindable(a).ok()) out = std::make_pair(a, std::string(i->ifa_name));
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace

bool IsLoopbackAddress(const std::string& dotted) {
  in_addr a{};
  return ::inet_pton(AF_INET, dotted.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

namespace {

// The choice for `given`, before the loopback check.
Result<HostChoice> Choose(const std::string& given, const std::string& scheduler) {
  if (!given.empty()) {
    auto usage = [&](const std::string& why) {
      return Status::InvalidArgument("--host '" + given + "': " + why +
                                     " (give an IPv4 address of this server, or a name that resolves to one)");
    };
    in_addr literal{};
    const bool dotted = ::inet_pton(AF_INET, given.c_str(), &literal) == 1;
    if (!dotted && given.find(':') != std::string::npos) return usage("IPv6 addresses are not supported");
    if (given == "*" || (dotted && literal.s_addr == INADDR_ANY)) return usage("not an address peers can reach");
    std::vector<std::string> candidates;
    if (dotted) {
      candidates = {given};
    } else {
      auto resolved = ResolveIpv4(given);
      if (!resolved.ok()) return usage("does not resolve: " + resolved.status().message());
      candidates = *resolved;
    }
    std::string refused;
    for (const auto& a : candidates) {
      Status s = Bindable(a);
      if (s.ok()) return HostChoice{a, dotted ? "--host" : "--host " + given + " resolved"};
      refused += (refused.empty() ? "" : ", ") + a + ": " + s.message();
    }
    return usage(dotted ? "not an address of this server (" + refused + ")"
                        : "resolves to no address of this server (" + refused + ")");
  }
  if (auto routed = RouteAddressTo(scheduler); routed && Bindable(*routed).ok())
    return HostChoice{*routed, "the address of the interface that routes to the scheduler"};
  const std::string name = HostName();
  std::optional<std::string> loopback;
  if (!name.empty()) {
    if (auto resolved = ResolveIpv4(name); resolved.ok()) {
      for (const auto& a : *resolved) {
        if (!Bindable(a).ok()) continue;
        if (!IsLoopbackAddress(a)) return HostChoice{a, "the address of the host name " + name};
        if (!loopback) loopback = a;
      }
    }
  }
  if (auto iface = InterfaceAddress()) {
    return HostChoice{iface->first, "the address of interface " + iface->second +
                                        (loopback ? "; the host name " + name + " resolves to " + *loopback +
                                                        ", a loopback address"
                                                  : "")};
  }
  if (loopback) return HostChoice{*loopback, "the address of the host name " + name + " (loopback: this server only)"};
  return HostChoice{"127.0.0.1", "no other address found (loopback: this server only)"};
}

}  // namespace

Result<HostChoice> ChooseHost(const std::string& given, const std::string& scheduler) {
  ARYL_ASSIGN_OR_RETURN(HostChoice c, Choose(given, scheduler));
  // A tcp:// scheduler on another server means peers on other servers.
  std::optional<std::string> route = RouteAddressTo(scheduler);
  if (IsLoopbackAddress(c.address) && route && !IsLoopbackAddress(*route)) {
    c.warning = "--host " + c.address + " is a loopback address, but the scheduler " + scheduler +
                " is reached from " + *route + ": workers on other servers cannot reach this one's store or "
                "its workers; give --host " + *route + " (docs/operations.md, \"Two or more servers: --host\")";
  }
  return c;
}

}  // namespace aryl::agent
