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

// --- FreeIndex -----------------------------------------------------------------------

FreeIndex::FreeIndex(const ClusterState& state, const std::vector<int>& avail,
                     const std::vector<bool>& enabled)
    : state_(state), avail_(avail), group_of_(avail.size(), -1) {
  for (const auto& s : state.servers()) max_gpus_ = std::max(max_gpus_, s.spec.gpus);
  const int groups = state.num_types() * 2;
  words_ = static_cast<int>((avail.size() + 63) / 64);
  bits_.assign(static_cast<size_t>(groups) * (max_gpus_ + 1) * words_, 0);
  counts_.assign(static_cast<size_t>(groups) * (max_gpus_ + 1), 0);
  totals_.assign(groups, 0);
  for (size_t i = 0; i < avail.size(); ++i) {
    if (!enabled[i]) {
      avail_[i] = 0;
      continue;
    }
    const ServerInfo& s = state.servers()[i];
    group_of_[i] = Group(s.type, s.loaned());
    avail_[i] = std::clamp(avail_[i], 0, s.spec.gpus);
    Insert(Bucket(group_of_[i], avail_[i]), static_cast<int>(i));
    totals_[group_of_[i]] += avail_[i];
  }
}

int FreeIndex::First(int b) const {
  if (counts_[b] == 0) return -1;
  const std::uint64_t* w = &bits_[static_cast<size_t>(b) * words_];
  for (int k = 0; k < words_; ++k) {
    if (w[k]) return k * 64 + std::countr_zero(w[k]);
  }
  return -1;
}

void FreeIndex::Insert(int b, int server) {
  std::uint64_t& w = bits_[static_cast<size_t>(b) * words_ + server / 64];
  const std::uint64_t bit = std::uint64_t{1} << (server % 64);
  if (!(w & bit)) {
    w |= bit;
    ++counts_[b];
  }
}

void FreeIndex::Erase(int b, int server) {
  std::uint64_t& w = bits_[static_cast<size_t>(b) * words_ + server / 64];
  const std::uint64_t bit = std::uint64_t{1} << (server % 64);
  if (w & bit) {
    w &= ~bit;
    --counts_[b];
  }
}

void FreeIndex::Set(int server, int value) {
  const int g = group_of_[server];
  if (g < 0) return;
  Erase(Bucket(g, avail_[server]), server);
  totals_[g] += value - avail_[server];
  avail_[server] = value;
  Insert(Bucket(g, value), server);
}

int FreeIndex::Total(int type, bool training, bool loaned) const {
  return (training ? totals_[Group(type, false)] : 0) + (loaned ? totals_[Group(type, true)] : 0);
}

int FreeIndex::Pick(int type, bool training, bool loaned, int n, bool prefer_loaned) const {
  int order[2];
  int count = 0;
  if (prefer_loaned) {
    if (loaned) order[count++] = Group(type, true);
    if (training) order[count++] = Group(type, false);
  } else {
    if (training) order[count++] = Group(type, false);
    if (loaned) order[count++] = Group(type, true);
  }
  for (int k = 0; k < count; ++k) {
    for (int a = std::max(n, 1); a <= max_gpus_; ++a) {
      const int s = First(Bucket(order[k], a));
      if (s >= 0) return s;
    }
  }
  for (int k = 0; k < count; ++k) {
    for (int a = std::min(n, max_gpus_); a >= 1; --a) {
      const int s = First(Bucket(order[k], a));
      if (s >= 0) return s;
    }
  }
  return -1;
}

Placement FreeIndex::Find(int type, bool training, bool loaned, int n, bool prefer_loaned) {
  if (n <= 0 || Total(type, training, loaned) < n) return {};
  // Largest servers first until the rest fits one server (best fit): as few
  // servers as possible. Takes tentatively, then gives everything back.
  std::vector<std::pair<int, int>> taken;  // server, amount
  Placement placement;
  int need = n;
  while (need > 0) {
    int s = Pick(type, training, loaned, need, prefer_loaned);
    if (s < 0) break;
    const int take = std::min(need, avail_[s]);
    taken.emplace_back(s, take);
    placement[state_.servers()[s].spec.id] += take;
    Take(s, take);
    need -= take;
  }
  for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
    Set(it->first, avail_[it->first] + it->second);
  }
  if (need > 0) return {};
  return placement;
}

// --- AdmissionQueue ---------------------------------------------------------------

void AdmissionQueue::Insert(const ClusterState& state, const RoundOptions& opt, const JobInfo& j) {
  const int d = opt.elastic && j.elastic() ? j.base_workers : j.requested_workers;
  double best = 0;
  for (int t = 0; t < state.num_types(); ++t) best = std::max(best, j.Thr(t, d));
  const Entry e{opt.fifo ? j.spec.submit_time : (best > 0 ? j.remaining_work / best : kNever),
                j.spec.submit_time, j.spec.id};
  auto [it, inserted] = where_.try_emplace(j.spec.id, d, e);
  if (!inserted) {
    buckets_[it->second.first].erase(it->second.second);
    it->second = {d, e};
  }
  buckets_[d].insert(e);
}

void AdmissionQueue::Sync(const ClusterState& state, const RoundOptions& opt) {
  const auto& log = state.queue_log();
  if (state.queue_log_id() != log_id_ || cursor_ > log.size()) {
    buckets_.clear();
    where_.clear();
    for (JobId id : state.queued()) Insert(state, opt, *state.job(id));
    log_id_ = state.queue_log_id();
    cursor_ = log.size();
    return;
  }
  for (; cursor_ < log.size(); ++cursor_) {
    const JobInfo* j = state.job(log[cursor_]);
    if (j && j->status == JobStatus::kQueued) Insert(state, opt, *j);
  }
}

void AdmissionQueue::Walk(const ClusterState& state, const std::function<int()>& left,
                          const std::function<void(const Entry&, int)>& admit) {
  struct Cursor {
    int demand;
    std::set<Entry>* set;
    std::set<Entry>::iterator it;
  };
  std::vector<Cursor> cursors;
  cursors.reserve(buckets_.size());
  for (auto& [d, set] : buckets_) cursors.push_back({d, &set, set.begin()});
  while (true) {
    const int free_left = left();
    if (free_left <= 0) return;
    Cursor* best = nullptr;
    for (Cursor& c : cursors) {
      if (c.demand > free_left) break;  // buckets ascend by demand
      // Jobs that left the queue since they entered it go now.
      while (c.it != c.set->end()) {
        const JobInfo* j = state.job(c.it->id);
        if (j && j->status == JobStatus::kQueued) break;
        where_.erase(c.it->id);
        c.it = c.set->erase(c.it);
      }
      if (c.it != c.set->end() && (best == nullptr || *c.it < *best->it)) best = &c;
    }
    if (best == nullptr) return;
    const Entry e = *best->it;
    ++best->it;
    admit(e, best->demand);
  }
}

// --- The round -----------------------------------------------------------------------

namespace {

const std::set<JobId> kNoJobs;

struct Alloc {
  const JobInfo* job = nullptr;
  bool is_new = false;
  bool moved = false;     // running job migrated to a faster GPU type this round
  bool flexible = false;  // takes part in the elastic allocation
  int home = -1;          // GPU type of its base workers
  Placement base;
  // A running job outside the elastic allocation keeps its placement as its
  // base: read in place rather than copied (every round, every running job).
  const Placement* fixed = nullptr;
  const Placement& Base() const { return fixed ? *fixed : base; }
  Placement flex;         // current flexible workers (running jobs)
  int extra = 0;          // extra workers decided by the elastic allocation
  int guest_type = -1;    // hetero_dp: the other type it takes `guest` workers of
  int guest = 0;
  int kept_home = 0;      // workers of `kept` on the home type
  Placement kept;         // flexible workers after placement
};

int Sum(const Placement& p) {
  int n = 0;
  for (const auto& [s, c] : p) n += c;
  return n;
}

// Whether a + b (per server) equals `p`, without building the sum.
bool SumEquals(const Placement& a, const Placement& b, const Placement& p) {
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
void Split(const ClusterState& state, const JobInfo& job, Placement* base, Placement* flex) {
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
void AllocateGuests(std::vector<Alloc>& allocs, const FreeIndex& index, const ClusterState& state,
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
  static thread_local std::vector<Alloc> allocs;
  allocs.clear();
  allocs.reserve(state.running().size() + state.queued().size());
  // 1. Running jobs keep their base workers; flexible workers count as free.
  // Without elasticity or migrations a running job keeps its placement: the
  // free GPUs are the servers' own count, and running jobs need no Alloc.
  const bool fixed_running = incremental && !opt.elastic;
  if (fixed_running) {
    for (int i = 0; i < n_servers; ++i) {
      if (enabled[i]) avail[i] = servers[i].free();
    }
  }
  for (JobId id : fixed_running ? kNoJobs : state.running()) {
    const JobInfo& j = *state.job(id);
    Alloc a;
    a.job = &j;
    // A job left to finish on a reclaimed server keeps its placement.
    const bool frozen = state.OnDraining(j);
    a.flexible = opt.elastic && j.elastic() && !frozen;
    if (a.flexible) {
      Split(state, j, &a.base, &a.flex);
    } else {
      a.fixed = &j.placement;
    }
    // Home type: the slowest type its base uses (the pace of the job).
    double slowest = kNever;
    for (const auto& [sid, n] : a.Base()) {
      const int i = state.server_index(sid);
      avail[i] -= n;
      const double thr = j.Thr(servers[i].type, j.workers);
      if (a.home < 0 || thr < slowest) {
        slowest = thr;
        a.home = servers[i].type;
      }
    }
    allocs.push_back(std::move(a));
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
      const int d = Sum(a.Base());
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
        free_left += Sum(m.Base());
        for (const auto& [sid, n] : m.Base()) {
          const int i = state.server_index(sid);
          index.Set(i, index.avail(i) + n);
          idle.Set(i, idle.avail(i) + n);
        }
        for (const auto& [sid, n] : m.flex) {
          const int i = state.server_index(sid);
          idle.Set(i, idle.avail(i) + n);
        }
        m.base = std::move(p);
        m.fixed = nullptr;
        m.flex.clear();
        m.home = home;
        m.moved = true;
        return;
      }
      Alloc a;
      a.job = &j;
      a.is_new = true;
      a.flexible = flexible;
      a.home = home;
      a.base = std::move(p);
      allocs.push_back(std::move(a));
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
        for (const Placement* p : {&a.kept, &a.base}) {
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
    Placement desired = a.base;
    for (const auto& [sid, n] : a.kept) desired[sid] += n;
    if (a.flexible && (a.guest_type >= 0 ? !(state.PlacementThroughput(*a.job, desired) > 0)
                                         : !a.job->Allowed(a.home, Sum(desired)))) {
      desired = a.base;  // defensive: never emit a size the job may not run at
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
