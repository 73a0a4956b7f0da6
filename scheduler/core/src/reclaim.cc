#include "aryl/sched/reclaim.h"

#include <algorithm>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "aryl/sched/state.h"
#include "reclaim_internal.h"

namespace aryl::sched {
namespace internal {

// Declared (and described) in reclaim_internal.h.

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

double PreemptLoss(const ClusterState& state, const JobInfo& job, Seconds notice, bool* save) {
  const SchedulerConfig& c = state.config();
  const double lose = job.workers * (std::max(0.0, state.now() - job.checkpoint_time) + c.restart_pause);
  const Seconds ckpt = c.CheckpointSeconds(job.spec.state_bytes);
  const double keep = job.workers * (ckpt + c.resume_pause);
  const bool saves = notice >= ckpt && keep < lose;
  if (save) *save = saves;
  return saves ? keep : lose;
}

bool LeftToFinish(const ClusterState& state, const JobInfo& job, Seconds notice) {
  const SchedulerConfig& c = state.config();
  if (!c.reclaim_lets_jobs_finish || !(notice > 0)) return false;
  const Seconds ckpt = c.CheckpointSeconds(job.spec.state_bytes);
  // At the deadline minus its checkpoint time, a job with no work left by the
  // core's account whose finish has not been reported has slipped (its speed
  // was overestimated): it leaves now, whatever its estimate says.
  if (!(job.remaining_work > 0) && notice <= ckpt + 1e-3) return false;
  const Seconds finish = state.EstimatedFinishTime(job.spec.id);
  return finish < kNever && finish - state.now() + ckpt <= notice;
}

std::vector<Seconds> CostSteps(const ClusterState& state, const std::vector<ServerId>& servers,
                               Seconds notice) {
  std::vector<Seconds> steps;
  for (ServerId sid : servers) {
    for (const auto& [jid, n] : state.server(sid)->jobs) {
      ForCostPoints(state, *state.job(jid), [&](Seconds x) {
        if (x > 0 && x <= notice) steps.push_back(x);
      });
    }
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

}  // namespace internal

namespace {

using namespace internal;  // NOLINT

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
          // The cheapest of its choices over the notice steps (reclaim_greedy.cc).
          const std::vector<ServerId> picked =
              internal::GreedyReclaim(state, busy, need, elastic, notice, d.servers);
          d.servers.insert(d.servers.end(), picked.begin(), picked.end());
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
