// AdmissionQueue: the queued jobs in admission order, kept across rounds.
#include <algorithm>

#include "round.h"

namespace aryl::sched::internal {

void AdmissionQueue::Insert(const ClusterState& state, const RoundOptions& opt, const JobInfo& j) {
  const AdmissionPlace place = AdmissionOf(state, opt, j);
  const int d = place.demand;
  const Entry e{place.key, place.submit, place.id};
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
    bool checked = false;  // `it` is a queued job (the state does not change during a walk)
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
      while (!c.checked && c.it != c.set->end()) {
        const JobInfo* j = state.job(c.it->id);
        if (j && j->status == JobStatus::kQueued) break;
        where_.erase(c.it->id);
        c.it = c.set->erase(c.it);
      }
      c.checked = true;
      if (c.it != c.set->end() && (best == nullptr || *c.it < *best->it)) best = &c;
    }
    if (best == nullptr) return;
    const Entry e = *best->it;
    ++best->it;
    best->checked = false;
    admit(e, best->demand);
  }
}

}  // namespace aryl::sched::internal
