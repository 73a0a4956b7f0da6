// Progress read from rank 0's stdout, for programs that do not speak to the
// agent (torchrun scripts, plain programs). The one line the agent parses
// (docs/runtime.md, "From torchrun"):
//
//   step=N [loss=X] [step_s=S | steps_per_second=R | steps/s=R | rate=R] ...
//
// step=N is required; `=`, `:` or a space separates a name from its value.
// step_s, the seconds of the step just done, wins over the rate-like fields
// (which may count samples) and is also a measurement: each one goes to a
// StepTimer (aryl/protocol/step_timer.h), so such a job sends the scheduler
// step-time summaries (StepStats) as the runtime does, and the scheduler
// learns its speed. Without step_s the job's speed is unknown to the
// scheduler, which keeps its prior (docs/scheduler.md, "Measured speed").
#pragma once

#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <string>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/step_timer.h"

namespace aryl::agent {

struct ProgressLine {
  std::int64_t step = 0;
  double loss = std::numeric_limits<double>::quiet_NaN();  // NaN: none on the line
  double rate = 0;     // steps per second (from step_s when given), 0: none
  double step_s = -1;  // the step's own seconds, < 0: none
};

// The values of one progress line; nullopt for any other line.
std::optional<ProgressLine> ParseProgressLine(const std::string& line);

class StdoutProgress {
 public:
  // For the agent's own summaries: a printed line is one step (scripts print
  // every k steps), so no minimum span of seconds, and two warm-up lines.
  static protocol::StepTimer::Options TimerOptions();

  StdoutProgress() : timer_(TimerOptions()) {}

  // Reads the complete lines added to `path` since the last call (a partial
  // last line waits for the next); each step_s goes to the timer as a step of
  // `generation` at `world` workers. Returns the newest progress line read.
  std::optional<ProgressLine> Read(const std::string& path, std::int64_t generation, int world);

  // The steps timed since the last summary, once there are enough.
  std::optional<protocol::StepStats> TakeSummary() { return timer_.TakeSummary(); }

 private:
  std::streamoff offset_ = 0;
  protocol::StepTimer timer_;
};

}  // namespace aryl::agent
