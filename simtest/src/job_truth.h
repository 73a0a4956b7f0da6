// What really happened to the simulated job (live_sim.h): the steps trained
// and checkpointed, when it last progressed and last lost a worker. No part of
// the live system sees all of it; the workers move it, the scheduler and the
// agents read the parts the store would show them, and the invariant checker
// holds every event against it.
#pragma once

#include <cstdint>

namespace aryl::simtest {

inline constexpr std::int64_t kJob = 1;  // the one job of a run

struct JobTruth {
  std::int64_t total_steps = 600;
  std::int64_t step = 0;              // committed steps (back to `checkpoint` on a fresh start)
  std::int64_t checkpoint = 0;        // the newest checkpoint's step
  std::int64_t trained_gen = 0;       // store generation of the newest trained step
  std::int64_t plans_since_step = 0;  // generations planned since the last trained step
  double last_step_at = 0;
  double last_fault_at = 0;  // a kill, or a worker the scheduler lost
  bool done = false;         // completed
};

}  // namespace aryl::simtest
