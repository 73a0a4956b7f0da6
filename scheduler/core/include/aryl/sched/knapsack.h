// Multiple-choice knapsack: pick exactly one option from every group so that
// the weights fit a capacity and the sum of values is maximal.
//
// Aryl's elastic allocation (docs/scheduler.md): each elastic job is a group,
// its options are k extra workers (weight k) and their value is the completion
// time the job saves, less the rescale pause when k differs from its current
// size. Option 0 of every group must have weight 0 (the job at its base size),
// so an answer always exists.
//
// Two solvers:
//   - SolveKnapsackExact: dynamic programming over capacity,
//     O(capacity x total options) time and O(groups x capacity) memory.
//   - SolveKnapsackGreedy: the convex-hull greedy. Each group's options are
//     reduced to the upper concave hull of (weight, value); hull increments are
//     taken in order of decreasing value per GPU while they fit (a group whose
//     next increment does not fit takes no more increments); then the leftover
//     capacity is filled by the best single-group upgrade to any option, repeated
//     until none fits. O(total options x log). Its answer is within the value of
//     one hull increment of the LP bound; tests check it stays within 1% of the
//     exact optimum on random instances where both run.
//   - SolveKnapsack picks exact when groups x capacity x options <= budget.
#pragma once

#include <cstdint>
#include <vector>

namespace aryl::sched {

struct KnapsackOption {
  int weight = 0;
  double value = 0;
};
struct KnapsackGroup {
  std::vector<KnapsackOption> options;  // options[0].weight == 0
};
struct KnapsackSolution {
  std::vector<int> choice;  // chosen option index per group
  double value = 0;
  int weight = 0;
  bool exact = false;       // solved by the exact DP
};

KnapsackSolution SolveKnapsackExact(const std::vector<KnapsackGroup>& groups, int capacity);
KnapsackSolution SolveKnapsackGreedy(const std::vector<KnapsackGroup>& groups, int capacity);
KnapsackSolution SolveKnapsack(const std::vector<KnapsackGroup>& groups, int capacity,
                               std::int64_t exact_budget);

}  // namespace aryl::sched
