// Clock: the one source of time for code that must also run in virtual time.
//
// The scheduler core never reads a clock (time arrives with events). Drivers do:
// the agent uses SystemClock, the daemon WallClock, the simulator and tests a
// ManualClock.
// Thread safety: SystemClock is thread-safe; ManualClock is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

namespace aryl {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since an arbitrary, fixed epoch; monotonic.
  virtual double NowSeconds() const = 0;
};

// Monotonic wall time (std::chrono::steady_clock).
class SystemClock final : public Clock {
 public:
  double NowSeconds() const override;
  static SystemClock* Default();
};

// Wall time: seconds since the Unix epoch (std::chrono::system_clock), for
// what is stored and shown as a date (the daemon's records). Not monotonic.
class WallClock final : public Clock {
 public:
  double NowSeconds() const override;
  static WallClock* Default();
};

// Time that moves only when told to.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(double start = 0.0) : now_(start) {}
  double NowSeconds() const override { return now_.load(); }
  void Set(double t) { now_.store(t); }
  void Advance(double dt) { now_.store(now_.load() + dt); }

 private:
  std::atomic<double> now_;
};

}  // namespace aryl
