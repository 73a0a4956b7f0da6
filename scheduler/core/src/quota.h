// Internal: the round's ledger of queue quotas (queues.h, rules 1-4).
//
// A QuotaLedger is rebuilt at the start of every round of a policy that runs
// with SchedulerConfig::queues, from the running jobs (O(running jobs x their
// servers)), and updated as the round admits. It answers the admission gates
// (Within, CanBorrow), the fair-sharing order (Share) and, when a queue's job
// within its quota finds no GPUs, which borrowed jobs to preempt (Reclaim).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "aryl/sched/queues.h"
#include "aryl/sched/state.h"
#include "aryl/sched/types.h"

namespace aryl::sched::internal {

struct Alloc;  // round_alloc.h

// Rule 5 (queues.h): calls allocate(part, capacity) to share `capacity`
// spare GPUs among `group`; with queues and jobs of more than one queue,
// once per queue with its weighted max-min fair share (WeightedShares; a
// queue's demand is what its jobs could grow by), then again for queues
// below their demand with what the others left, in queue order. `allocate`
// sets each Alloc's `extra` (from 0).
void SplitSpareByQueue(const std::vector<Alloc*>& group, int capacity, const SchedulerConfig& cfg,
                       const std::function<void(const std::vector<Alloc*>&, int)>& allocate);

// The follow-up round after a quota reclaim's preemptions (Policy::next_wakeup):
// the freed GPUs are admitted this much later.
inline constexpr Seconds kQuotaRoundGap = 1e-3;

// A job within its queue's quota that no free or flexible GPU fits: it needs
// `need` more GPUs of `type` on training servers.
struct QuotaNeed {
  int queue = -1;
  int type = -1;
  int need = 0;
  Seconds since = 0;  // when it entered the queue (the reclaim deadline counts from here)
  JobId job = 0;
};

class QuotaLedger {
 public:
  // `elastic`: the policy runs elastic jobs at their base size plus flexible
  // workers (only base workers count against quota); otherwise every worker does.
  void Reset(const ClusterState& state, const QueueConfig& queues, bool elastic);
  int queues() const { return static_cast<int>(nominal_.size()); }
  int Nominal(int q, int t) const { return nominal_[q][t]; }
  int Used(int q, int t) const { return used_[q][t]; }
  int Loaned(int q) const { return loaned_[q]; }  // workers on loaned servers
  // Whether `d` more GPUs of type t keep queue q within its nominal quota.
  bool Within(int q, int t, int d) const { return used_[q][t] + d <= nominal_[q][t]; }
  // Whether q may hold `d` more GPUs of type t: within nominal, or borrowing
  // within its borrowing limit and its cohort's lendable GPUs.
  bool CanBorrow(int q, int t, int d) const;
  // The fastest type (for `job` at `d` workers) on which q stays within its
  // nominal quota; -1 when none.
  int WithinType(const JobInfo& job, int d) const;
  // Whether q holds less than its nominal quota of some type (only then can
  // a job of q be within quota).
  bool UnderNominal(int q) const {
    for (size_t t = 0; t < used_[q].size(); ++t) {
      if (used_[q][t] < nominal_[q][t]) return true;
    }
    return false;
  }
  // q has pending work within its quota: it lends none of its unused quota.
  void MarkStarving(int q) { starving_[q] = true; }
  // Charges (sign +1) or refunds (-1) q for base workers on `placement`.
  template <class P>
  void Charge(int q, const P& placement, int sign) {
    for (const auto& [sid, n] : placement) ChargeServer(q, sid, n * sign);
  }
  void ChargeServer(int q, ServerId sid, int n);
  // Kueue's weighted share: GPUs held above nominal (all types) plus loaned
  // GPUs held, over the queue's weight.
  double Share(int q) const;
  // Pass 2's order (queues.h, rule 3): `queue_of[i]` is the queue of the
  // i-th deferred job, in admission order; calls admit(i) for the first
  // job not yet tried of the queue with the lowest Share (ties: the lower
  // index), recomputed after every call, while more() and jobs remain.
  void ByShare(const std::vector<int>& queue_of, const std::function<bool()>& more,
               const std::function<void(size_t)>& admit) const;
  // Preemptions (suspend) that free `need.need` GPUs of `need.type` from jobs
  // running on borrowed quota (queues.h, rule 4); empty when the eligible ones
  // do not free enough. `*wakeup` is lowered to when a spared job becomes
  // eligible.
  std::vector<Action> Reclaim(const QuotaNeed& need, Seconds* wakeup) const;

 private:
  struct Held {
    const JobInfo* job = nullptr;
    int type = -1;  // the training type holding most of its quota workers
    int base = 0;   // its quota workers on that type
  };
  int Lendable(int p, int t) const;

  const ClusterState* state_ = nullptr;
  const QueueConfig* config_ = nullptr;
  std::vector<std::vector<int>> nominal_;  // [queue][type]
  std::vector<std::vector<int>> used_;     // [queue][type]: quota workers on training servers
  std::vector<int> loaned_;                // [queue]: workers on loaned servers
  std::vector<int> cohort_;                // [queue]: cohort id
  std::vector<int> unassigned_;            // [type]: training GPUs no quota covers
  std::vector<bool> starving_;
  std::vector<std::vector<Held>> held_;  // [queue]: running jobs with quota workers
};

}  // namespace aryl::sched::internal
