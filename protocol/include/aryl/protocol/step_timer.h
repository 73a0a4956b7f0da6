// StepTimer: robust summaries of one job's step times, the measurements the
// scheduler fits each job's speed model on (StepStats in messages.h,
// scheduler/core/include/aryl/sched/speed_model.h). Two sources use it:
//  - the runtime (rank 0): Step() at each committed step boundary; a step's
//    time is the wall time between two consecutive boundaries of one
//    generation (data loading, forward, backward, the gradient all-reduce
//    and the optimizer, as the program runs them);
//  - the agent, for programs without the runtime (torchrun scripts):
//    StepTime() with each step time rank 0 prints on its progress line
//    ("step=N ... step_s=S", docs/runtime.md).
//
// After a start or a change of generation or size the first `warmup_steps`
// are left out (new communicators, cold caches, a state transfer); so is any
// interval broken by Interrupt() (a recovery, a checkpoint written in
// between).
//
// TakeSummary() gives the median and the spread (1.4826 x the median
// absolute deviation, a standard deviation's robust stand-in) of the steps
// since the previous summary, once there are at least `min_steps` of them
// spanning at least `min_seconds`: every step is in at most one summary, so
// a receiver may add summaries up.
//
// Pure: the caller passes the time; no clock, no threads.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "aryl/protocol/messages.h"

namespace aryl::protocol {

class StepTimer {
 public:
  struct Options {
    int warmup_steps = 3;
    int min_steps = 8;
    double min_seconds = 2.0;
    int max_steps = 512;  // a summary of more covers the newest max_steps
  };
  StepTimer() : StepTimer(Options{}) {}
  explicit StepTimer(Options options) : opt_(options) {}

  // Step boundary at `now` (s) in `generation` with `world` workers; `sync_s`:
  // the time the step spent inside the gradient all-reduce (< 0: unknown).
  void Step(double now, std::int64_t generation, int world, double sync_s = -1);
  // One step's own time `seconds` (> 0; others are ignored), measured by the
  // program, in `generation` with `world` workers.
  void StepTime(double seconds, std::int64_t generation, int world);
  // The next interval is not a step's time (it held other work).
  void Interrupt() { last_ = -1; }
  void set_local_batch(double b) { local_batch_ = b > 0 ? b : 0; }

  std::optional<StepStats> TakeSummary();

 private:
  // Starts over when the generation or size changed; true if it did.
  bool Restart(std::int64_t generation, int world);
  void Add(double seconds, double sync_s);

  Options opt_;
  std::int64_t gen_ = -1;
  int world_ = 0;
  int warm_left_ = 0;
  double last_ = -1;
  double local_batch_ = 0;
  std::int64_t seq_ = 0;
  std::vector<double> times_, syncs_;
  double span_ = 0;
};

// The median of `v` (reordered); 0 for an empty vector.
double Median(std::vector<double>& v);

}  // namespace aryl::protocol
