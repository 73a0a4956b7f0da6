#include "aryl/sched/queue_usage.h"

#include <algorithm>

#include "quota.h"

namespace aryl::sched {

std::vector<QueueUsage> UsageByQueue(const ClusterState& state, const QueueConfig& queues, bool elastic) {
  internal::QuotaLedger ledger;
  ledger.Reset(state, queues, elastic);
  const int n_q = static_cast<int>(queues.queues.size());
  const int n_t = state.num_types();
  std::vector<QueueUsage> rows(n_q);
  for (int q = 0; q < n_q; ++q) {
    const QueueSpec& spec = queues.queues[q];
    QueueUsage& r = rows[q];
    r.queue = spec.name;
    r.quota = spec.quota;
    for (int t = 0; t < n_t; ++t) {
      const std::string& type = state.type_name(t);
      const int used = ledger.Used(q, t), nominal = ledger.Nominal(q, t);
      if (used > 0 || nominal > 0) r.used[type] = used;
      if (used > nominal) r.borrowed[type] = used - nominal;
    }
    r.loaned = ledger.Loaned(q);
    r.share = ledger.Share(q);
  }
  // Lent: per cohort and type, the borrowed GPUs charged to members' unused quota.
  for (int t = 0; t < n_t; ++t) {
    const std::string& type = state.type_name(t);
    std::map<std::string, int> borrowed;  // cohort -> GPUs borrowed of type t
    for (int q = 0; q < n_q; ++q) {
      auto b = rows[q].borrowed.find(type);
      if (b != rows[q].borrowed.end()) borrowed[queues.queues[q].cohort] += b->second;
    }
    for (int q = 0; q < n_q && !borrowed.empty(); ++q) {
      auto left = borrowed.find(queues.queues[q].cohort);
      if (left == borrowed.end() || left->second == 0) continue;
      int unused = std::max(0, ledger.Nominal(q, t) - ledger.Used(q, t));
      if (queues.queues[q].lend_limit >= 0) unused = std::min(unused, queues.queues[q].lend_limit);
      const int lent = std::min(unused, left->second);
      if (lent > 0) rows[q].lent[type] = lent;
      left->second -= lent;
    }
  }
  for (JobId id : state.running()) {
    const JobInfo& j = *state.job(id);
    if (j.queue < 0 || j.queue >= n_q) continue;
    ++rows[j.queue].running;
    if (elastic && j.elastic()) {
      int on_training = 0;
      for (const auto& [sid, n] : j.placement) {
        if (!state.server(sid)->loaned()) on_training += n;
      }
      rows[j.queue].flexible += std::max(0, std::min(on_training, j.workers - j.base_workers));
    }
  }
  for (JobId id : state.queued()) {
    const JobInfo& j = *state.job(id);
    if (j.queue >= 0 && j.queue < n_q) ++rows[j.queue].pending;
  }
  return rows;
}

}  // namespace aryl::sched
