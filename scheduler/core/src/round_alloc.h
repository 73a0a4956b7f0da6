// Internal: the per-job bookkeeping of a scheduling round (round.cc) and its
// elastic allocation and actions (elastic_alloc.cc).
#pragma once

#include <utility>
#include <vector>

#include "round.h"

namespace aryl::sched::internal {

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
  // Appends a server after every one already held (callers keep server order).
  void Append(ServerId sid, int n) { v_.emplace_back(sid, n); }
  bool operator==(const FlatPlacement& o) const { return v_ == o.v_; }
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
  bool pinned = false;    // its dwell holds its size (resize_rule.h, 2): `extra` is fixed
  bool frozen = false;    // left to finish on a draining or cordoned server (OnDraining)
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
    is_new = moved = flexible = pinned = frozen = false;
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

inline double RemainingTime(const JobInfo& job, int type, int w) {
  const double thr = job.Thr(type, w);
  return thr > 0 ? job.remaining_work / thr : kNever;
}

// 3. The elastic allocation of the GPUs `index` counts as free, per GPU type
// (multiple-choice knapsack, Optimus or AFS rule; hetero_dp guests), under
// the resize rule (resize_rule.h), and 4. the placement of every flexible
// job's extra workers (kept where they are, then training servers before
// loaned ones). Takes the GPUs it places from `index`. `*wakeup` is lowered
// to the end of every dwell that held a job the allocation wanted to change.
void AllocateElastic(AllocList& allocs, FreeIndex& index, const ClusterState& state, const RoundOptions& opt,
                     Seconds* wakeup);

// 5. The actions: starts for admitted jobs, resizes for changed ones.
std::vector<Action> RoundActions(AllocList& allocs, const ClusterState& state, const RoundOptions& opt);

}  // namespace aryl::sched::internal
