// FailureTally: counts one job's failures (checkpoints that failed) and says
// which of them become journal rows, so that the journal's rate limit drops no
// failure from the record:
//   1. Fail: every failure is counted (total, and pending: not yet in a row).
//      The first one, and the first one `interval` seconds or more after the
//      last row, is due: Fail returns the Row that stands for all the pending
//      failures, itself included, and they are no longer pending.
//   2. Recovered: a success ends a run of failures; those still pending come
//      back as one Row, to be journaled then.
// So the rows' `failures` add up to `total` once each run of failures has
// ended in a success or a due failure. Pure (the caller passes the time);
// not thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace aryl::daemon {

class FailureTally {
 public:
  struct Row {
    std::int64_t failures = 0;    // how many failures the row stands for (>= 1)
    std::int64_t first_step = 0;  // the first of them: its step and time
    double first_time = 0;
    std::int64_t last_step = 0;  // the newest of them: its step and error
    std::string last_error;
  };

  std::optional<Row> Fail(double now, std::int64_t step, const std::string& error,
                          double interval) {
    ++total_;
    if (pending_.failures++ == 0) {
      pending_.first_step = step;
      pending_.first_time = now;
    }
    pending_.last_step = step;
    pending_.last_error = error;
    if (now - last_row_ < interval) return std::nullopt;
    last_row_ = now;
    return Take();
  }

  std::optional<Row> Recovered() {
    if (pending_.failures == 0) return std::nullopt;
    return Take();
  }

  std::int64_t total() const { return total_; }

 private:
  Row Take() {
    Row row = std::move(pending_);
    pending_ = Row{};
    return row;
  }

  std::int64_t total_ = 0;
  Row pending_;
  double last_row_ = -std::numeric_limits<double>::infinity();
};

}  // namespace aryl::daemon
