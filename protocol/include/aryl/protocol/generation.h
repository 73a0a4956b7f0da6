// Generation numbers of an elastic job start: who allocates them, and how.
//
// A generation is a numbered member list (runtime/include/aryl/runtime.h). Two
// kinds of change create one, and each kind has exactly one allocator, in its
// own range of numbers, so no two parties ever race for one counter:
//  1. A plan (start, grow, shrink, replace a lost worker) is numbered by the
//     scheduler: its job generation s (NewGeneration / StartWorkers
//     .generation, relayed unchanged by every agent) is store generation
//     PlanGeneration(s) = s * kFaultsPerPlan. The LocalCoordinator, which
//     plays the scheduler and the agent on one machine, counts its own plans.
//  2. A fault recovery (survivors of a failed generation G regroup without the
//     scheduler) is numbered by the runtime: the first survivor to register
//     for G (one per G, by an atomic add in the store) publishes
//     FaultSuccessor(G) = G + 1.
// Hence a plan outranks every fault generation of the plans before it,
// whichever is published first: when a worker dies and the scheduler plans
// its replacement (s+1) while the survivors regroup (s * k + 1), the
// survivors regroup first and then move into the plan, which the joiner is
// waiting for. Nothing else allocates generation numbers.
#pragma once

#include <cstdint>
#include <string>

#include "aryl/result.h"

namespace aryl::protocol {

inline constexpr std::int64_t kFaultsPerPlan = 1000;

// The store generation of scheduler (or coordinator) plan `plan` (>= 1).
inline std::int64_t PlanGeneration(std::int64_t plan) { return (plan < 1 ? 1 : plan) * kFaultsPerPlan; }

// The plan a store generation belongs to.
inline std::int64_t PlanOf(std::int64_t generation) { return generation / kFaultsPerPlan; }

// The generation the survivors of failed generation `g` form.
inline Result<std::int64_t> FaultSuccessor(std::int64_t g) {
  if ((g + 1) % kFaultsPerPlan == 0) {
    return Status::FailedPrecondition("generation " + std::to_string(g) + ": " + std::to_string(kFaultsPerPlan - 1) +
                                     " fault recoveries since plan " + std::to_string(PlanOf(g)) +
                                     " and no new plan; giving up");
  }
  return g + 1;
}

}  // namespace aryl::protocol
