// A range of TCP ports a site lets Aryl's jobs listen on (MASTER_PORT, the
// runtime's job store), and the choice of one port in it for a job.
//
// The default range, 20000-32767, lies below Linux's default ephemeral range
// (32768-60999): a port the kernel hands to an outgoing connection or to a
// bind to port 0 is never one Aryl chose for a job, so a job's rank 0 does not
// find its MASTER_PORT taken by some other process's connection.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "aryl/result.h"

namespace aryl {

struct PortRange {
  int lo = 20000;
  int hi = 32767;  // inclusive
  int size() const { return hi - lo + 1; }
  bool Contains(int port) const { return port >= lo && port <= hi; }
  bool Overlaps(const PortRange& o) const { return lo <= o.hi && o.lo <= hi; }
  std::string ToString() const { return std::to_string(lo) + "-" + std::to_string(hi); }
  bool operator==(const PortRange&) const = default;
};

// "LO-HI" with 1024 <= LO <= HI <= 65535; the error states the rule (the
// caller names the flag or field and the text).
Result<PortRange> ParsePortRange(std::string_view text);

// The kernel's ephemeral range (net.ipv4.ip_local_port_range), if `path` reads
// as two numbers.
std::optional<PortRange> EphemeralPortRange(const std::string& path = "/proc/sys/net/ipv4/ip_local_port_range");

// The first port of `range`, from a start derived from `salt` and wrapping
// around, for which `taken` is false; nullopt when every port is taken. The
// salt spreads the jobs of different clusters (and of tests running side by
// side) over the range, so they rarely try the same port first.
std::optional<int> PickPort(const PortRange& range, std::uint64_t salt, const std::function<bool(int)>& taken);

// Whether a TCP listener could bind `port` on every IPv4 address of this
// machine right now (what torch's TCPStore and the runtime's store do).
bool PortBindable(int port);

}  // namespace aryl
