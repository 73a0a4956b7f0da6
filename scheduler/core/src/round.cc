#include "round_alloc.h"

#include <algorithm>
#include <tuple>

#include "aryl/sched/queues.h"
#include "aryl/sched/resize_rule.h"
#include "quota.h"

namespace aryl::sched::internal {

bool Usable(const ServerInfo& s, bool use_loaned) {
  if (!s.usable()) return false;
  return s.state == ServerState::kAvailable || use_loaned;
}

// --- The round -----------------------------------------------------------------------

namespace {

const IdSet kNoJobs;

// Splits a running elastic job's placement into `base_workers` base workers
// (training servers first, then where it has most workers) and the rest.
void Split(const ClusterState& state, const JobInfo& job, FlatPlacement* base, FlatPlacement* flex) {
  if (job.placement.size() == 1) {  // most jobs: no order to find
    const auto& [sid, n] = *job.placement.begin();
    const int b = std::min(job.base_workers, n);
    if (b > 0) base->Append(sid, b);
    if (n - b > 0) flex->Append(sid, n - b);
    return;
  }
  if (job.base_workers >= job.workers) {  // at its base size: every worker is a base one
    for (const auto& [sid, n] : job.placement) base->Append(sid, n);
    return;
  }
  // (loaned, -count, position in the placement, i.e. server order): base
  // workers go in this order; the halves are then written in server order.
  static thread_local std::vector<std::tuple<int, int, int>> order;
  static thread_local std::vector<int> base_of;
  order.clear();
  int k = 0;
  for (const auto& [sid, n] : job.placement) {
    order.emplace_back(state.server(sid)->loaned() ? 1 : 0, -n, k++);
  }
  std::sort(order.begin(), order.end());
  base_of.assign(order.size(), 0);
  int need = job.base_workers;
  for (const auto& [loaned, neg, pos] : order) {
    const int b = std::min(need, -neg);
    need -= b;
    base_of[pos] = b;
  }
  k = 0;
  for (const auto& [sid, n] : job.placement) {
    const int b = base_of[k++];
    if (b > 0) base->Append(sid, b);
    if (n - b > 0) flex->Append(sid, n - b);
  }
}

}  // namespace

std::vector<Action> RunRound(const ClusterState& state, const RoundOptions& opt, AdmissionQueue* keep,
                             Seconds* wakeup) {
  if (wakeup) *wakeup = kNever;
  // Nothing to admit, migrate or resize: every running job keeps its placement.
  if (!opt.elastic && state.queued().empty() && !(opt.type_aware && state.num_types() > 1)) {
    return {};
  }
  // A kept queue serves admission unless running jobs compete in it
  // (migrations to a faster type) or min_type_speed > 1 changes which jobs
  // the walk may skip.
  // With queues (queues.h) admission runs in two passes over the whole
  // queue (quota first, then borrowing by fair share): no kept queue.
  const QueueConfig* queues = state.config().queues.get();
  const bool incremental = keep != nullptr && queues == nullptr &&
                           !(opt.type_aware && state.num_types() > 1) && opt.min_type_speed <= 1;
  if (incremental) keep->Sync(state, opt);
  const auto& servers = state.servers();
  const int n_servers = static_cast<int>(servers.size());
  // Scratch kept across rounds (its capacity): a large buffer allocated and
  // freed every round costs the allocator more than the round itself.
  static thread_local std::vector<bool> enabled;
  static thread_local std::vector<int> avail, idle_avail;
  enabled.assign(n_servers, false);
  avail.assign(n_servers, 0);
  for (int i = 0; i < n_servers; ++i) {
    enabled[i] = Usable(servers[i], opt.use_loaned);
    avail[i] = enabled[i] ? servers[i].spec.gpus : 0;
  }
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
  const bool two_types = opt.type_aware && state.num_types() > 1;
  const bool flexible_only = opt.elastic && !two_types;
  // With migrations (two GPU types) a job outside the elastic allocation needs
  // an Alloc only when it may migrate: it runs slower than it could
  // (ClusterState::running_slow()) and is not left to finish where it is.
  // The others keep their placement; only the wait estimate (`frees` below)
  // reads them, from the state.
  const bool from_free = fixed_running || flexible_only || two_types;
  if (from_free) {
    for (int i = 0; i < n_servers; ++i) {
      if (enabled[i]) avail[i] = servers[i].free();
    }
  }
  // `slow`: the job is in running_slow() (read only with two types).
  auto add_running = [&](JobId id, bool slow) {
    const JobInfo& j = *state.job(id);
    // A job left to finish on a reclaimed server keeps its placement.
    const bool frozen = state.OnDraining(j);
    const bool flexible = opt.elastic && j.elastic() && !frozen;
    if (flexible_only && !flexible) return;
    if (two_types && !flexible && (frozen || !slow)) return;
    Alloc& a = allocs.Add();
    a.job = &j;
    a.flexible = flexible;
    a.frozen = frozen;
    if (a.flexible) {
      Split(state, j, &a.base, &a.flex);
    } else {
      a.fixed = &j.placement;
    }
    if (from_free) {
      for (const auto& [sid, n] : a.flex) avail[state.server_index(sid)] += n;
    }
    // Home type: the slowest type its base uses (the pace of the job); the
    // first server's type, unless a later one of another type is slower
    // (ClusterState::PaceType's rule).
    double slowest = -1;  // Thr(home, workers), read only when types differ
    a.ForBase([&](ServerId sid, int n) {
      const int i = state.server_index(sid);
      if (!from_free) avail[i] -= n;
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
  };
  // Running jobs in increasing id order (build_frees below relies on it).
  if (fixed_running) {
    // none
  } else if (flexible_only) {
    for (JobId id : state.running_elastic()) add_running(id, false);
  } else if (two_types) {
    // running_elastic() and running_slow() merged (both sorted by id).
    const IdSet& el = opt.elastic ? state.running_elastic() : kNoJobs;
    const IdSet& sl = state.running_slow();
    auto e = el.begin();
    auto s = sl.begin();
    while (e != el.end() || s != sl.end()) {
      if (s == sl.end() || (e != el.end() && *e < *s)) {
        add_running(*e++, false);
      } else if (e == el.end() || *s < *e) {
        add_running(*s++, true);
      } else {
        ++e;
        add_running(*s++, true);
      }
    }
  } else {
    for (JobId id : state.running()) add_running(id, false);
  }
  // `index` counts flexible workers' GPUs as free (base demands displace them);
  // `idle` counts only GPUs nobody holds, so that admission displaces flexible
  // workers only where no idle GPUs fit. Only admission reads it: it is built
  // when the first job is tried (most rounds admit nobody).
  static thread_local FreeIndex index, idle;
  index.Reset(state, avail, enabled);
  bool have_idle = false;
  auto build_idle = [&] {
    if (have_idle) return;
    have_idle = true;
    idle_avail = avail;
    for (const Alloc& a : allocs) {
      for (const auto& [sid, n] : a.flex) idle_avail[state.server_index(sid)] -= n;
    }
    idle.Reset(state, idle_avail, enabled);
  };

  // 2. Admission: SJF (remaining time at base size) or FIFO, with backfill.
  struct Queued {
    double key;
    Seconds submit;
    JobId id;
    int demand;
    int alloc = -1;  // migration candidate: its index in `allocs`
    int priority = 0;  // with queues: its class (higher admits first)
  };
  // GPUs admission and migration may use at most (flexible workers count as
  // free). With none, no job starts or moves: the queue is not even looked at,
  // so a round costs nothing per queued job while the cluster is full.
  const int n_types = state.num_types();
  const SchedulerConfig& cfg = state.config();
  int free_left = 0;
  for (int t = 0; t < n_types; ++t) free_left += index.Total(t, true, opt.use_loaned);
  // With queues a full cluster may still owe a queue its quota (rule 4).
  if (free_left == 0 && !opt.elastic && queues == nullptr) return {};
  static thread_local QuotaLedger ledger;
  if (queues) ledger.Reset(state, *queues, opt.elastic);
  // Scratch kept across rounds (its capacity): one allocation, not one per round.
  static thread_local std::vector<Queued> queue;
  queue.clear();
  // Slow GPU types (type_aware): `frees[t]` is when the base GPUs of type t held
  // by running jobs free up (estimated finish, cumulative GPUs), for the wait
  // estimate; a running job whose type is slower than its fastest one is a
  // migration candidate and competes for the fast type in admission order.
  // `frees` is built when a wait is first estimated (most rounds estimate
  // none), from the running jobs as the round found them: before the first
  // migration changes one.
  static thread_local std::vector<std::vector<std::pair<Seconds, int>>> frees;
  const bool waits = free_left > 0 && opt.type_aware && n_types > 1;
  bool have_frees = false;
  const size_t running_allocs = allocs.size();
  auto build_frees = [&] {
    if (have_frees) return;
    have_frees = true;
    frees.resize(n_types);
    for (auto& v : frees) v.clear();
    // Every running job: with its Alloc (allocs[0, running_allocs), in
    // increasing id order like running()), or as the state holds it.
    size_t k = 0;
    for (JobId id : waits ? state.running() : kNoJobs) {
      int home = -1, d = 0;
      if (k < running_allocs && allocs[k].job->spec.id == id) {
        const Alloc& a = allocs[k++];
        home = a.home;
        d = a.BaseSum();
      } else {
        const JobInfo& j = *state.job(id);
        home = state.PaceType(j, j.placement);
        d = j.workers;
      }
      if (home < 0 || d <= 0) continue;
      frees[home].emplace_back(state.EstimatedFinishTime(id), d);
    }
    for (auto& v : frees) {
      std::sort(v.begin(), v.end());
      for (size_t i = 1; i < v.size(); ++i) v[i].second += v[i - 1].second;
    }
  };
  std::vector<int> ahead(n_types, 0);  // demand of earlier jobs still waiting per type
  if (waits) {
    for (size_t k = 0; k < allocs.size(); ++k) {
      const Alloc& a = allocs[k];
      const JobInfo& j = *a.job;
      const int d = a.BaseSum();
      if (a.home < 0 || d <= 0) continue;
      if (a.frozen) continue;  // left to finish where it is
      const int f = j.FastestType(n_types, d);
      if (f < 0 || !j.Slower(a.home, f, d)) continue;
      // An elastic move is a voluntary resize: not within the job's dwell
      // (resize_rule.h, 2); the round when it ends looks again.
      if (a.flexible && InDwell(cfg, j, state.now())) {
        if (wakeup) *wakeup = std::min(*wakeup, DwellEnd(cfg, j));
        continue;
      }
      const double key = opt.fifo ? j.spec.submit_time : RemainingTime(j, f, d);
      queue.push_back({key, j.spec.submit_time, j.spec.id, d, static_cast<int>(k)});
    }
  }
  // Seconds until `need` more GPUs of type t free up (fluid estimate, ignores
  // fragmentation); kNever when the running jobs never free that many.
  auto wait_for = [&](int t, int need) -> Seconds {
    if (need <= 0) return 0;
    build_frees();
    const auto& v = frees[t];
    auto it = std::lower_bound(v.begin(), v.end(), need,
                               [](const std::pair<Seconds, int>& e, int n) { return e.second < n; });
    return it == v.end() ? kNever : std::max(0.0, it->first - state.now());
  };
  if ((free_left > 0 || queues) && !incremental) {
    for (JobId id : state.queued()) {
      // With no GPU free only a job within its quota matters (it may take
      // quota back): skip the queues that hold their quota already.
      if (free_left == 0 && queues && !ledger.UnderNominal(state.job(id)->queue)) continue;
      const AdmissionPlace place = AdmissionOf(state, opt, *state.job(id));
      queue.push_back({place.key, place.submit, place.id, place.demand});
    }
  }
  if (queues) {
    for (Queued& q : queue) q.priority = state.job(q.id)->spec.priority;
  }
  // Admission order, taken lazily from a heap: the walk usually stops long
  // before the end of the queue (when no GPU is left), so most of the queue is
  // never sorted. (key, submit, id) is a total order: the same order as a sort.
  auto later = [](const Queued& a, const Queued& b) {
    return std::make_tuple(-a.priority, a.key, a.submit, a.id) > std::make_tuple(-b.priority, b.key, b.submit, b.id);
  };
  if (!incremental) std::make_heap(queue.begin(), queue.end(), later);
  std::vector<int> types;
  // A job needing more GPUs than are left anywhere cannot start; it still waits
  // for its fastest type (type_aware). Exact when min_type_speed <= 1 (then a job
  // has an allowed type iff it has a fastest one).
  const bool skip_big = opt.min_type_speed <= 1;
  // With queues: pass 1 admits jobs within their queue's nominal quota and
  // defers the others; pass 2 admits the deferred ones by fair share. A job
  // within quota that finds no GPUs is a need (quota.h).
  int pass = 0;
  static thread_local std::vector<Queued> deferred;
  static thread_local std::vector<QuotaNeed> needs;
  deferred.clear();
  needs.clear();
  auto admit = [&](const Queued& q) {
      const JobInfo& j = *state.job(q.id);
      const bool migrating = q.alloc >= 0;
      const int d = q.demand;
      int quota_type = -1;  // pass 1: the type it is within quota on
      if (pass == 1) {
        quota_type = ledger.WithinType(j, d);
        if (quota_type < 0) {
          deferred.push_back(q);
          return;
        }
      }
      auto need = [&] {
        if (pass != 1 || migrating) return;
        ledger.MarkStarving(j.queue);
        const int short_of = d - index.Total(quota_type, true, false);
        if (short_of > 0) needs.push_back({j.queue, quota_type, short_of, j.queued_since, j.spec.id});
      };
      if (skip_big && d > free_left) {
        need();
        const int f = opt.type_aware ? j.FastestType(n_types, d) : -1;
        if (f >= 0) ahead[f] += d;
        return;
      }
      build_idle();  // before the first Take: from the round's initial counts
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
      const int fast = opt.type_aware && !types.empty() ? j.FastestType(n_types, d) : -1;
      // Whether starting (or moving) on type t beats the alternative.
      auto worth = [&](int t) {
        if (!opt.type_aware) return true;
        if (migrating) {
          // A move pays when the remaining time on t plus its cost (a rescale
          // pause, or a restart plus the work since the last checkpoint) is
          // shorter than staying.
          const Alloc& a = allocs[q.alloc];
          if (!j.Slower(a.home, t, d)) return false;  // only to a faster type
          const double rt = RemainingTime(j, t, d);
          const double cost = a.flexible ? ResizePause(cfg, j)
                                         : cfg.restart_pause +
                                               std::max(0.0, j.checkpoint_remaining - j.remaining_work) /
                                                   j.Thr(t, d);
          const double stay = j.throughput > 0 ? std::max(0.0, j.paused_until - state.now()) +
                                                     j.remaining_work / j.throughput
                                               : kNever;
          return rt + cost < stay;
        }
        if (fast < 0 || !j.Slower(t, fast, d)) return true;
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
            // Quota gates training servers only: loaned ones belong to no team.
            const bool training = pass == 0                 ? true
                                  : pass == 1               ? ledger.Within(j.queue, t, d)
                                                            : ledger.CanBorrow(j.queue, t, d);
            if (!training && phase == 0) continue;
            p = from->Find(t, training, phase == 1, d, false);
            if (!p.empty()) {
              home = t;
              break;
            }
          }
          if (!p.empty()) break;
        }
      }
      if (fast >= 0 && (p.empty() || home != fast)) ahead[fast] += d;  // still waits for `fast`
      if (p.empty()) {
        need();
        return;  // backfill: later jobs may still fit
      }
      if (pass > 0) ledger.Charge(j.queue, p, +1);
      for (const auto& [sid, n] : p) {
        const int i = state.server_index(sid);
        index.Take(i, n);
        idle.Set(i, std::max(0, idle.avail(i) - n));
      }
      free_left -= d;
      if (migrating) {
        // Its GPUs on the slow type are free for later jobs of this round.
        build_frees();  // before its alloc changes
        Alloc& m = allocs[q.alloc];
        if (pass > 0) m.ForBase([&](ServerId sid, int n) { ledger.ChargeServer(j.queue, sid, -n); });
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
    if (queues) pass = 1;
    // Pass 1 with queues walks the whole queue: a job within its quota needs
    // its GPUs back even when none are free.
    while (!queue.empty() && (free_left > 0 || queues)) {
      std::pop_heap(queue.begin(), queue.end(), later);
      const Queued q = queue.back();
      queue.pop_back();
      admit(q);
    }
  }
  if (queues) {
    // Rule 4: a queue owed its quota takes it back from borrowers, in a
    // round of its own; the next round (kQuotaRoundGap later) admits it.
    Seconds eligible = kNever;
    for (const QuotaNeed& n : needs) {
      std::vector<Action> preempts = ledger.Reclaim(n, &eligible);
      if (!preempts.empty()) {
        if (wakeup) *wakeup = state.now() + kQuotaRoundGap;
        return preempts;
      }
    }
    if (wakeup) *wakeup = std::min(*wakeup, eligible);
    // Pass 2: the deferred jobs by fair share (QuotaLedger::ByShare).
    pass = 2;
    static thread_local std::vector<int> deferred_queue;
    deferred_queue.clear();
    for (const Queued& q : deferred) deferred_queue.push_back(state.job(q.id)->queue);
    ledger.ByShare(deferred_queue, [&] { return free_left > 0; }, [&](size_t i) { admit(deferred[i]); });
  }

  // 3. Elastic allocation of the GPUs left, per GPU type, and 4. placement
  // of the flexible workers (elastic_alloc.cc).
  if (opt.elastic) AllocateElastic(allocs, index, state, opt, wakeup);

  // 5. The actions: starts for admitted jobs, resizes for changed ones.
  return RoundActions(allocs, state, opt);
}

}  // namespace aryl::sched::internal
