#include "quota.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "round_alloc.h"

namespace aryl::sched::internal {

void QuotaLedger::Reset(const ClusterState& state, const QueueConfig& queues, bool elastic) {
  state_ = &state;
  config_ = &queues;
  const int n_q = static_cast<int>(queues.queues.size());
  const int n_t = state.num_types();
  nominal_.assign(n_q, std::vector<int>(n_t, 0));
  used_.assign(n_q, std::vector<int>(n_t, 0));
  loaned_.assign(n_q, 0);
  starving_.assign(n_q, false);
  held_.assign(n_q, {});
  cohort_.assign(n_q, 0);
  unassigned_.assign(n_t, 0);
  std::map<std::string, int> cohorts;
  for (int q = 0; q < n_q; ++q) {
    const QueueSpec& spec = queues.queues[q];
    cohort_[q] = cohorts.emplace(spec.cohort, static_cast<int>(cohorts.size())).first->second;
    for (int t = 0; t < n_t; ++t) nominal_[q][t] = spec.Nominal(state.type_name(t));
  }
  for (const ServerInfo& s : state.servers()) {
    if (s.spec.pool == Pool::kTraining) unassigned_[s.type] += s.spec.gpus;
  }
  for (int t = 0; t < n_t; ++t) {
    for (int q = 0; q < n_q; ++q) unassigned_[t] -= nominal_[q][t];
    unassigned_[t] = std::max(0, unassigned_[t]);
  }
  std::vector<int> per_type(n_t, 0);
  for (JobId id : state.running()) {
    const JobInfo& j = *state.job(id);
    if (j.queue < 0) continue;
    // Quota workers: the base ones (elastic) or all, on training servers first.
    int left = elastic && j.elastic() ? j.base_workers : j.workers;
    std::fill(per_type.begin(), per_type.end(), 0);
    for (const auto& [sid, n] : j.placement) {
      const ServerInfo& s = *state.server(sid);
      if (s.loaned()) {
        loaned_[j.queue] += n;
      } else if (left > 0) {
        const int b = std::min(left, n);
        left -= b;
        per_type[s.type] += b;
      }
    }
    int best = -1;
    for (int t = 0; t < n_t; ++t) {
      used_[j.queue][t] += per_type[t];
      if (per_type[t] > 0 && (best < 0 || per_type[t] > per_type[best])) best = t;
    }
    if (best >= 0) held_[j.queue].push_back({&j, best, per_type[best]});
  }
}

void QuotaLedger::ChargeServer(int q, ServerId sid, int n) {
  const ServerInfo& s = *state_->server(sid);
  if (s.loaned()) {
    loaned_[q] += n;
  } else {
    used_[q][s.type] += n;
  }
}

int QuotaLedger::Lendable(int p, int t) const {
  if (starving_[p]) return 0;
  const int unused = std::max(0, nominal_[p][t] - used_[p][t]);
  const int limit = config_->queues[p].lend_limit;
  return limit < 0 ? unused : std::min(limit, unused);
}

bool QuotaLedger::CanBorrow(int q, int t, int d) const {
  const int over_after = used_[q][t] + d - nominal_[q][t];
  if (over_after <= 0) return true;
  const int limit = config_->queues[q].borrow_limit;
  if (limit >= 0 && over_after > limit) return false;
  // The cohort's borrowing after this admission must fit what its members
  // lend plus the GPUs no quota covers.
  int borrowed = over_after - std::max(0, used_[q][t] - nominal_[q][t]);
  int lendable = unassigned_[t];
  for (int p = 0; p < queues(); ++p) {
    if (cohort_[p] != cohort_[q]) continue;
    borrowed += std::max(0, used_[p][t] - nominal_[p][t]);
    if (p != q) lendable += Lendable(p, t);
  }
  return borrowed <= lendable;
}

int QuotaLedger::WithinType(const JobInfo& job, int d) const {
  int best = -1;
  for (int t = 0; t < static_cast<int>(used_[job.queue].size()); ++t) {
    if (!job.Allowed(t, d) || !Within(job.queue, t, d) || nominal_[job.queue][t] == 0) continue;
    if (best < 0 || job.Thr(t, d) > job.Thr(best, d)) best = t;
  }
  return best;
}

double QuotaLedger::Share(int q) const {
  int above = loaned_[q];
  for (size_t t = 0; t < used_[q].size(); ++t) above += std::max(0, used_[q][t] - nominal_[q][t]);
  return above / config_->queues[q].weight;
}

void QuotaLedger::ByShare(const std::vector<int>& queue_of, const std::function<bool()>& more,
                          const std::function<void(size_t)>& admit) const {
  std::vector<std::vector<size_t>> per_queue(queues());
  for (size_t i = 0; i < queue_of.size(); ++i) per_queue[queue_of[i]].push_back(i);
  std::vector<size_t> head(queues(), 0);
  while (more()) {
    int best = -1;
    double best_share = 0;
    for (int q = 0; q < queues(); ++q) {
      if (head[q] >= per_queue[q].size()) continue;
      const double share = Share(q);
      if (best < 0 || share < best_share) {
        best = q;
        best_share = share;
      }
    }
    if (best < 0) return;
    admit(per_queue[best][head[best]++]);
  }
}

std::vector<Action> QuotaLedger::Reclaim(const QuotaNeed& need, Seconds* wakeup) const {
  const SchedulerConfig& cfg = state_->config();
  const Seconds now = state_->now();
  const bool deadline_passed = now - need.since >= cfg.quota_reclaim_deadline;
  bool spared = false;  // a borrowed job spared by its minimum runtime
  struct Candidate {
    bool straddles;  // part of it within its queue's quota: preempting it takes that too
    int priority;
    double cost;
    Seconds started;
    JobId id;
    int base;
  };
  std::vector<Candidate> candidates;
  for (int p = 0; p < queues(); ++p) {
    if (p == need.queue || used_[p][need.type] <= nominal_[p][need.type]) continue;
    // Its running jobs by (priority desc, start, id): those that reach
    // beyond its nominal quota run on borrowed GPUs, wholly or in part (as
    // Kueue counts a workload whose admission borrowed). A job that straddles
    // the quota is preemptible: otherwise one large job holding its queue's
    // quota and a borrowed GPU would keep the lender from it for good.
    std::vector<const Held*> order;
    for (const Held& h : held_[p]) {
      if (h.type == need.type) order.push_back(&h);
    }
    std::sort(order.begin(), order.end(), [](const Held* a, const Held* b) {
      return std::make_tuple(-a->job->spec.priority, a->job->started_at, a->job->spec.id) <
             std::make_tuple(-b->job->spec.priority, b->job->started_at, b->job->spec.id);
    });
    // Quota workers of this type held by jobs not in `order` (none: every
    // holder of the type is listed) come first in the count.
    int before = 0;
    for (const Held* h : order) {
      const bool straddles = before < nominal_[p][need.type];
      before += h->base;
      const bool borrowed = before > nominal_[p][need.type];
      if (!borrowed) continue;
      const JobInfo& j = *h->job;
      if (state_->OnDraining(j)) continue;  // left to finish where it is
      if (!deadline_passed && now - j.started_at < cfg.quota_min_runtime) {
        *wakeup = std::min(*wakeup, j.started_at + cfg.quota_min_runtime);
        spared = true;
        continue;
      }
      const double cost =
          (cfg.CheckpointSeconds(j.spec.state_bytes) + cfg.resume_pause) * j.workers;
      candidates.push_back({straddles, j.spec.priority, cost, j.started_at, j.spec.id, h->base});
    }
  }
  // Jobs wholly on borrowed GPUs first (their queues keep their quota), then
  // the lowest priority, the least cost, the latest started.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::make_tuple(a.straddles, a.priority, a.cost, -a.started, a.id) <
           std::make_tuple(b.straddles, b.priority, b.cost, -b.started, b.id);
  });
  std::vector<Action> out;
  int freed = 0;
  for (const Candidate& c : candidates) {
    if (freed >= need.need) break;
    Action a;
    a.type = ActionType::kPreempt;
    a.job = c.id;
    a.suspend = true;
    a.reason = "quota reclaim for queue " + config_->queues[need.queue].name + ": suspend";
    out.push_back(std::move(a));
    freed += c.base;
  }
  if (freed < need.need) {
    // The deadline makes every spared job eligible: look again then.
    if (spared) *wakeup = std::min(*wakeup, need.since + cfg.quota_reclaim_deadline);
    return {};
  }
  return out;
}

// With queues (queues.h, rule 5): the spare GPUs are first split among the
// queues with elastic demand by weighted max-min fair shares (WeightedShares;
// a queue's demand is what its jobs could grow by), each queue's jobs share
// its part by the policy's rule, and what a queue leaves unused goes to the
// others in queue order. So no queue with elastic demand gets less than its
// weight's share of the spare GPUs (or its demand) to allocate.
void SplitSpareByQueue(const std::vector<Alloc*>& group, int capacity, const SchedulerConfig& cfg,
                       const std::function<void(const std::vector<Alloc*>&, int)>& allocate) {
  const QueueConfig* queues = cfg.queues.get();
  if (queues == nullptr || group.empty() || capacity <= 0) return allocate(group, capacity);
  const size_t n_q = queues->queues.size();
  static thread_local std::vector<std::vector<Alloc*>> by_queue;
  by_queue.resize(n_q);
  for (auto& v : by_queue) v.clear();
  std::vector<int> demand(n_q, 0);
  size_t present = 0;
  for (Alloc* a : group) {
    const int q = a->job->queue;
    if (by_queue[q].empty()) ++present;
    by_queue[q].push_back(a);
    const int top =
        std::min(a->job->spec.max_workers, static_cast<int>(a->job->curves[a->home].size()) - 1);
    demand[q] += std::max(0, top - Sum(a->base));
  }
  if (present <= 1) return allocate(group, capacity);
  std::vector<double> weights(n_q);
  for (size_t q = 0; q < n_q; ++q) weights[q] = queues->queues[q].weight;
  const std::vector<int> caps = WeightedShares(weights, demand, capacity);
  std::vector<int> used(n_q, 0);
  int left = capacity;
  for (size_t q = 0; q < n_q; ++q) {
    if (by_queue[q].empty()) continue;
    allocate(by_queue[q], caps[q]);
    for (const Alloc* a : by_queue[q]) used[q] += a->extra;
    left -= used[q];
  }
  for (size_t q = 0; q < n_q && left > 0; ++q) {
    if (by_queue[q].empty() || used[q] >= demand[q]) continue;
    for (Alloc* a : by_queue[q]) a->extra = 0;
    allocate(by_queue[q], used[q] + left);
    int now = 0;
    for (const Alloc* a : by_queue[q]) now += a->extra;
    left -= now - used[q];
    used[q] = now;
  }
}

}  // namespace aryl::sched::internal
