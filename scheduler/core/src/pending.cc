#include "aryl/sched/pending.h"

#include <algorithm>
#include <array>
#include <tuple>
#include <unordered_map>

#include "aryl/sched/policy.h"
#include "aryl/sched/queues.h"
#include "aryl/sched/state.h"
#include "quota.h"
#include "round.h"

namespace aryl::sched {

std::string_view PendingCauseName(PendingCause cause) {
  switch (cause) {
    case PendingCause::kNone:
      return "None";
    case PendingCause::kNoServer:
      return "NoServer";
    case PendingCause::kMinSize:
      return "MinSize";
    case PendingCause::kGang:
      return "Gang";
    case PendingCause::kCapacity:
      return "Capacity";
    case PendingCause::kPriority:
      return "Priority";
    case PendingCause::kQuota:
      return "Quota";
  }
  return "None";
}

std::vector<JobId> Policy::QueueOrder(const ClusterState& state) const {
  std::vector<JobId> order(state.queued().begin(), state.queued().end());
  std::sort(order.begin(), order.end(), [&](JobId a, JobId b) {
    return std::tie(state.job(a)->spec.submit_time, a) <
           std::tie(state.job(b)->spec.submit_time, b);
  });
  return order;
}

namespace {

// GPUs per server (by index) held by elastic jobs above their base size: a
// round of an elastic policy takes them back for base demands. A job's base
// workers count on its training servers first, then where it has most (the
// round's own split); a job left to finish on a draining or cordoned server
// keeps all of its workers.
std::vector<int> FlexibleByServer(const ClusterState& state) {
  std::vector<int> flex(state.servers().size(), 0);
  std::vector<std::tuple<int, int, int>> order;  // (loaned, -workers, server index)
  for (JobId id : state.running_elastic()) {
    const JobInfo& j = *state.job(id);
    if (j.workers <= j.base_workers || state.OnDraining(j)) continue;
    order.clear();
    for (const auto& [sid, n] : j.placement) {
      const int i = state.server_index(sid);
      order.emplace_back(state.servers()[i].loaned() ? 1 : 0, -n, i);
    }
    std::sort(order.begin(), order.end());
    int base = j.base_workers;
    for (const auto& [loaned, neg, i] : order) {
      const int b = std::min(base, -neg);
      base -= b;
      flex[i] += -neg - b;
    }
  }
  return flex;
}

// The GPU types a job may use, one bit per type index (types past 63 share bit 63).
std::uint64_t TypeMask(const JobInfo& j) {
  std::uint64_t mask = 0;
  for (size_t t = 0; t < j.curves.size(); ++t) {
    if (!j.curves[t].empty()) mask |= std::uint64_t{1} << std::min<size_t>(t, 63);
  }
  return mask;
}

}  // namespace

std::vector<PendingReason> WhyPending(const ClusterState& state, const Policy& policy,
                                      const std::vector<JobId>& jobs) {
  std::vector<PendingReason> out(jobs.size());
  const bool any = std::any_of(jobs.begin(), jobs.end(), [&](JobId id) {
    const JobInfo* j = state.job(id);
    return j && j->status == JobStatus::kQueued;
  });
  if (!any) return out;

  // Per GPU type, for the servers a job may use without loaned ones [0] and
  // with them [1].
  struct Count {
    int gpus = 0, in_service = 0, free = 0, flexible = 0;
  };
  const auto& servers = state.servers();
  const std::vector<int> flex =
      policy.elastic() ? FlexibleByServer(state) : std::vector<int>(servers.size(), 0);
  std::vector<std::array<Count, 2>> count(state.num_types());
  for (size_t i = 0; i < servers.size(); ++i) {
    const ServerInfo& s = servers[i];
    for (int loaned = 0; loaned < 2; ++loaned) {
      Count& c = count[s.type][loaned];
      c.gpus += s.spec.gpus;
      if (!internal::Usable(s, loaned == 1)) continue;
      c.in_service += s.spec.gpus;
      c.free += s.free();
      c.flexible += flex[i];
    }
  }
  // Jobs ahead: one walk of the policy's order, counting the jobs seen so far
  // per set of GPU types they may use (few distinct sets); a job competes
  // with those whose set meets its own.
  std::unordered_map<JobId, int> ahead;
  {
    std::unordered_map<JobId, size_t> asked;
    for (size_t k = 0; k < jobs.size(); ++k) asked.emplace(jobs[k], k);
    std::vector<std::pair<std::uint64_t, int>> seen;  // (types, jobs) in order of first sight
    for (JobId id : policy.QueueOrder(state)) {
      const std::uint64_t types = TypeMask(*state.job(id));
      if (asked.count(id)) {
        int n = 0;
        for (const auto& [mask, count] : seen) n += (mask & types) ? count : 0;
        ahead[id] = n;
      }
      auto it =
          std::find_if(seen.begin(), seen.end(), [&](const auto& e) { return e.first == types; });
      if (it == seen.end())
        seen.emplace_back(types, 1);
      else
        ++it->second;
    }
  }

  const QueueConfig* queues = state.config().queues.get();
  internal::QuotaLedger ledger;
  if (queues) ledger.Reset(state, *queues, policy.elastic());
  for (size_t k = 0; k < jobs.size(); ++k) {
    const JobInfo* j = state.job(jobs[k]);
    if (!j || j->status != JobStatus::kQueued) continue;
    PendingReason& r = out[k];
    const bool flexible = policy.elastic() && j->elastic();
    r.need = flexible ? j->base_workers : j->requested_workers;
    const bool may_loan =
        policy.uses_loaned_servers() && (flexible || state.config().inelastic_on_loaned);
    if (auto it = ahead.find(jobs[k]); it != ahead.end()) r.ahead = it->second;
    int in_service = 0, free_any = 0;        // over every type it may use
    int most_in_service = 0, most_free = 0;  // on one type that allows its size
    for (int t = 0; t < state.num_types(); ++t) {
      if (t >= static_cast<int>(j->curves.size()) || j->curves[t].empty())
        continue;  // not one of its types
      const Count& c = count[t][may_loan ? 1 : 0];
      PendingType pt;
      pt.gpu_type = state.type_name(t);
      pt.gpus = c.gpus;
      pt.in_service = c.in_service;
      pt.free = c.free;
      pt.flexible = c.flexible;
      pt.fits_size = j->Allowed(t, r.need);
      in_service += c.in_service;
      free_any += c.free + c.flexible;
      if (pt.fits_size) {
        most_in_service = std::max(most_in_service, c.in_service);
        most_free = std::max(most_free, c.free + c.flexible);
      }
      r.types.push_back(std::move(pt));
    }
    // Quota: no type that allows its size lets its queue take that many
    // (within quota or borrowing), and loaned servers cannot hold it.
    bool quota_blocks = false;
    if (queues && j->queue >= 0 && j->queue < ledger.queues()) {
      const int q = j->queue;
      r.queue = queues->queues[q].name;
      quota_blocks = true;
      int least_over = 0;
      for (int t = 0; t < state.num_types(); ++t) {
        if (t >= static_cast<int>(j->curves.size()) || !j->Allowed(t, r.need)) continue;
        const int loaned_free = may_loan ? count[t][1].free + count[t][1].flexible -
                                               count[t][0].free - count[t][0].flexible
                                         : 0;
        if (ledger.CanBorrow(q, t, r.need) || loaned_free >= r.need) quota_blocks = false;
        const int over = ledger.Used(q, t) - ledger.Nominal(q, t);
        if (r.quota_type.empty() || over < least_over) {
          least_over = over;
          r.quota_type = state.type_name(t);
          r.quota = ledger.Nominal(q, t);
          r.quota_used = ledger.Used(q, t);
        }
      }
      quota_blocks = quota_blocks && !r.quota_type.empty();
    }
    r.cause = in_service == 0            ? PendingCause::kNoServer
              : most_in_service < r.need ? PendingCause::kMinSize
              : quota_blocks             ? PendingCause::kQuota
              : most_free >= r.need      ? PendingCause::kPriority
              : free_any >= r.need       ? PendingCause::kGang
                                         : PendingCause::kCapacity;
  }
  return out;
}

}  // namespace aryl::sched
