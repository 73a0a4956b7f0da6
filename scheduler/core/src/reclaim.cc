#include "aryl/sched/reclaim.h"

#include <algorithm>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "aryl/sched/state.h"

namespace aryl::sched {
namespace {

// Largest size <= `limit` the job may run at on every GPU type in `placement`
// (by its curves), or 0 when none >= its base size exists.
int LargestAllowedSize(const ClusterState& state, const JobInfo& job, const Placement& placement,
                       int limit) {
  static thread_local std::vector<int> types;
  types.clear();
  for (const auto& [sid, n] : placement) {
    int t = state.servers()[state.server_index(sid)].type;
    if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
  }
  if (types.empty()) return 0;
  for (int w = limit; w >= job.base_workers; --w) {
    bool ok = true;
    for (int t : types) ok = ok && job.Allowed(t, w);
    if (ok) return w;
  }
  return 0;
}

// Removes `extra` workers from `placement`, loaned servers first (a later reclaim
// is then cheaper), then servers holding the fewest of the job's workers.
void Trim(const ClusterState& state, Placement& placement, int extra) {
  while (extra > 0 && !placement.empty()) {
    auto victim = placement.begin();
    auto key = [&](const Placement::value_type& e) {
      const ServerInfo& s = state.servers()[state.server_index(e.first)];
      return std::make_tuple(s.loaned() ? 0 : 1, e.second, e.first);
    };
    for (auto it = placement.begin(); it != placement.end(); ++it) {
      if (key(*it) < key(*victim)) victim = it;
    }
    const int take = std::min(extra, victim->second);
    victim->second -= take;
    extra -= take;
    if (victim->second == 0) placement.erase(victim);
  }
}

// GPU-seconds a preemption with `notice` seconds before the deadline costs the
// job: its work since the last checkpoint and the restart pause, or, when a
// checkpoint on notice fits and is cheaper, that checkpoint and the resume
// pause (no work lost). `*save` says which.
double PreemptLoss(const ClusterState& state, const JobInfo& job, Seconds notice, bool* save = nullptr) {
  const SchedulerConfig& c = state.config();
  const double lose = job.workers * (std::max(0.0, state.now() - job.checkpoint_time) + c.restart_pause);
  const Seconds ckpt = c.CheckpointSeconds(job.spec.state_bytes);
  const double keep = job.workers * (ckpt + c.resume_pause);
  const bool saves = notice >= ckpt && keep < lose;
  if (save) *save = saves;
  return saves ? keep : lose;
}

// Whether `job` is left to finish on a reclaimed server: it finishes, with
// time to spare for its checkpoint should the estimate slip, within the notice
// (SchedulerConfig::reclaim_lets_jobs_finish). Costs nothing.
bool LeftToFinish(const ClusterState& state, const JobInfo& job, Seconds notice) {
  const SchedulerConfig& c = state.config();
  if (!c.reclaim_lets_jobs_finish || !(notice > 0)) return false;
  const Seconds finish = state.EstimatedFinishTime(job.spec.id);
  return finish < kNever && finish - state.now() + c.CheckpointSeconds(job.spec.state_bytes) <= notice;
}

// The notices at which some job's cost on `servers` changes (its checkpoint
// starts to fit, or it is left to finish), ascending, those <= `notice` only.
std::vector<Seconds> CostSteps(const ClusterState& state, const std::vector<ServerId>& servers,
                               Seconds notice) {
  std::vector<Seconds> steps;
  const SchedulerConfig& c = state.config();
  for (ServerId sid : servers) {
    for (const auto& [jid, n] : state.server(sid)->jobs) {
      const JobInfo& job = *state.job(jid);
      const Seconds ckpt = c.CheckpointSeconds(job.spec.state_bytes);
      if (ckpt > 0 && ckpt <= notice) steps.push_back(ckpt);
      if (c.reclaim_lets_jobs_finish) {
        const Seconds finish = state.EstimatedFinishTime(jid);
        if (finish < kNever) {
          const Seconds need = finish - state.now() + ckpt;
          if (need > 0 && need <= notice) steps.push_back(need);
        }
      }
    }
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

// What happens to `job` (with current placement `cur`) when it loses its workers
// on `removed`: the new placement (empty = preempted).
template <typename Removed>
Placement AfterRemoval(const ClusterState& state, const JobInfo& job, const Placement& cur,
                       const Removed& removed, bool elastic) {
  Placement rest;
  int left = 0;
  for (const auto& [sid, n] : cur) {
    if (!removed(sid)) {
      rest[sid] = n;
      left += n;
    }
  }
  if (!elastic || !job.elastic() || left == 0) return {};
  const int size = LargestAllowedSize(state, job, rest, left);
  if (size == 0) return {};
  Trim(state, rest, left - size);
  return rest;
}

// Scratch view for the greedy strategy: placements after the servers chosen so
// far are returned.
struct Scratch {
  const ClusterState& state;
  bool elastic = true;
  Seconds notice = 0;
  std::unordered_map<JobId, Placement> placement;  // overrides; empty = preempted

  const Placement& Of(const JobInfo& job) const {
    auto it = placement.find(job.spec.id);
    return it == placement.end() ? job.placement : it->second;
  }
  // Cost of returning `sid` next; `apply` commits it. `freed` (when given)
  // receives how many other servers this leaves empty: a preemption frees the
  // job's workers everywhere, so one preemption may return several servers.
  ReclaimCost Cost(ServerId sid, bool apply, int* freed = nullptr) {
    ReclaimCost cost;
    const ServerInfo& s = *state.server(sid);
    const auto removed = [sid](ServerId x) { return x == sid; };
    static thread_local std::vector<std::pair<ServerId, int>> dropped;  // other server -> workers leaving it
    dropped.clear();
    for (const auto& [jid, unused] : s.jobs) {
      const JobInfo& job = *state.job(jid);
      const Placement& cur = Of(job);
      if (cur.empty() || !cur.count(sid)) continue;
      if (LeftToFinish(state, job, notice)) continue;  // stays; costs nothing
      Placement next = AfterRemoval(state, job, cur, removed, elastic);
      if (next.empty()) {
        cost.preemptions++;
        cost.lost_gpu_seconds += PreemptLoss(state, job, notice);
      } else {
        int w = 0;
        for (const auto& [x, n] : next) w += n;
        cost.lost_gpu_seconds += w * state.config().RescalePause(job.spec);
      }
      if (freed) {
        for (const auto& [other, n] : cur) {
          if (other == sid) continue;
          auto it = next.find(other);
          const int stays = it == next.end() ? 0 : it->second;
          if (n > stays) {
            auto d = std::find_if(dropped.begin(), dropped.end(), [other = other](const auto& e) { return e.first == other; });
            if (d == dropped.end()) {
              dropped.emplace_back(other, n - stays);
            } else {
              d->second += n - stays;
            }
          }
        }
      }
      if (apply) placement[jid] = std::move(next);
    }
    if (freed) {
      *freed = 0;
      for (const auto& [other, n] : dropped) {
        if (state.server(other)->loaned() && Used(other) == n) ++*freed;
      }
    }
    return cost;
  }
  int Used(ServerId sid) const {
    int used = 0;
    for (const auto& [jid, unused] : state.server(sid)->jobs) {
      const Placement& cur = Of(*state.job(jid));
      auto it = cur.find(sid);
      if (it != cur.end()) used += it->second;
    }
    return used;
  }
};

// What returning one server does to each of its jobs when no other server has
// been returned yet: the same at every notice, so the greedy's first pass at
// each notice step prices it again without rebuilding placements. Price(sid,
// notice) equals Scratch::Cost(sid, false, &freed) on an empty scratch, term
// for term and in the same order.
class FirstRemovals {
 public:
  FirstRemovals(const ClusterState& state, bool elastic) : state_(state), elastic_(elastic) {}

  ReclaimCost Price(const Scratch& empty, ServerId sid, Seconds notice, int* freed) {
    const std::vector<Part>& parts = PartsOf(sid);
    ReclaimCost cost;
    static thread_local std::vector<std::pair<ServerId, int>> dropped;
    dropped.clear();
    for (const Part& part : parts) {
      const JobInfo& job = *part.job;
      if (LeftToFinish(state_, job, notice)) continue;  // stays; costs nothing
      if (part.preempted) {
        cost.preemptions++;
        cost.lost_gpu_seconds += PreemptLoss(state_, job, notice);
      } else {
        cost.lost_gpu_seconds += part.workers_after * state_.config().RescalePause(job.spec);
      }
      for (const auto& [other, n] : part.dropped) {
        auto d = std::find_if(dropped.begin(), dropped.end(),
                              [other = other](const auto& e) { return e.first == other; });
        if (d == dropped.end()) {
          dropped.emplace_back(other, n);
        } else {
          d->second += n;
        }
      }
    }
    *freed = 0;
    for (const auto& [other, n] : dropped) {
      if (state_.server(other)->loaned() && empty.Used(other) == n) ++*freed;
    }
    return cost;
  }

 private:
  struct Part {
    const JobInfo* job;
    bool preempted;
    int workers_after;
    std::vector<std::pair<ServerId, int>> dropped;  // other server -> workers leaving it
  };
  const std::vector<Part>& PartsOf(ServerId sid) {
    auto [it, fresh] = parts_.try_emplace(sid);
    if (!fresh) return it->second;
    const auto removed = [sid](ServerId x) { return x == sid; };
    for (const auto& [jid, unused] : state_.server(sid)->jobs) {
      const JobInfo& job = *state_.job(jid);
      const Placement& cur = job.placement;
      if (cur.empty() || !cur.count(sid)) continue;
      const Placement next = AfterRemoval(state_, job, cur, removed, elastic_);
      Part part{&job, next.empty(), 0, {}};
      for (const auto& [x, n] : next) part.workers_after += n;
      for (const auto& [other, n] : cur) {
        if (other == sid) continue;
        auto f = next.find(other);
        const int stays = f == next.end() ? 0 : f->second;
        if (n > stays) part.dropped.emplace_back(other, n - stays);
      }
      it->second.push_back(std::move(part));
    }
    return it->second;
  }
  const ClusterState& state_;
  const bool elastic_;
  std::unordered_map<ServerId, std::vector<Part>> parts_;
};

std::uint64_t Binomial(int n, int k, std::uint64_t cap) {
  if (k < 0 || k > n) return 0;
  k = std::min(k, n - k);
  std::uint64_t r = 1;
  for (int i = 1; i <= k; ++i) {
    r = r * static_cast<std::uint64_t>(n - k + i) / static_cast<std::uint64_t>(i);
    if (r > cap) return cap + 1;
  }
  return r;
}

// The greedy strategy's choice of `need` busy servers at `notice`.
// `first` serves the costs of the first pass (nothing returned yet).
std::vector<ServerId> GreedyChoice(const ClusterState& state, const std::vector<ServerId>& busy,
                                   int need, bool elastic, Seconds notice, FirstRemovals& first) {
  std::vector<ServerId> out;
  // Least cost per server returned: (preemptions, lost GPU-time) divided
  // by 1 + the servers the step leaves empty (they are returned next at
  // no further cost), then fewest used GPUs, then lowest id.
  // Costs are at `notice`: a job left to finish costs nothing, a checkpoint
  // on notice replaces lost work where it fits.
  Scratch scratch{state, elastic, notice, {}};
  std::vector<ServerId> left = busy;
  int remaining = need;
  // Costs are cached and recomputed only for servers a step touched:
  // those sharing a job with a server whose jobs changed.
  struct Entry {
    ReclaimCost cost;
    int freed = 0;
    int used = 0;
    bool valid = false;
  };
  std::unordered_map<ServerId, Entry> cache;
  while (remaining > 0) {
    size_t best = 0;
    double best_p = 0, best_l = 0;
    int best_used = 0;
    for (size_t c = 0; c < left.size(); ++c) {
      Entry& e = cache[left[c]];
      if (!e.valid) {
        e.used = scratch.Used(left[c]);
        e.freed = 0;
        e.cost = e.used == 0              ? ReclaimCost{}
                 : scratch.placement.empty() ? first.Price(scratch, left[c], notice, &e.freed)
                                             : scratch.Cost(left[c], false, &e.freed);
        e.valid = true;
      }
      const double share = 1.0 + std::min(e.freed, remaining - 1);
      const double p = e.cost.preemptions / share, l = e.cost.lost_gpu_seconds / share;
      const bool better =
          c == 0 || p < best_p - 1e-12 ||
          (p <= best_p + 1e-12 &&
           (l < best_l - 1e-9 || (l <= best_l + 1e-9 && e.used < best_used)));
      if (better) {
        best = c;
        best_p = p;
        best_l = l;
        best_used = e.used;
      }
    }
    const ServerId chosen = left[best];
    // Servers holding the jobs about to change, before they change.
    std::set<ServerId> touched;
    for (const auto& [jid, n] : state.server(chosen)->jobs) {
      for (const auto& [sid, m] : scratch.Of(*state.job(jid))) touched.insert(sid);
    }
    scratch.Cost(chosen, true);
    for (ServerId t : touched) {
      cache[t].valid = false;
      for (const auto& [jid, n] : state.server(t)->jobs) {
        for (const auto& [sid, m] : scratch.Of(*state.job(jid))) cache[sid].valid = false;
      }
    }
    out.push_back(chosen);
    left.erase(left.begin() + best);
    --remaining;
  }
  return out;
}

}  // namespace

const char* ReclaimStrategyName(ReclaimStrategy strategy) {
  switch (strategy) {
    case ReclaimStrategy::kGreedy: return "greedy";
    case ReclaimStrategy::kRandom: return "random";
    case ReclaimStrategy::kFewestGpus: return "fewest-gpus";
    case ReclaimStrategy::kExact: return "exact";
  }
  return "?";
}

Result<ReclaimStrategy> ParseReclaimStrategy(const std::string& name) {
  for (auto s : {ReclaimStrategy::kGreedy, ReclaimStrategy::kRandom, ReclaimStrategy::kFewestGpus,
                 ReclaimStrategy::kExact}) {
    if (name == ReclaimStrategyName(s)) return s;
  }
  return Status::InvalidArgument("unknown reclaim strategy '" + name +
                                 "' (greedy, random, fewest-gpus, exact)");
}

ReclaimCost CostOfReturning(const ClusterState& state, const std::vector<ServerId>& servers,
                            std::vector<Action>* actions, int* shrinks, bool elastic,
                            Seconds notice, std::vector<JobId>* left) {
  ReclaimCost cost;
  const std::unordered_set<ServerId> removed_set(servers.begin(), servers.end());
  const auto removed = [&removed_set](ServerId x) { return removed_set.count(x) > 0; };
  std::set<JobId> affected;
  for (ServerId sid : servers) {
    const ServerInfo* s = state.server(sid);
    if (!s) continue;
    for (const auto& [jid, n] : s->jobs) affected.insert(jid);
  }
  int n_shrinks = 0;
  std::vector<Action> preempts;
  for (JobId jid : affected) {
    const JobInfo& job = *state.job(jid);
    if (LeftToFinish(state, job, notice)) {
      if (left) left->push_back(jid);
      continue;
    }
    Placement next = AfterRemoval(state, job, job.placement, removed, elastic);
    if (next.empty()) {
      cost.preemptions++;
      bool save = false;
      cost.lost_gpu_seconds += PreemptLoss(state, job, notice, &save);
      if (actions) {
        Action a;
        a.type = ActionType::kPreempt;
        a.job = jid;
        a.suspend = save;
        a.reason = save ? "reclaim: checkpoint on notice and preempt (cannot stay at an allowed size >= its base)"
                        : "reclaim: preempt (cannot stay at an allowed size >= its base)";
        preempts.push_back(std::move(a));
      }
    } else {
      int w = 0;
      for (const auto& [x, n] : next) w += n;
      cost.lost_gpu_seconds += w * state.config().RescalePause(job.spec);
      ++n_shrinks;
      if (actions) {
        Action a;
        a.type = ActionType::kResize;
        a.job = jid;
        a.placement = std::move(next);
        a.reason = "reclaim: shrink";
        actions->push_back(std::move(a));
      }
    }
  }
  if (actions) actions->insert(actions->end(), preempts.begin(), preempts.end());
  if (shrinks) *shrinks = n_shrinks;
  return cost;
}

Status ValidateReclaim(const ClusterState& state, const Reclaim& reclaim) {
  if (!reclaim.servers.empty()) {
    if (reclaim.count != 0 && reclaim.count != static_cast<int>(reclaim.servers.size())) {
      return Status::InvalidArgument("reclaim: count " + std::to_string(reclaim.count) +
                                     " differs from the " + std::to_string(reclaim.servers.size()) +
                                     " named servers");
    }
    std::set<ServerId> seen;
    for (ServerId sid : reclaim.servers) {
      const ServerInfo* s = state.server(sid);
      if (!s) return Status::NotFound("reclaim: unknown server " + std::to_string(sid));
      if (s->state != ServerState::kLoaned || s->draining()) {
        return Status::FailedPrecondition("reclaim: server " + std::to_string(sid) +
                                          (s->draining() ? " is already being reclaimed" : " is not loaned"));
      }
      if (!seen.insert(sid).second) {
        return Status::InvalidArgument("reclaim: server " + std::to_string(sid) + " named twice");
      }
    }
    return Status::Ok();
  }
  if (reclaim.count <= 0) {
    return Status::InvalidArgument("reclaim: count must be > 0, got " + std::to_string(reclaim.count));
  }
  int loaned = 0;
  for (const auto& s : state.servers()) loaned += s.loaned() && !s.draining();
  if (reclaim.count > loaned) {
    return Status::OutOfRange("reclaim of " + std::to_string(reclaim.count) + " servers but only " +
                              std::to_string(loaned) + " are loaned");
  }
  return Status::Ok();
}

Result<ReclaimDecision> DecideReclaim(const ClusterState& state, const Reclaim& reclaim,
                                      ReclaimStrategy strategy, std::uint64_t seed, bool elastic) {
  ARYL_RETURN_IF_ERROR(ValidateReclaim(state, reclaim));
  const std::vector<ServerId> loaned = state.LoanedServers();
  const Seconds notice = std::max(0.0, reclaim.deadline - state.now());
  ReclaimDecision d;
  if (!reclaim.servers.empty()) {
    d.servers = reclaim.servers;
  } else {
    // Idle servers first (failed ones before healthy ones), lowest id first.
    std::vector<ServerId> idle, busy;
    for (ServerId sid : loaned) (state.server(sid)->used == 0 ? idle : busy).push_back(sid);
    std::stable_sort(idle.begin(), idle.end(), [&](ServerId a, ServerId b) {
      return state.server(a)->failed > state.server(b)->failed;
    });
    for (ServerId sid : idle) {
      if (static_cast<int>(d.servers.size()) == reclaim.count) break;
      d.servers.push_back(sid);
    }
    const int need = reclaim.count - static_cast<int>(d.servers.size());
    if (need > 0) {
      if (strategy == ReclaimStrategy::kExact) {
        const std::uint64_t limit = static_cast<std::uint64_t>(state.config().exact_reclaim_limit);
        if (Binomial(static_cast<int>(busy.size()), need, limit) > limit) {
          strategy = ReclaimStrategy::kGreedy;
          d.fell_back = true;
        }
      }
      switch (strategy) {
        case ReclaimStrategy::kGreedy: {
          // The greedy choice depends on the notice only through the steps at
          // which a job's cost changes. Every choice made at a step at or
          // below the notice (and at no notice) is a candidate, priced at the
          // notice; the cheapest wins (ties: the shortest notice's). A longer
          // notice keeps every candidate of a shorter one, each no dearer, so
          // it never costs more.
          std::vector<Seconds> steps = CostSteps(state, busy, notice);
          if (steps.size() > kMaxNoticeSteps) steps.resize(kMaxNoticeSteps);
          steps.insert(steps.begin(), 0.0);
          std::vector<ServerId> best_set;
          ReclaimCost best_cost;
          std::vector<ServerId> prev;
          FirstRemovals first(state, elastic);
          for (Seconds x : steps) {
            std::vector<ServerId> cand = GreedyChoice(state, busy, need, elastic, x, first);
            if (!best_set.empty() && cand == prev) continue;
            prev = cand;
            std::vector<ServerId> all = d.servers;
            all.insert(all.end(), cand.begin(), cand.end());
            const ReclaimCost cost = CostOfReturning(state, all, nullptr, nullptr, elastic, notice);
            if (best_set.empty() || cost < best_cost) {
              best_cost = cost;
              best_set = std::move(cand);
            }
          }
          d.servers.insert(d.servers.end(), best_set.begin(), best_set.end());
          break;
        }
        case ReclaimStrategy::kRandom: {
          std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ull * (state.reclaims().size() + 1)));
          std::shuffle(busy.begin(), busy.end(), rng);
          d.servers.insert(d.servers.end(), busy.begin(), busy.begin() + need);
          break;
        }
        case ReclaimStrategy::kFewestGpus: {
          std::stable_sort(busy.begin(), busy.end(), [&](ServerId a, ServerId b) {
            return state.server(a)->used < state.server(b)->used;
          });
          d.servers.insert(d.servers.end(), busy.begin(), busy.begin() + need);
          break;
        }
        case ReclaimStrategy::kExact: {
          const int n = static_cast<int>(busy.size());
          std::vector<int> idx(need);
          for (int i = 0; i < need; ++i) idx[i] = i;
          std::vector<ServerId> best_set;
          ReclaimCost best_cost;
          std::vector<ServerId> cand(need);
          while (true) {
            for (int i = 0; i < need; ++i) cand[i] = busy[idx[i]];
            std::vector<ServerId> all = d.servers;
            all.insert(all.end(), cand.begin(), cand.end());
            ReclaimCost cost = CostOfReturning(state, all, nullptr, nullptr, elastic, notice);
            if (best_set.empty() || cost < best_cost) {
              best_cost = cost;
              best_set = cand;
            }
            int i = need - 1;
            while (i >= 0 && idx[i] == n - need + i) --i;
            if (i < 0) break;
            ++idx[i];
            for (int j = i + 1; j < need; ++j) idx[j] = idx[j - 1] + 1;
          }
          d.servers.insert(d.servers.end(), best_set.begin(), best_set.end());
          break;
        }
      }
    }
  }
  d.cost = CostOfReturning(state, d.servers, &d.actions, &d.shrinks, elastic, notice, &d.left);
  const std::string suffix = d.fell_back ? " (exact too large: greedy used)" : "";
  for (auto& a : d.actions) a.reason += std::string(" [") + ReclaimStrategyName(strategy) + "]" + suffix;
  std::set<ServerId> waits;
  for (JobId jid : d.left) {
    for (const auto& [sid, n] : state.job(jid)->placement) waits.insert(sid);
  }
  for (ServerId sid : d.servers) {
    if (waits.count(sid)) {
      d.waiting.push_back(sid);
      continue;
    }
    Action a;
    a.type = ActionType::kReturnServer;
    a.server = sid;
    a.reason = "reclaim: return";
    d.actions.push_back(std::move(a));
  }
  return d;
}

}  // namespace aryl::sched
