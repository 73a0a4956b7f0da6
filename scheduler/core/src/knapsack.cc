#include "aryl/sched/knapsack.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace aryl::sched {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr double kNever = std::numeric_limits<double>::infinity();
// The core refinement re-solves at most this many groups, within this many DP steps.
constexpr size_t kCoreGroups = 64;
constexpr std::int64_t kCoreBudget = 2'000'000;

void Finish(const std::vector<KnapsackGroup>& groups, KnapsackSolution* sol) {
  sol->value = 0;
  sol->weight = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& o = groups[g].options[sol->choice[g]];
    sol->value += o.value;
    sol->weight += o.weight;
  }
}

}  // namespace

KnapsackSolution SolveKnapsackExact(const std::vector<KnapsackGroup>& groups, int capacity) {
  KnapsackSolution sol;
  sol.exact = true;
  sol.choice.assign(groups.size(), 0);
  capacity = std::max(capacity, 0);
  // Capacity beyond what all groups together can use changes nothing: at any
  // c >= the sum of the groups' largest weights every option fits, best[c] is
  // the same value (bit for bit) and the same option wins. So the DP runs up
  // to that sum only, with identical choices.
  std::int64_t usable = 0;
  for (const auto& g : groups) {
    int w = 0;
    for (const auto& o : g.options) w = std::max(w, o.weight);
    usable += w;
  }
  capacity = static_cast<int>(std::min<std::int64_t>(capacity, usable));
  const size_t width = static_cast<size_t>(capacity) + 1;
  // best[c]: the best value of the groups so far using at most c GPUs. The
  // buffers are reused across calls (a simulation solves ~100k small instances).
  thread_local std::vector<double> best, next;
  thread_local std::vector<std::uint16_t> pick;
  best.assign(width, 0.0);
  next.resize(width);
  pick.resize(groups.size() * width);
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& opts = groups[g].options;
    std::uint16_t* row = &pick[g * width];
    double* nx = next.data();
    const double* bs = best.data();
    std::fill(nx, nx + width, kNegInf);
    std::fill(row, row + width, std::uint16_t{0});
    // Options in index order with a strict comparison: the first best option
    // wins at every c, as in a per-c scan over the options.
    for (size_t o = 0; o < opts.size(); ++o) {
      const int w = opts[o].weight;
      if (w < 0 || w >= static_cast<int>(width)) continue;
      const double value = opts[o].value;
      const std::uint16_t idx = static_cast<std::uint16_t>(o);
      for (size_t c = static_cast<size_t>(w); c < width; ++c) {
        const double cand = bs[c - w] + value;
        if (cand > nx[c]) {
          nx[c] = cand;
          row[c] = idx;
        }
      }
    }
    best.swap(next);
  }
  size_t c = width - 1;
  for (size_t g = groups.size(); g-- > 0;) {
    const std::uint16_t o = pick[g * width + c];
    sol.choice[g] = o;
    c -= groups[g].options[o].weight;
  }
  Finish(groups, &sol);
  return sol;
}

KnapsackSolution SolveKnapsackGreedy(const std::vector<KnapsackGroup>& groups, int capacity) {
  KnapsackSolution sol;
  sol.choice.assign(groups.size(), 0);
  capacity = std::max(capacity, 0);
  // Upper concave hull of each group, as increments from the weight-0 option.
  struct Increment {
    double slope;
    int group;
    int from, to;  // option indices
  };
  std::vector<Increment> incs;
  std::vector<int> order;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& opts = groups[g].options;
    order.resize(opts.size());
    for (size_t i = 0; i < opts.size(); ++i) order[i] = static_cast<int>(i);
    // By weight, then best value first so that equal weights keep the best.
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      if (opts[a].weight != opts[b].weight) return opts[a].weight < opts[b].weight;
      return opts[a].value > opts[b].value;
    });
    std::vector<int> hull = {0};
    for (int idx : order) {
      if (idx == 0 || opts[idx].weight <= 0) continue;
      if (opts[idx].value <= opts[hull.back()].value) continue;  // dominated
      while (hull.size() >= 2) {
        const auto& a = opts[hull[hull.size() - 2]];
        const auto& b = opts[hull.back()];
        const auto& c = opts[idx];
        // Drop b when it lies on or below the segment a-c.
        const double cross = (b.value - a.value) * (c.weight - a.weight) -
                             (c.value - a.value) * (b.weight - a.weight);
        if (cross <= 0) {
          hull.pop_back();
        } else {
          break;
        }
      }
      if (opts[idx].weight > opts[hull.back()].weight) hull.push_back(idx);
    }
    for (size_t i = 1; i < hull.size(); ++i) {
      const auto& a = opts[hull[i - 1]];
      const auto& b = opts[hull[i]];
      incs.push_back({(b.value - a.value) / (b.weight - a.weight), static_cast<int>(g),
                      hull[i - 1], hull[i]});
    }
  }
  std::stable_sort(incs.begin(), incs.end(),
                   [](const Increment& a, const Increment& b) { return a.slope > b.slope; });
  std::vector<char> closed(groups.size(), 0);
  int left = capacity;
  double critical = 0;  // the slope where the greedy stopped
  bool have_critical = false;
  for (const auto& inc : incs) {
    if (closed[inc.group] || sol.choice[inc.group] != inc.from) continue;
    const auto& opts = groups[inc.group].options;
    const int dw = opts[inc.to].weight - opts[inc.from].weight;
    if (dw <= left) {
      sol.choice[inc.group] = inc.to;
      left -= dw;
      critical = inc.slope;
    } else {
      closed[inc.group] = 1;
      if (!have_critical) critical = inc.slope;
      have_critical = true;
    }
  }
  // Core refinement: the greedy can only be wrong about groups whose hull
  // slopes lie near the critical slope. Re-solve the groups nearest to it
  // exactly (DP), the others fixed, with their weights plus the leftover as
  // capacity. The greedy's own choice is feasible there, so this never loses.
  {
    std::vector<std::pair<double, int>> near;  // distance to the critical slope, group
    std::vector<double> dist(groups.size(), kNever);
    for (const auto& inc : incs) {
      dist[inc.group] = std::min(dist[inc.group], std::abs(inc.slope - critical));
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      if (dist[g] < kNever && groups[g].options.size() > 1) near.emplace_back(dist[g], g);
    }
    std::sort(near.begin(), near.end());
    std::vector<int> core;
    std::vector<KnapsackGroup> sub;
    int sub_capacity = left;
    std::int64_t sub_options = 0;
    for (const auto& [d, g] : near) {
      const auto& opts = groups[g].options;
      const int cur_w = opts[sol.choice[g]].weight;
      const std::int64_t next_options = sub_options + static_cast<std::int64_t>(opts.size());
      if (core.size() >= kCoreGroups ||
          next_options * (sub_capacity + cur_w + 1) > kCoreBudget) {
        break;
      }
      core.push_back(g);
      sub_capacity += cur_w;
      sub_options = next_options;
    }
    if (core.size() > 1) {
      for (int g : core) sub.push_back(groups[g]);  // option 0 has weight 0
      KnapsackSolution refined = SolveKnapsackExact(sub, sub_capacity);
      double before = 0, after = 0;
      for (size_t i = 0; i < core.size(); ++i) {
        before += groups[core[i]].options[sol.choice[core[i]]].value;
        after += sub[i].options[refined.choice[i]].value;
      }
      if (after > before + 1e-12) {
        left = sub_capacity;
        for (size_t i = 0; i < core.size(); ++i) {
          sol.choice[core[i]] = refined.choice[i];
          left -= groups[core[i]].options[refined.choice[i]].weight;
        }
      }
    }
  }
  // Fill: the best single-group upgrade into the leftover capacity, repeated.
  while (left > 0) {
    double best_gain = 0;
    int best_g = -1, best_o = -1;
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto& opts = groups[g].options;
      const auto& cur = opts[sol.choice[g]];
      for (size_t o = 0; o < opts.size(); ++o) {
        const int dw = opts[o].weight - cur.weight;
        const double gain = opts[o].value - cur.value;
        if (dw <= left && gain > best_gain + 1e-12) {
          best_gain = gain;
          best_g = static_cast<int>(g);
          best_o = static_cast<int>(o);
        }
      }
    }
    if (best_g < 0) break;
    left -= groups[best_g].options[best_o].weight - groups[best_g].options[sol.choice[best_g]].weight;
    sol.choice[best_g] = best_o;
  }
  Finish(groups, &sol);
  return sol;
}

KnapsackSolution SolveKnapsack(const std::vector<KnapsackGroup>& groups, int capacity,
                               std::int64_t exact_budget) {
  std::int64_t options = 0;
  for (const auto& g : groups) options += static_cast<std::int64_t>(g.options.size());
  const std::int64_t steps = options * (static_cast<std::int64_t>(std::max(capacity, 0)) + 1);
  bool fits_u16 = true;
  for (const auto& g : groups) fits_u16 = fits_u16 && g.options.size() <= 65535;
  if (steps <= exact_budget && fits_u16) return SolveKnapsackExact(groups, capacity);
  return SolveKnapsackGreedy(groups, capacity);
}

}  // namespace aryl::sched
