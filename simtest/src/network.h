// The simulated world's time, randomness and messages (live_sim.h).
//
// Every source of nondeterminism in a run goes through one Network: one RNG
// seeded from the run's seed, one virtual clock, and one event queue ordered
// by (time, insertion). Timers (At, After) and messages (Send) are events on
// that queue; with kFaultNetwork a message is delayed by up to 1 s and 5% of
// them are delivered twice (the copy up to 0.5 s later), so messages are
// reordered too. The same calls in the same order give the same run, bit for
// bit: a caller that draws a random number or schedules an event in another
// order changes every later event.
//
// Single-threaded; not copyable (events capture pointers to the world).
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <random>
#include <string>
#include <vector>

namespace aryl::simtest {

// A message's longest delay, a duplicate's included (1 s + 0.5 s, rounded up).
inline constexpr double kMaxDelay = 1.6;

class Network {
 public:
  Network(std::uint64_t seed, bool network_faults, bool trace);
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  double now() const { return now_; }

  // ---- randomness: the run's one RNG
  std::uint64_t Next() { return rng_(); }
  double Uniform(double a, double b) { return a + (b - a) * (double(rng_() >> 11) * 0x1.0p-53); }
  bool Chance(double p) { return Uniform(0, 1) < p; }

  // ---- timers and messages
  void At(double t, std::function<void()> fn) { queue_.push({t, seq_++, std::move(fn)}); }
  void After(double dt, std::function<void()> fn) { At(now_ + dt, std::move(fn)); }
  // Delivers a message after the network's delay, with faults maybe twice.
  void Send(std::function<void()> deliver);

  // Runs the next event, advancing the clock to it; false when none is left
  // at or before `horizon`.
  bool RunNext(double horizon);

  // ---- the trace (Options::trace): one line per event, stamped with the time
  void Trace(const std::string& line);
  std::vector<std::string> TakeTrace() { return std::move(trace_); }

 private:
  struct Event {
    double t;
    std::uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };

  const bool faults_;
  const bool tracing_;
  std::mt19937_64 rng_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  std::uint64_t seq_ = 0;
  double now_ = 0;
  std::vector<std::string> trace_;
};

}  // namespace aryl::simtest
