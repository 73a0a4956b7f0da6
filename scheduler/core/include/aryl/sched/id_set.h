// IdSet: a set of job ids kept as a sorted vector.
//
// The state's running jobs are walked at every event (progress, the round's
// elastic allocation); a tree set makes each step of that walk a dependent
// pointer load, a vector lets the next ids be read ahead. Insertion and
// erasure move ids (O(n), n = running jobs, which the cluster's GPUs bound).
// Iterates in increasing order, like std::set.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "aryl/sched/types.h"

namespace aryl::sched {

class IdSet {
 public:
  using value_type = JobId;
  using const_iterator = std::vector<JobId>::const_iterator;
  using iterator = const_iterator;

  // Whether `id` was added (false: already there).
  bool insert(JobId id) {
    auto it = std::lower_bound(ids_.begin(), ids_.end(), id);
    if (it != ids_.end() && *it == id) return false;
    ids_.insert(it, id);
    return true;
  }
  // How many were removed (0 or 1).
  std::size_t erase(JobId id) {
    auto it = std::lower_bound(ids_.begin(), ids_.end(), id);
    if (it == ids_.end() || *it != id) return 0;
    ids_.erase(it);
    return 1;
  }
  bool contains(JobId id) const { return std::binary_search(ids_.begin(), ids_.end(), id); }
  std::size_t count(JobId id) const { return contains(id) ? 1 : 0; }
  void clear() { ids_.clear(); }
  std::size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  const_iterator begin() const { return ids_.begin(); }
  const_iterator end() const { return ids_.end(); }
  bool operator==(const IdSet& o) const = default;

 private:
  std::vector<JobId> ids_;
};

}  // namespace aryl::sched
