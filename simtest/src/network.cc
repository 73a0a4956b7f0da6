#include "network.h"

#include <cstdio>

namespace aryl::simtest {

Network::Network(std::uint64_t seed, bool network_faults, bool trace)
    : faults_(network_faults), tracing_(trace), rng_(seed * 0x9E3779B97F4A7C15ull + 1) {}

// A message's delay, with faults duplicated (the copy later) and reordered (a
// wide spread). Both copies stay within kMaxDelay.
void Network::Send(std::function<void()> deliver) {
  double d = faults_ ? Uniform(0.001, Chance(0.1) ? 1.0 : 0.2) : 0.002;
  After(d, deliver);
  if (faults_ && Chance(0.05)) After(d + Uniform(0, 0.5), deliver);
}

bool Network::RunNext(double horizon) {
  if (queue_.empty()) return false;
  Event ev = queue_.top();
  queue_.pop();
  if (ev.t > horizon) return false;
  now_ = ev.t;
  ev.fn();
  return true;
}

void Network::Trace(const std::string& line) {
  if (!tracing_) return;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%10.3f ", now_);
  trace_.push_back(buf + line);
}

}  // namespace aryl::simtest
