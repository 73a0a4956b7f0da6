// Netns: a real network on one machine for the live tests. Each host is a
// Linux network namespace with its own address on a bridge (a veth pair per
// host); the scheduler listens on the bridge's address in the test's own
// namespace. Cut(i) takes host i's link down (a partition: it reaches neither
// the scheduler nor the other hosts), Heal(i) brings it back.
//
//   bridge aryl<tag> 10.<a>.<b>.1/24  (the scheduler's address)
//     veth aryl<tag>h<i>  <->  eth0 in netns aryl<tag>n<i>, 10.<a>.<b>.<10+i>/24
//
// Needs root (CAP_NET_ADMIN) and the `ip` command; Unavailable() says why a
// test cannot run here, and the tests skip with that reason. Every command is
// bounded (`timeout 10`); the destructor removes the namespaces and the bridge.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace aryl::livetest {

class Netns {
 public:
  // Why namespaces cannot be used here, or nullopt when they can.
  static std::optional<std::string> Unavailable() {
    if (::geteuid() != 0) return "network namespaces need root (CAP_NET_ADMIN); this test runs as uid " +
                                 std::to_string(::geteuid());
    if (std::system("command -v ip >/dev/null 2>&1") != 0) return "the `ip` command (iproute2) is not installed";
    std::string probe = "aryl-probe-" + std::to_string(::getpid());
    if (Run("ip netns add " + probe) != 0) return "`ip netns add` is not permitted here (no CAP_SYS_ADMIN?)";
    Run("ip netns del " + probe);
    return std::nullopt;
  }

  // `hosts` namespaces on a fresh bridge. ok() is false when a command failed.
  explicit Netns(int hosts) {
    unsigned tag = static_cast<unsigned>(::getpid()) % 100000;
    tag_ = std::to_string(tag);
    subnet_ = "10." + std::to_string(100 + (tag / 250) % 150) + "." + std::to_string(tag % 250);
    ok_ = Run("ip link add " + Bridge() + " type bridge") == 0 &&
          Run("ip addr add " + subnet_ + ".1/24 dev " + Bridge()) == 0 && Run("ip link set " + Bridge() + " up") == 0;
    for (int i = 0; i < hosts && ok_; ++i) {
      std::string ns = Name(i), h = HostSide(i);
      names_.push_back(ns);
      ok_ = Run("ip netns add " + ns) == 0 && Run("ip link add " + h + " type veth peer name eth0 netns " + ns) == 0 &&
            Run("ip link set " + h + " master " + Bridge()) == 0 && Run("ip link set " + h + " up") == 0 &&
            Run("ip -n " + ns + " addr add " + Address(i) + "/24 dev eth0") == 0 &&
            Run("ip -n " + ns + " link set eth0 up") == 0 && Run("ip -n " + ns + " link set lo up") == 0 &&
            Run("ip -n " + ns + " route add default via " + SchedulerAddress()) == 0;
    }
  }
  ~Netns() {
    for (const auto& ns : names_) Run("ip netns del " + ns);
    Run("ip link del " + Bridge());
  }
  Netns(const Netns&) = delete;
  Netns& operator=(const Netns&) = delete;

  bool ok() const { return ok_; }
  std::string SchedulerAddress() const { return subnet_ + ".1"; }
  std::string Address(int i) const { return subnet_ + "." + std::to_string(10 + i); }
  std::string Name(int i) const { return "aryl" + tag_ + "n" + std::to_string(i); }
  // argv prefix that runs a program inside host i's namespace.
  std::vector<std::string> Exec(int i) const { return {"ip", "netns", "exec", Name(i)}; }
  bool Cut(int i) { return Run("ip link set " + HostSide(i) + " down") == 0; }
  bool Heal(int i) { return Run("ip link set " + HostSide(i) + " up") == 0; }

 private:
  static int Run(const std::string& cmd) { return std::system(("timeout 10 " + cmd + " >/dev/null 2>&1").c_str()); }
  std::string Bridge() const { return "aryl" + tag_; }
  std::string HostSide(int i) const { return "aryl" + tag_ + "h" + std::to_string(i); }

  std::string tag_, subnet_;
  std::vector<std::string> names_;
  bool ok_ = false;
};

}  // namespace aryl::livetest
