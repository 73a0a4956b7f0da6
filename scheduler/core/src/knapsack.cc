#include "aryl/sched/knapsack.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ARYL_KNAPSACK_AVX 1
#endif

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

#if defined(ARYL_KNAPSACK_AVX)
// The cell loops below, four cells an instruction where the CPU has AVX
// (asked at run time: the build targets baseline x86-64). _mm256_add_pd and
// _mm256_max_pd are the SSE2 operations on twice the lanes, element by
// element the same results. Each returns how many cells it did (a multiple
// of 8); the caller does the rest.
bool HaveAvx() {
  static const bool avx = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") != 0;
  }();
  return avx;
}

__attribute__((target("avx"))) int CandidatesOrNegInfAvx(double* out, const double* in, int count,
                                                        double value) {
  const __m256d v = _mm256_set1_pd(value);
  const __m256d neg = _mm256_set1_pd(kNegInf);
  int i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256d a = _mm256_add_pd(_mm256_loadu_pd(in + i), v);
    const __m256d b = _mm256_add_pd(_mm256_loadu_pd(in + i + 4), v);
    _mm256_storeu_pd(out + i, _mm256_max_pd(a, neg));
    _mm256_storeu_pd(out + i + 4, _mm256_max_pd(b, neg));
  }
  return i;
}

__attribute__((target("avx"))) int MaxWithCandidatesAvx(double* out, const double* in, int count,
                                                       double value) {
  const __m256d v = _mm256_set1_pd(value);
  int i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256d a = _mm256_add_pd(_mm256_loadu_pd(in + i), v);
    const __m256d b = _mm256_add_pd(_mm256_loadu_pd(in + i + 4), v);
    _mm256_storeu_pd(out + i, _mm256_max_pd(a, _mm256_loadu_pd(out + i)));
    _mm256_storeu_pd(out + i + 4, _mm256_max_pd(b, _mm256_loadu_pd(out + i + 4)));
  }
  return i;
}
#endif

// out[i] = max(in[i] + value, -inf) for i < count: the candidate, or -inf
// where it is NaN. _mm_max_pd(a, b) is a > b ? a : b element by element (b
// when either is NaN): the scalar expression's value exactly.
void CandidatesOrNegInf(double* out, const double* in, int count, double value) {
  int i = 0;
#if defined(ARYL_KNAPSACK_AVX)
  if (count >= 8 && HaveAvx()) i = CandidatesOrNegInfAvx(out, in, count, value);
#endif
#if defined(__SSE2__)
  const __m128d v = _mm_set1_pd(value);
  const __m128d neg = _mm_set1_pd(kNegInf);
  for (; i + 4 <= count; i += 4) {
    _mm_storeu_pd(out + i, _mm_max_pd(_mm_add_pd(_mm_loadu_pd(in + i), v), neg));
    _mm_storeu_pd(out + i + 2, _mm_max_pd(_mm_add_pd(_mm_loadu_pd(in + i + 2), v), neg));
  }
  if (i + 2 <= count) {
    _mm_storeu_pd(out + i, _mm_max_pd(_mm_add_pd(_mm_loadu_pd(in + i), v), neg));
    i += 2;
  }
#endif
  for (; i < count; ++i) {
    const double cand = in[i] + value;
    out[i] = cand > kNegInf ? cand : kNegInf;
  }
}

// out[i] = std::max(out[i], in[i] + value) for i < count: the candidate where
// it is larger, out[i] otherwise (a NaN candidate never wins). std::max(a, b)
// is a < b ? b : a, that is _mm_max_pd(b, a).
void MaxWithCandidates(double* out, const double* in, int count, double value) {
  int i = 0;
#if defined(ARYL_KNAPSACK_AVX)
  if (count >= 8 && HaveAvx()) i = MaxWithCandidatesAvx(out, in, count, value);
#endif
#if defined(__SSE2__)
  const __m128d v = _mm_set1_pd(value);
  for (; i + 4 <= count; i += 4) {
    const __m128d a = _mm_add_pd(_mm_loadu_pd(in + i), v);
    const __m128d b = _mm_add_pd(_mm_loadu_pd(in + i + 2), v);
    _mm_storeu_pd(out + i, _mm_max_pd(a, _mm_loadu_pd(out + i)));
    _mm_storeu_pd(out + i + 2, _mm_max_pd(b, _mm_loadu_pd(out + i + 2)));
  }
  if (i + 2 <= count) {
    _mm_storeu_pd(out + i, _mm_max_pd(_mm_add_pd(_mm_loadu_pd(in + i), v), _mm_loadu_pd(out + i)));
    i += 2;
  }
#endif
  for (; i < count; ++i) out[i] = std::max(out[i], in[i] + value);
}

}  // namespace

KnapsackSolution SolveKnapsackExact(const std::vector<KnapsackGroup>& groups, int capacity) {
  KnapsackSolution sol;
  sol.exact = true;
  const size_t n = groups.size();
  sol.choice.assign(n, 0);
  // The DP over capacity: best_g[c] is the best value of groups 0..g within c
  // GPUs, pick_g[c] the first option that reaches it (options in index order,
  // strict comparison). It computes only the cells the answer depends on, with
  // the same arithmetic, so its choices are those of the full table:
  //   - Let W_g be the sum of the largest weights of groups 0..g. For c >= W_g
  //     every option fits, so best_g[c] equals best_g[W_g] bit for bit and
  //     pick_g[c] equals pick_g[W_g]: cells above hi_g = min(C, W_g) are copies.
  //   - Backtracking from C visits stage g only at c >= C - (W_total - W_g):
  //     cells below lo_g = max(0, that) are never read, and stage g reads stage
  //     g-1 only at c - w >= lo_{g-1}.
  //   - Capacity beyond W_total is never used: C = min(capacity, W_total).
  // Each stage spans at most min(C, W_total - C) + 1 cells: no work when
  // everything fits, the full width only when the capacity is half the demand.
  // The forward pass keeps only values (a max per cell, which vectorizes),
  // written straight into the table (stage g reads stage g-1's cells there);
  // backtracking finds pick_g at the one cell it visits per stage as the first
  // option whose candidate, the same sum, equals best_g there.
  thread_local std::vector<int> lo, hi;
  thread_local std::vector<size_t> offset;
  thread_local std::vector<double> table;  // best_g over [lo_g, hi_g], stage after stage
  std::int64_t total = 0;
  for (const auto& g : groups) {
    int w = 0;
    for (const auto& o : g.options) w = std::max(w, o.weight);
    total += w;
  }
  const std::int64_t cap = std::min<std::int64_t>(std::max(capacity, 0), total);
  lo.resize(n);
  hi.resize(n);
  offset.resize(n + 1);
  offset[0] = 0;
  std::int64_t prefix = 0;
  for (size_t g = 0; g < n; ++g) {
    int w = 0;
    for (const auto& o : groups[g].options) w = std::max(w, o.weight);
    prefix += w;
    hi[g] = static_cast<int>(std::min(cap, prefix));
    lo[g] = static_cast<int>(std::max<std::int64_t>(0, cap - (total - prefix)));
    offset[g + 1] = offset[g] + static_cast<size_t>(hi[g] - lo[g] + 1);
  }
  // Grown, never shrunk: every cell a stage reads was written by the stage
  // before (the bounds above), so old contents are never read.
  if (table.size() < offset[n]) table.resize(offset[n]);
  const double zero = 0;  // best_{-1}: 0 at every c, read only at c = 0
  const double* prev = &zero;  // best_{g-1}[c] is prev[c - prev_lo]
  int prev_lo = 0, prev_hi = 0;
  for (size_t g = 0; g < n; ++g) {
    const auto& opts = groups[g].options;
    const int l = lo[g], h = hi[g];
    double* cur = table.data() + offset[g];  // best_g[c] is cur[c - l], c in [l, h]
    size_t first = 0;
    if (!opts.empty() && opts[0].weight == 0) {
      // Option 0 of weight 0 (every group of the elastic allocation) reaches
      // every cell: its pass over cells set to -inf, written directly.
      const double value = opts[0].value;
      const int split = std::min(h, prev_hi);
      if (split >= l) CandidatesOrNegInf(cur, prev + (l - prev_lo), split - l + 1, value);
      const double top = prev[prev_hi - prev_lo] + value;
      for (int c = std::max(l, split + 1); c <= h; ++c) cur[c - l] = top > kNegInf ? top : kNegInf;
      first = 1;
    } else {
      std::fill(cur, cur + (h - l + 1), kNegInf);
    }
    for (size_t o = first; o < opts.size(); ++o) {
      const int w = opts[o].weight;
      if (w < 0 || w > h) continue;
      const double value = opts[o].value;
      const int start = std::max(l, w);
      const int split = std::min(h, prev_hi + w);  // above it, c - w > prev_hi
      if (split >= start) {
        MaxWithCandidates(cur + (start - l), prev + (start - w - prev_lo), split - start + 1,
                          value);
      }
      const double top = prev[prev_hi - prev_lo] + value;
      for (int c = std::max(start, split + 1); c <= h; ++c) cur[c - l] = std::max(cur[c - l], top);
    }
    prev = cur;
    prev_lo = l;
    prev_hi = h;
  }
  std::int64_t c = cap;
  for (size_t g = n; g-- > 0;) {
    const auto& opts = groups[g].options;
    const int at = static_cast<int>(std::min<std::int64_t>(c, hi[g]));
    const double target = table[offset[g] + static_cast<size_t>(at - lo[g])];
    // best_{g-1} at x, read as the forward pass did (above its hi: its top).
    const int p_hi = g == 0 ? 0 : hi[g - 1];
    auto prev = [&](int x) {
      return g == 0 ? 0.0 : table[offset[g - 1] + static_cast<size_t>(std::min(x, p_hi) - lo[g - 1])];
    };
    // The first option that reached the cell's value (every option's pass
    // only raised it); option 0 when nothing did (every candidate -inf/NaN).
    int pick = 0;
    if (target > kNegInf) {
      for (size_t o = 0; o < opts.size(); ++o) {
        const int w = opts[o].weight;
        if (w < 0 || w > hi[g] || w > at) continue;
        if (prev(at - w) + opts[o].value == target) {
          pick = static_cast<int>(o);
          break;
        }
      }
    }
    sol.choice[g] = pick;
    c -= opts[pick].weight;
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
  if (steps <= exact_budget) return SolveKnapsackExact(groups, capacity);
  return SolveKnapsackGreedy(groups, capacity);
}

}  // namespace aryl::sched
