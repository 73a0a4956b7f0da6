#include "round.h"

#include <algorithm>
#include <bit>
#include <queue>
#include <tuple>

#include "aryl/sched/knapsack.h"

namespace aryl::sched::internal {

bool Usable(const ServerInfo& s, bool use_loaned) {
  if (!s.usable()) return false;
  return s.state == ServerState::kAvailable || use_loaned;
}

// --- The round -----------------------------------------------------------------------

namespace {

const std::set<JobId> kNoJobs;

// A placement as a vector sorted by server: the round's scratch placements
// (several per running job, every round) without a tree node per server.
// Iterates in the order of a Placement.
class FlatPlacement {
 public:
  using Entry = std::pair<ServerId, int>;
  int& operator[](ServerId sid) {
    auto it = std::lower_bound(v_.begin(), v_.end(), sid,
                               [](const Entry& e, ServerId s) { return e.first < s; });
    if (it == v_.end() || it->first != sid) it = v_.insert(it, {sid, 0});
    return it->second;
  }
  void Assign(const Placement& p) { v_.assign(p.begin(), p.end()); }
  Placement ToPlacement() const { return Placement(v_.begin(), v_.end()); }
  void clear() { v_.clear(); }
  bool empty() const { return v_.empty(); }
  std::vector<Entry>::const_iterator begin() const { return v_.begin(); }
  std::vector<Entry>::const_iterator end() const { return v_.end(); }

 private:
  std::vector<Entry> v_;
};

template <class P>
int Sum(const P& p) {
  int n = 0;
  for (const auto& [s, c] : p) n += c;
  return n;
}

struct Alloc {
  const JobInfo* job = nullptr;
  bool is_new = false;
  bool moved = false;     // running job migrated to a faster GPU type this round
  bool flexible = false;  // takes part in the elastic allocation
  int home = -1;          // GPU type of its base workers
  FlatPlacement base;
  // A running job outside the elastic allocation keeps its placement as its
  // base: read in place rather than copied (every round, every running job).
  const Placement* fixed = nullptr;
  // Calls f(server, workers) for each base server, in server order.
  template <class F>
  void ForBase(F&& f) const {
    if (fixed) {
      for (const auto& [sid, n] : *fixed) f(sid, n);
    } else {
      for (const auto& [sid, n] : base) f(sid, n);
    }
  }
  int BaseSum() const { return fixed ? Sum(*fixed) : Sum(base); }
  FlatPlacement flex;     // current flexible workers (running jobs)
  int extra = 0;          // extra workers decided by the elastic allocation
  int guest_type = -1;    // hetero_dp: the other type it takes `guest` workers of
  int guest = 0;
  int kept_home = 0;      // workers of `kept` on the home type
  FlatPlacement kept;     // flexible workers after placement

  // Back to a fresh Alloc, keeping the placements' capacity.
  void Reset() {
    job = nullptr;
    is_new = moved = flexible = false;
    home = -1;
    base.clear();
    fixed = nullptr;
    flex.clear();
    extra = 0;
    guest_type = -1;
    guest = 0;
    kept_home = 0;
    kept.clear();
  }
};

// The round's Allocs, kept across rounds: a round reuses them (and their
// placements' capacity) instead of allocating per running job. Add() may move
// earlier elements: hold indices, not references, across it.
class AllocList {
 public:
  void clear() { n_ = 0; }
  Alloc& Add() {
    if (n_ == v_.size()) v_.emplace_back();
    Alloc& a = v_[n_++];
    a.Reset();
    return a;
  }
  size_t size() const { return n_; }
  Alloc& operator[](size_t i) { return v_[i]; }
  const Alloc& operator[](size_t i) const { return v_[i]; }
  Alloc* begin() { return v_.data(); }
  Alloc* end() { return v_.data() + n_; }
  const Alloc* begin() const { return v_.data(); }
  const Alloc* end() const { return v_.data() + n_; }

 private:
  std::vector<Alloc> v_;
  size_t n_ = 0;
};

// Whether a + b (per server) equals `p`, without building the sum.
bool SumEquals(const FlatPlacement& a, const FlatPlacement& b, const Placement& p) {
  auto ia = a.begin(), ib = b.begin();
  for (const auto& [sid, n] : p) {
    int have = 0;
    while (ia != a.end() && ia->first < sid) {
      if (ia->second != 0) return false;
      ++ia;
    }
    while (ib != b.end() && ib->first < sid) {
      if (ib->second != 0) return false;
      ++ib;
    }
    if (ia != a.end() && ia->first == sid) have += (ia++)->second;
    if (ib != b.end() && ib->first == sid) have += (ib++)->second;
    if (have != n) return false;
  }
  for (; ia != a.end(); ++ia) {
    if (ia->second != 0) return false;
  }
  for (; ib != b.end(); ++ib) {
    if (ib->second != 0) return false;
  }
  return true;
}

// Splits a running elastic job's placement into `base_workers` base workers
// (training servers first, then where it has most workers) and the rest.
void Split(const ClusterState& state, const JobInfo& job, FlatPlacement* base, FlatPlacement* flex) {
  if (job.placement.size() == 1) {  // most jobs: no order to find
    const auto& [sid, n] = *job.placement.begin();
    const int b = std::min(job.base_workers, n);
    if (b > 0) (*base)[sid] = b;
    if (n - b > 0) (*flex)[sid] = n - b;
    return;
  }
  static thread_local std::vector<std::tuple<int, int, ServerId>> order;  // (loaned, -count, id)
  order.clear();
  for (const auto& [sid, n] : job.placement) {
    order.emplace_back(state.server(sid)->loaned() ? 1 : 0, -n, sid);
  }
  std::sort(order.begin(), order.end());
  int need = job.base_workers;
  for (const auto& [loaned, neg, sid] : order) {
    const int n = -neg;
    const int b = std::min(need, n);
    need -= b;
    if (b > 0) (*base)[sid] = b;
    if (n - b > 0) (*flex)[sid] = n - b;
  }
}

double RemainingTime(const JobInfo& job, int type, int w) {
  const double thr = job.Thr(type, w);
  return thr > 0 ? job.remaining_work / thr : kNever;
}

// The allowed type where `job` runs fastest at `w` workers (-1: none).
int FastestType(const JobInfo& job, int num_types, int w) {
  int best = -1;
  for (int t = 0; t < num_types; ++t) {
    if (job.Thr(t, w) > 0 && (best < 0 || job.Thr(t, w) > job.Thr(best, w))) best = t;
  }
  return best;
}

// Whether type `t` is slower than type `f` for `job` at `w` workers.
bool Slower(const JobInfo& job, int t, int f, int w) {
  return job.Thr(t, w) < job.Thr(f, w) * (1 - 1e-9);
}

// The elastic allocation of `capacity` GPUs of one type among `group`.
void AllocateExtras(const std::vector<Alloc*>& group, int capacity, const RoundOptions& opt,
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
      // Each kind pays its own pause: a restart job is stopped and started again.
      const Seconds rescale = cfg.RescalePause(j.spec);
      auto pause = [&](int w) { return cur > 0 && w != cur ? rescale : 0.0; };
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
    for (int w = from + 1; w <= j.spec.max_workers; ++w) {
      if (!j.Allowed(a.home, w)) {
        if (w >= static_cast<int>(j.curves[a.home].size())) return false;
        continue;
      }
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

// hetero_dp: for each GPU type, the GPUs on its loaned servers that the
// type's own elastic allocation leaves idle go, by the same knapsack, to
// elastic jobs of other home types as guest workers. A job of w0 home workers
// and k guests runs at (w0 thr_home(w) + k thr_guest(w)) / w, w = w0 + k.
void AllocateGuests(AllocList& allocs, const FreeIndex& index, const ClusterState& state,
                    const RoundOptions& opt) {
  for (int t = 0; t < state.num_types(); ++t) {
    int taken = 0;
    for (const Alloc& a : allocs) {
      if (a.flexible && a.home == t) taken += a.extra;
    }
    const int capacity = index.Total(t, false, true) - taken;
    if (capacity <= 0) continue;
    std::vector<KnapsackGroup> groups;
    std::vector<Alloc*> owners;
    for (Alloc& a : allocs) {
      if (!a.flexible || a.home < 0 || a.home == t || a.guest_type >= 0) continue;
      const JobInfo& j = *a.job;
      if (j.curves[t].empty()) continue;
      const int w0 = Sum(a.base) + a.extra;
      const int cur = a.is_new || a.moved ? 0 : j.workers;
      const Seconds rescale = state.config().RescalePause(j.spec);
      auto pause = [&](int w) { return cur > 0 && w != cur ? rescale : 0.0; };
      const double r0 = RemainingTime(j, a.home, w0);
      KnapsackGroup g;
      g.options.push_back({0, 0});
      for (int w = w0 + 1; w <= j.spec.max_workers && w - w0 <= capacity; ++w) {
        const double th = j.Thr(a.home, w), tg = j.Thr(t, w);
        if (!(th > 0) || !(tg > 0)) continue;
        const double thr = (w0 * th + (w - w0) * tg) / w;
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

std::vector<Action> RunRound(const ClusterState& state, const RoundOptions& opt, AdmissionQueue* keep) {
  // Nothing to admit, migrate or resize: every running job keeps its placement.
  if (!opt.elastic && state.queued().empty() && !(opt.type_aware && state.num_types() > 1)) {
    return {};
  }
  // A kept queue serves admission unless running jobs compete in it
  // (migrations to a faster type) or min_type_speed > 1 changes which jobs
  // the walk may skip.
  const bool incremental =
      keep != nullptr && !(opt.type_aware && state.num_types() > 1) && opt.min_type_speed <= 1;
  if (incremental) keep->Sync(state, opt);
  const auto& servers = state.servers();
  const int n_servers = static_cast<int>(servers.size());
  std::vector<bool> enabled(n_servers);
  std::vector<int> avail(n_servers);
  for (int i = 0; i < n_servers; ++i) {
    enabled[i] = Usable(servers[i], opt.use_loaned);
    avail[i] = enabled[i] ? servers[i].spec.gpus : 0;
  }
  // Scratch kept across rounds (its capacity): a large buffer allocated and
  // freed every round costs the allocator more than the round itself.
  static thread_local AllocList allocs;
  allocs.clear();
  // 1. Running jobs keep their base workers; flexible workers count as free.
  // Without elasticity or migrations a running job keeps its placement: the
  // free GPUs are the servers' own count, and running jobs need no Alloc.
  const bool fixed_running = incremental && !opt.elastic;
  // With elasticity but no migrations, only the elastic allocation looks at
  // running jobs, and only at flexible ones: the others keep their placement
  // and need no Alloc. The free GPUs are then the servers' own count plus the
  // flexible workers' (the same count as the servers' GPUs minus every base).
  const bool flexible_only = opt.elastic && !(opt.type_aware && state.num_types() > 1);
  if (fixed_running || flexible_only) {
    for (int i = 0; i < n_servers; ++i) {
      if (enabled[i]) avail[i] = servers[i].free();
    }
  }
  for (JobId id : fixed_running ? kNoJobs : flexible_only ? state.running_elastic() : state.running()) {
    const JobInfo& j = *state.job(id);
    // A job left to finish on a reclaimed server keeps its placement.
    const bool frozen = state.OnDraining(j);
    const bool flexible = opt.elastic && j.elastic() && !frozen;
    if (flexible_only && !flexible) continue;
    Alloc& a = allocs.Add();
    a.job = &j;
    a.flexible = flexible;
    if (a.flexible) {
      Split(state, j, &a.base, &a.flex);
    } else {
      a.fixed = &j.placement;
    }
    if (flexible_only) {
      for (const auto& [sid, n] : a.flex) avail[state.server_index(sid)] += n;
    }
    // Home type: the slowest type its base uses (the pace of the job); the
    // first server's type, unless a later one of another type is slower.
    double slowest = -1;  // Thr(home, workers), read only when types differ
    a.ForBase([&](ServerId sid, int n) {
      const int i = state.server_index(sid);
      if (!flexible_only) avail[i] -= n;
      const int type = servers[i].type;
      if (a.home < 0) {
        a.home = type;
        return;
      }
      if (type == a.home) return;
      if (slowest < 0) slowest = j.Thr(a.home, j.workers);
      const double thr = j.Thr(type, j.workers);
      if (thr < slowest) {
        slowest = thr;
        a.home = type;
      }
    });
  }
  // `index` counts flexible workers' GPUs as free (base demands displace them);
  // `idle` counts only GPUs nobody holds, so that admission displaces flexible
  // workers only where no idle GPUs fit.
  FreeIndex index(state, avail, enabled);
  std::vector<int> idle_avail(avail);
  for (const Alloc& a : allocs) {
    for (const auto& [sid, n] : a.flex) idle_avail[state.server_index(sid)] -= n;
  }
  FreeIndex idle(state, idle_avail, enabled);

  // 2. Admission: SJF (remaining time at base size) or FIFO, with backfill.
  struct Queued {
    double key;
    Seconds submit;
    JobId id;
    int demand;
    int alloc = -1;  // migration candidate: its index in `allocs`
  };
  // GPUs admission and migration may use at most (flexible workers count as
  // free). With none, no job starts or moves: the queue is not even looked at,
  // so a round costs nothing per queued job while the cluster is full.
  const int n_types = state.num_types();
  int free_left = 0;
  for (int t = 0; t < n_types; ++t) free_left += index.Total(t, true, opt.use_loaned);
  if (free_left == 0 && !opt.elastic) return {};
  // Scratch kept across rounds (its capacity): one allocation, not one per round.
  static thread_local std::vector<Queued> queue;
  queue.clear();
  // Slow GPU types (type_aware): `frees[t]` is when the base GPUs of type t held
  // by running jobs free up (estimated finish, cumulative GPUs), for the wait
  // estimate; a running job whose type is slower than its fastest one is a
  // migration candidate and competes for the fast type in admission order.
  std::vector<std::vector<std::pair<Seconds, int>>> frees(n_types);
  std::vector<int> ahead(n_types, 0);  // demand of earlier jobs still waiting per type
  if (free_left > 0 && opt.type_aware && n_types > 1) {
    for (size_t k = 0; k < allocs.size(); ++k) {
      const Alloc& a = allocs[k];
      const JobInfo& j = *a.job;
      const int d = a.BaseSum();
      if (a.home < 0 || d <= 0) continue;
      frees[a.home].emplace_back(state.EstimatedFinishTime(j.spec.id), d);
      if (state.OnDraining(j)) continue;  // left to finish where it is
      const int f = FastestType(j, n_types, d);
      if (f < 0 || !Slower(j, a.home, f, d)) continue;
      const double key = opt.fifo ? j.spec.submit_time : RemainingTime(j, f, d);
      queue.push_back({key, j.spec.submit_time, j.spec.id, d, static_cast<int>(k)});
    }
    for (auto& v : frees) {
      std::sort(v.begin(), v.end());
      for (size_t i = 1; i < v.size(); ++i) v[i].second += v[i - 1].second;
    }
  }
  // Seconds until `need` more GPUs of type t free up (fluid estimate, ignores
  // fragmentation); kNever when the running jobs never free that many.
  auto wait_for = [&](int t, int need) -> Seconds {
    if (need <= 0) return 0;
    const auto& v = frees[t];
    auto it = std::lower_bound(v.begin(), v.end(), need,
                               [](const std::pair<Seconds, int>& e, int n) { return e.second < n; });
    return it == v.end() ? kNever : std::max(0.0, it->first - state.now());
  };
  if (free_left > 0 && !incremental) {
    for (JobId id : state.queued()) {
      const JobInfo& j = *state.job(id);
      const int d = opt.elastic && j.elastic() ? j.base_workers : j.requested_workers;
      double best = 0;
      for (int t = 0; t < n_types; ++t) best = std::max(best, j.Thr(t, d));
      const double key = opt.fifo ? j.spec.submit_time : (best > 0 ? j.remaining_work / best : kNever);
      queue.push_back({key, j.spec.submit_time, id, d});
    }
  }
  // Admission order, taken lazily from a heap: the walk usually stops long
  // before the end of the queue (when no GPU is left), so most of the queue is
  // never sorted. (key, submit, id) is a total order: the same order as a sort.
  auto later = [](const Queued& a, const Queued& b) {
    return std::tie(a.key, a.submit, a.id) > std::tie(b.key, b.submit, b.id);
  };
  if (!incremental) std::make_heap(queue.begin(), queue.end(), later);
  std::vector<int> types;
  const SchedulerConfig& cfg = state.config();
  // A job needing more GPUs than are left anywhere cannot start; it still waits
  // for its fastest type (type_aware). Exact when min_type_speed <= 1 (then a job
  // has an allowed type iff it has a fastest one).
  const bool skip_big = opt.min_type_speed <= 1;
  auto admit = [&](const Queued& q) {
      const JobInfo& j = *state.job(q.id);
      const bool migrating = q.alloc >= 0;
      const int d = q.demand;
      if (skip_big && d > free_left) {
        const int f = opt.type_aware ? FastestType(j, n_types, d) : -1;
        if (f >= 0) ahead[f] += d;
        return;
      }
      types.clear();
      double fastest = 0;
      for (int t = 0; t < n_types; ++t) fastest = std::max(fastest, j.Thr(t, d));
      for (int t = 0; t < n_types; ++t) {
        if (j.Allowed(t, d) && j.Thr(t, d) >= opt.min_type_speed * fastest) {
          // Insertion keeps equal-speed types in index order (a stable sort).
          auto pos = types.end();
          while (pos != types.begin() && j.Thr(*(pos - 1), d) < j.Thr(t, d)) --pos;
          types.insert(pos, t);
        }
      }
      const bool flexible = opt.elastic && j.elastic();
      const bool may_loan = opt.use_loaned && (flexible || opt.inelastic_on_loaned);
      const int fast = opt.type_aware && !types.empty() ? FastestType(j, n_types, d) : -1;
      // Whether starting (or moving) on type t beats the alternative.
      auto worth = [&](int t) {
        if (!opt.type_aware) return true;
        if (migrating) {
          // A move pays when the remaining time on t plus its cost (a rescale
          // pause, or a restart plus the work since the last checkpoint) is
          // shorter than staying.
          const Alloc& a = allocs[q.alloc];
          if (!Slower(j, a.home, t, d)) return false;  // only to a faster type
          const double rt = RemainingTime(j, t, d);
          const double cost = a.flexible ? cfg.RescalePause(j.spec)
                                         : cfg.restart_pause +
                                               std::max(0.0, j.checkpoint_remaining - j.remaining_work) /
                                                   j.Thr(t, d);
          const double stay = j.throughput > 0 ? std::max(0.0, j.paused_until - state.now()) +
                                                     j.remaining_work / j.throughput
                                               : kNever;
          return rt + cost < stay;
        }
        if (fast < 0 || !Slower(j, t, fast, d)) return true;
        // A slower type: start there only when the estimated completion is earlier
        // than waiting W for the fast type. The job migrates when the fast type
        // frees up, so starting slow finishes at min(R_slow, W + cost + R_fast -
        // s W) against W + R_fast: it pays when R_slow <= W or s W > cost.
        const Seconds w = wait_for(fast, ahead[fast] + d - index.Total(fast, true, may_loan));
        const double s = j.Thr(t, d) / j.Thr(fast, d);
        const double cost =
            flexible ? cfg.RescalePause(j.spec)
                     : cfg.restart_pause + s * std::min(w, cfg.checkpoint_interval) / 2;
        return RemainingTime(j, t, d) <= w || s * w > cost;
      };
      Placement p;
      int home = -1;
      for (int phase = 0; phase < (may_loan ? 2 : 1) && p.empty(); ++phase) {
        for (FreeIndex* from : {&idle, &index}) {
          for (int t : types) {
            if (!worth(t)) continue;
            p = from->Find(t, true, phase == 1, d, false);
            if (!p.empty()) {
              home = t;
              break;
            }
          }
          if (!p.empty()) break;
        }
      }
      if (fast >= 0 && (p.empty() || home != fast)) ahead[fast] += d;  // still waits for `fast`
      if (p.empty()) return;  // backfill: later jobs may still fit
      for (const auto& [sid, n] : p) {
        const int i = state.server_index(sid);
        index.Take(i, n);
        idle.Set(i, std::max(0, idle.avail(i) - n));
      }
      free_left -= d;
      if (migrating) {
        // Its GPUs on the slow type are free for later jobs of this round.
        Alloc& m = allocs[q.alloc];
        free_left += m.BaseSum();
        m.ForBase([&](ServerId sid, int n) {
          const int i = state.server_index(sid);
          index.Set(i, index.avail(i) + n);
          idle.Set(i, idle.avail(i) + n);
        });
        for (const auto& [sid, n] : m.flex) {
          const int i = state.server_index(sid);
          idle.Set(i, idle.avail(i) + n);
        }
        m.base.Assign(p);
        m.fixed = nullptr;
        m.flex.clear();
        m.home = home;
        m.moved = true;
        return;
      }
      Alloc& a = allocs.Add();
      a.job = &j;
      a.is_new = true;
      a.flexible = flexible;
      a.home = home;
      a.base.Assign(p);
  };
  if (incremental) {
    // The same order from the kept queue: per demand, the first entry of
    // every bucket that still fits the GPUs left, smallest (key, submit, id)
    // first. Skipped jobs (they did not fit a placement) stay for later rounds.
    keep->Walk(state, [&] { return free_left; }, [&](const AdmissionQueue::Entry& e, int d) {
      admit({e.key, e.submit, e.id, d});
    });
  } else {
    while (!queue.empty() && free_left > 0) {
      std::pop_heap(queue.begin(), queue.end(), later);
      const Queued q = queue.back();
      queue.pop_back();
      admit(q);
    }
  }

  // 3. Elastic allocation of the GPUs left, per GPU type.
  if (opt.elastic) {
    std::vector<std::vector<Alloc*>> by_type(state.num_types());
    for (Alloc& a : allocs) {
      if (a.flexible && a.home >= 0) by_type[a.home].push_back(&a);
    }
    for (int t = 0; t < state.num_types(); ++t) {
      AllocateExtras(by_type[t], index.Total(t, true, opt.use_loaned), opt, state.config());
    }
    if (opt.hetero_dp && opt.use_loaned && state.num_types() > 1) AllocateGuests(allocs, index, state, opt);
    // 4. Placement of flexible workers: keep current ones (loaned first) ...
    for (Alloc& a : allocs) {
      if (!a.flexible) continue;
      static thread_local std::vector<std::tuple<int, int, ServerId>> order;
      order.clear();
      for (const auto& [sid, n] : a.flex) {
        order.emplace_back(state.server(sid)->loaned() ? 0 : 1, -n, sid);
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
    // ... then add new ones on loaned servers (so that returning a loaned server
    // usually needs only shrinks), where the job already is first, then best
    // fit; then on training servers the same way. A job whose base workers sit
    // on loaned servers (training was full when it started) takes training
    // servers first instead: the next round counts those as its base, so its
    // loaned workers become flexible and a reclaim can shrink them away.
    for (Alloc& a : allocs) {
      if (!a.flexible) continue;
      int want = a.extra - a.kept_home;
      bool base_on_loaned = false;
      for (const auto& [sid, n] : a.base) base_on_loaned = base_on_loaned || state.server(sid)->loaned();
      const bool pools[2] = {!base_on_loaned, base_on_loaned};
      for (const bool loaned_pool : pools) {
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

  // 5. The actions: starts for admitted jobs, resizes for changed ones.
  std::vector<Action> actions;
  for (Alloc& a : allocs) {
    if (!a.is_new && !a.moved && !a.flexible) continue;  // base == its placement
    // A running job that keeps its placement (most, every round) needs no copy.
    if (!a.is_new && !a.moved && SumEquals(a.base, a.kept, a.job->placement) &&
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
