// The elastic part of a round: the allocation of spare GPUs among elastic
// jobs, the placement of their extra workers, and the round's actions.
#include <algorithm>
#include <queue>
#include <tuple>

#include "aryl/sched/knapsack.h"
#include "aryl/sched/resize_rule.h"
#include "quota.h"
#include "round_alloc.h"

namespace aryl::sched::internal {
namespace {

// A running job's rate now, for the resize rule: its placement's throughput,
// or its home type's at its size when that is not known.
double RateNow(const Alloc& a) {
  const JobInfo& j = *a.job;
  return j.throughput > 0 ? j.throughput : j.Thr(a.home, j.workers);
}

// Its current flexible workers on servers of GPU type `type`.
int FlexOn(const Alloc& a, const ClusterState& state, int type) {
  int n = 0;
  for (const auto& [sid, c] : a.flex) n += state.servers()[state.server_index(sid)].type == type ? c : 0;
  return n;
}

// The elastic allocation of `capacity` GPUs of one type among `group`. A
// running job is offered only the grows that pay (resize_rule.h, 3).
void AllocateAmong(const std::vector<Alloc*>& group, int capacity, const RoundOptions& opt,
                   const SchedulerConfig& cfg) {
  if (group.empty() || capacity <= 0) return;
  if (opt.extra == ExtraRule::kKnapsack) {
    // Groups kept across rounds with their options' capacity (see allocs).
    static thread_local std::vector<KnapsackGroup> groups, spare;
    static thread_local std::vector<Alloc*> owners;
    while (!groups.empty()) {
      spare.push_back(std::move(groups.back()));
      groups.pop_back();
    }
    owners.clear();
    for (Alloc* a : group) {
      const JobInfo& j = *a->job;
      const int base = Sum(a->base);
      const int cur = a->is_new || a->moved ? 0 : j.workers;
      const double r0 = RemainingTime(j, a->home, base);
      // Each job pays its own pause: measured, else its kind's (a restart job
      // is stopped and started again).
      const Seconds rescale = ResizePause(cfg, j);
      auto pause = [&](int w) { return cur > 0 && w != cur ? rescale : 0.0; };
      const double rate = cur > 0 ? RateNow(*a) : 0;
      KnapsackGroup g;
      if (!spare.empty()) {
        g = std::move(spare.back());
        spare.pop_back();
        g.options.clear();
      }
      g.options.push_back({0, -pause(base)});
      // The curve read directly: Thr(home, w) for w inside it, 0 beyond.
      const std::vector<double>& curve = j.curves[a->home];
      const int top = std::min({j.spec.max_workers, base + capacity, static_cast<int>(curve.size()) - 1});
      for (int w = base + 1; w <= top; ++w) {
        const double thr = curve[w];
        if (!(thr > 0)) continue;
        if (cur > 0 && w > cur && !GrowPays(cfg, j, rate, thr)) continue;
        g.options.push_back({w - base, r0 - j.remaining_work / thr - pause(w)});
      }
      if (g.options.size() > 1) {
        groups.push_back(std::move(g));
        owners.push_back(a);
      } else {
        spare.push_back(std::move(g));
      }
    }
    KnapsackSolution sol = SolveKnapsack(groups, capacity, opt.knapsack_budget);
    for (size_t i = 0; i < owners.size(); ++i) {
      owners[i]->extra = groups[i].options[sol.choice[i]].weight;
    }
    return;
  }
  // Optimus / AFS: hand out one size step at a time to the job of highest priority.
  struct Step {
    double priority;
    size_t idx;
    int from, to;
    bool operator<(const Step& o) const {
      return priority != o.priority ? priority < o.priority : idx > o.idx;
    }
  };
  auto next_step = [&](size_t i, int from, Step* out) {
    const Alloc& a = *group[i];
    const JobInfo& j = *a.job;
    const int cur = a.is_new || a.moved ? 0 : j.workers;
    for (int w = from + 1; w <= j.spec.max_workers; ++w) {
      if (!j.Allowed(a.home, w)) {
        if (w >= static_cast<int>(j.curves[a.home].size())) return false;
        continue;
      }
      if (cur > 0 && w > cur && !GrowPays(cfg, j, RateNow(a), j.Thr(a.home, w))) continue;
      double pr;
      if (opt.extra == ExtraRule::kOptimus) {
        pr = (RemainingTime(j, a.home, from) - RemainingTime(j, a.home, w)) / (w - from);
      } else {
        const double t0 = j.Thr(a.home, from), t1 = j.Thr(a.home, w);
        pr = (t1 - t0) / t1 / (w - from) / RemainingTime(j, a.home, from);
      }
      if (!(pr > 0)) return false;
      *out = {pr, i, from, w};
      return true;
    }
    return false;
  };
  std::priority_queue<Step> pq;
  for (size_t i = 0; i < group.size(); ++i) {
    Step s;
    if (next_step(i, Sum(group[i]->base), &s)) pq.push(s);
  }
  int left = capacity;
  while (!pq.empty() && left > 0) {
    Step s = pq.top();
    pq.pop();
    if (s.to - s.from > left) continue;  // this job cannot grow further
    left -= s.to - s.from;
    group[s.idx]->extra += s.to - s.from;
    Step n;
    if (next_step(s.idx, s.to, &n)) pq.push(n);
  }
}

// The allocation of `capacity` spare GPUs of one type among `group`: with
// queues, split by queue first (SplitSpareByQueue, quota.h, rule 5).
void AllocateExtras(const std::vector<Alloc*>& group, int capacity, const RoundOptions& opt,
                    const SchedulerConfig& cfg) {
  SplitSpareByQueue(group, capacity, cfg, [&](const std::vector<Alloc*>& part, int cap) {
    AllocateAmong(part, cap, opt, cfg);
  });
}

// hetero_dp: for each GPU type, the GPUs on its loaned servers that the
// type's own elastic allocation leaves idle go, by the same knapsack, to
// elastic jobs of other home types as guest workers. A job of w0 home workers
// and k guests runs at (w0 thr_home(w) + k thr_guest(w)) / w, w = w0 + k.
void AllocateGuests(AllocList& allocs, const FreeIndex& index, const ClusterState& state,
                    const RoundOptions& opt) {
  const SchedulerConfig& cfg = state.config();
  for (int t = 0; t < state.num_types(); ++t) {
    int taken = 0;
    for (const Alloc& a : allocs) {
      if (a.flexible && a.home == t) taken += a.extra;
    }
    int capacity = index.Total(t, false, true) - taken;
    if (capacity <= 0) continue;
    // A running job in its dwell keeps the guests of this type it has and
    // gets no others (resize_rule.h, 2).
    for (Alloc& a : allocs) {
      if (!a.flexible || a.home < 0 || a.home == t || a.guest_type >= 0 || a.is_new || a.moved) continue;
      if (!a.pinned && !InDwell(cfg, *a.job, state.now())) continue;
      const int g = std::min(FlexOn(a, state, t), capacity);
      if (g <= 0) continue;
      a.guest_type = t;
      a.guest = g;
      capacity -= g;
    }
    if (capacity <= 0) continue;
    std::vector<KnapsackGroup> groups;
    std::vector<Alloc*> owners;
    for (Alloc& a : allocs) {
      if (!a.flexible || a.home < 0 || a.home == t || a.guest_type >= 0 || a.pinned) continue;
      const JobInfo& j = *a.job;
      if (j.curves[t].empty()) continue;
      const int cur = a.is_new || a.moved ? 0 : j.workers;
      if (cur > 0 && InDwell(cfg, j, state.now())) continue;
      const int w0 = Sum(a.base) + a.extra;
      const Seconds rescale = ResizePause(cfg, j);
      auto pause = [&](int w) { return cur > 0 && w != cur ? rescale : 0.0; };
      const double r0 = RemainingTime(j, a.home, w0);
      KnapsackGroup g;
      g.options.push_back({0, 0});
      for (int w = w0 + 1; w <= j.spec.max_workers && w - w0 <= capacity; ++w) {
        const double th = j.Thr(a.home, w), tg = j.Thr(t, w);
        if (!(th > 0) || !(tg > 0)) continue;
        const double thr = (w0 * th + (w - w0) * tg) / w;
        if (cur > 0 && w > cur && !GrowPays(cfg, j, RateNow(a), thr)) continue;
        g.options.push_back({w - w0, r0 - j.remaining_work / thr - (pause(w) - pause(w0))});
      }
      if (g.options.size() > 1) {
        groups.push_back(std::move(g));
        owners.push_back(&a);
      }
    }
    if (groups.empty()) continue;
    KnapsackSolution sol = SolveKnapsack(groups, capacity, opt.knapsack_budget);
    for (size_t i = 0; i < owners.size(); ++i) {
      const int k = groups[i].options[sol.choice[i]].weight;
      if (k > 0) {
        owners[i]->guest_type = t;
        owners[i]->guest = k;
      }
    }
  }
}

}  // namespace

void AllocateElastic(AllocList& allocs, FreeIndex& index, const ClusterState& state, const RoundOptions& opt,
                     Seconds* wakeup) {
  const auto& servers = state.servers();
  const SchedulerConfig& cfg = state.config();
  static thread_local std::vector<std::vector<Alloc*>> by_type;
  static thread_local std::vector<Alloc*> free_to_change;
  by_type.resize(state.num_types());
  for (auto& v : by_type) v.clear();
  for (Alloc& a : allocs) {
    if (a.flexible && a.home >= 0) by_type[a.home].push_back(&a);
  }
  for (int t = 0; t < state.num_types(); ++t) {
    // The dwell (resize_rule.h, 2), applied lazily: allocate; a running job
    // in its dwell that the answer would resize is pinned at its current
    // flexible workers (fewer only where a queued job's base took them), out
    // of the allocation; allocate the rest again, until no answer resizes a
    // job in its dwell. Most rounds allocate once. Two exceptions, both
    // measured on the traces (docs/evaluation.md, "The resize rule"):
    //  - The GPUs a pinned job wanted beyond its current ones stay free until
    //    its dwell ends: given to other jobs now, they would be taken back
    //    then, two resizes for none (21% more resizes on the headline trace).
    //  - A round that starts a job with extra workers may shrink jobs in
    //    their dwell for it, as it may for a base: held, the new job would
    //    start small and grow later, a resize of its own (13% more).
    const int capacity = index.Total(t, true, opt.use_loaned);
    int held = 0;
    while (true) {
      free_to_change.clear();
      for (Alloc* a : by_type[t]) {
        if (a->pinned) continue;
        a->extra = 0;
        free_to_change.push_back(a);
      }
      AllocateExtras(free_to_change, capacity - held, opt, cfg);
      bool starts = false;  // the answer starts a job with extra workers
      for (const Alloc* a : free_to_change) starts = starts || (a->is_new && a->extra > 0);
      bool pinned_more = false;
      for (Alloc* a : free_to_change) {
        if (a->is_new || a->moved || !InDwell(cfg, *a->job, state.now())) continue;
        const int now_extra = FlexOn(*a, state, t);
        if (a->extra == now_extra || (starts && a->extra < now_extra)) continue;
        const int room = std::max(0, capacity - held);
        const int wanted = a->extra;
        a->pinned = true;
        a->extra = std::min(now_extra, room);
        held += std::min(std::max(wanted, now_extra), room);
        pinned_more = true;
        if (wakeup) *wakeup = std::min(*wakeup, DwellEnd(cfg, *a->job));
      }
      if (!pinned_more) break;
    }
  }
  if (opt.hetero_dp && opt.use_loaned && state.num_types() > 1) AllocateGuests(allocs, index, state, opt);
  // 4. Placement of flexible workers: keep current ones (those on training
  // servers first, so that a shrink gives back loaned workers first) ...
  for (Alloc& a : allocs) {
    if (!a.flexible || a.flex.empty() || (a.extra == 0 && a.guest == 0)) continue;  // nothing to keep
    static thread_local std::vector<std::tuple<int, int, ServerId>> order;
    order.clear();
    for (const auto& [sid, n] : a.flex) {
      order.emplace_back(state.server(sid)->loaned() ? 1 : 0, -n, sid);
    }
    std::sort(order.begin(), order.end());
    int want = a.extra;
    int guest_want = a.guest;
    for (const auto& [l, neg, sid] : order) {
      const int i = state.server_index(sid);
      int& w = servers[i].type == a.home ? want : servers[i].type == a.guest_type ? guest_want : want;
      if (servers[i].type != a.home && servers[i].type != a.guest_type) continue;
      const int keep = std::min({-neg, index.avail(i), w});
      if (keep <= 0) continue;
      a.kept[sid] = keep;
      if (servers[i].type == a.home) a.kept_home += keep;
      index.Take(i, keep);
      w -= keep;
    }
  }
  // ... then add new ones on training servers, where the job already is
  // first, then best fit; then on loaned servers the same way (resize_rule.h,
  // 4): a worker on a training server stays until the policy moves it, one on
  // a loaned server is the first a reclaim takes. A job whose base workers sit
  // on loaned servers (training was full when it started) moves its base to
  // training servers this way: the next round counts those as its base, so
  // its loaned workers become flexible and a reclaim can shrink them away.
  for (Alloc& a : allocs) {
    if (!a.flexible) continue;
    int want = a.extra - a.kept_home;
    if (want <= 0 && a.guest_type < 0) continue;  // every extra worker kept (most jobs)
    for (const bool loaned_pool : {false, true}) {
      if (loaned_pool && !opt.use_loaned) continue;
      for (const FlatPlacement* p : {&a.kept, &a.base}) {
        for (const auto& [sid, n] : *p) {
          if (want == 0) break;
          const int i = state.server_index(sid);
          if (servers[i].type != a.home || servers[i].loaned() != loaned_pool) continue;
          const int take = std::min(index.avail(i), want);
          if (take <= 0) continue;
          a.kept[sid] += take;
          index.Take(i, take);
          want -= take;
        }
      }
      while (want > 0) {
        const int i = index.Pick(a.home, !loaned_pool, loaned_pool, want, loaned_pool);
        if (i < 0) break;
        const int take = std::min(index.avail(i), want);
        a.kept[servers[i].spec.id] += take;
        index.Take(i, take);
        want -= take;
      }
    }
    // Guest workers: on loaned servers of the guest type only.
    if (a.guest_type >= 0) {
      int guest_want = a.guest;
      for (const auto& [sid, n] : a.kept) {
        if (servers[state.server_index(sid)].type == a.guest_type) guest_want -= n;
      }
      while (guest_want > 0) {
        const int i = index.Pick(a.guest_type, false, true, guest_want, true);
        if (i < 0) break;
        const int take = std::min(index.avail(i), guest_want);
        a.kept[servers[i].spec.id] += take;
        index.Take(i, take);
        guest_want -= take;
      }
    }
  }
}

std::vector<Action> RoundActions(AllocList& allocs, const ClusterState& state, const RoundOptions& opt) {
  std::vector<Action> actions;
  for (Alloc& a : allocs) {
    if (!a.is_new && !a.moved && !a.flexible) continue;  // base == its placement
    // A running job that keeps its placement (most, every round) needs no
    // copy. Here it is flexible, its placement is base + flex (Split) and
    // neither holds a zero entry: it keeps it exactly when kept == flex.
    if (!a.is_new && !a.moved && a.kept == a.flex &&
        (a.guest_type >= 0 ? state.PlacementThroughput(*a.job, a.job->placement) > 0
                           : a.job->Allowed(a.home, a.job->workers))) {
      continue;
    }
    Placement desired = a.base.ToPlacement();
    for (const auto& [sid, n] : a.kept) desired[sid] += n;
    if (a.flexible && (a.guest_type >= 0 ? !(state.PlacementThroughput(*a.job, desired) > 0)
                                         : !a.job->Allowed(a.home, Sum(desired)))) {
      desired = a.base.ToPlacement();  // defensive: never emit a size the job may not run at
    }
    if (a.moved && !a.flexible) {
      // No elastic resize: stop it (from its last checkpoint) and start it again.
      Action stop;
      stop.type = ActionType::kPreempt;
      stop.job = a.job->spec.id;
      stop.reason = "migrate to a faster GPU type (restart)";
      actions.push_back(std::move(stop));
    }
    if (a.is_new || (a.moved && !a.flexible)) {
      Action act;
      act.type = ActionType::kStart;
      act.job = a.job->spec.id;
      act.placement = std::move(desired);
      act.reason = a.moved ? "migrate to a faster GPU type"
                   : opt.fifo ? "admit (fifo)"
                              : "admit (sjf)";
      actions.push_back(std::move(act));
    } else if (desired != a.job->placement) {
      const int before = a.job->workers, after = Sum(desired);
      Action act;
      act.type = ActionType::kResize;
      act.job = a.job->spec.id;
      act.placement = std::move(desired);
      act.reason = a.moved        ? "migrate to a faster GPU type (elastic resize)"
                   : after > before ? "elastic: grow"
                   : after < before ? "elastic: shrink (base demand or better use)"
                                    : "elastic: move";
      actions.push_back(std::move(act));
    }
  }
  return actions;
}

}  // namespace aryl::sched::internal
