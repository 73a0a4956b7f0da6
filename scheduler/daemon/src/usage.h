// Usage accounting from the event journal (aryl usage; protocol/queues.h, Q4):
// GPU-hours on training and on loaned servers, jobs submitted and
// preemptions, per queue or per user, over a time window.
//
// A job holds its placement from a "start" or "resize" row (data.placement:
// node -> workers) until its next such row, or a "preempt", "restart",
// "finished", "failed" or "cancelled" row; workers on a node of the inference
// pool count as loaned. Workers lost between two rows count until the next
// one (the journal records the scheduler's placements, not each exit).
// Pure: the caller reads the rows (oldest first) and knows the jobs and nodes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "aryl/daemon/state_store.h"

namespace aryl::daemon {

struct UsageTotals {
  double training_gpu_hours = 0;
  double loaned_gpu_hours = 0;
  std::int64_t jobs = 0;         // submitted within the window
  std::int64_t preemptions = 0;  // within the window
};

class UsageLedger {
 public:
  // Counts [since, until] (unix seconds); `key_of(job)` names the row a job
  // counts under (its queue or owner); `inference` are the inference nodes.
  UsageLedger(double since, double until, std::function<std::string(std::uint64_t)> key_of,
              std::set<std::string> inference);
  // Rows oldest first, in any number of calls.
  void Add(const EventRecord& e);
  // Closes the placements still open at `until`; the rows by key.
  std::map<std::string, UsageTotals> Finish();

 private:
  struct Held {
    std::map<std::string, int> placement;
    double from = 0;
  };
  void Close(std::uint64_t job, double at);

  double since_, until_;
  std::function<std::string(std::uint64_t)> key_of_;
  std::set<std::string> inference_;
  std::map<std::uint64_t, Held> held_;
  std::map<std::uint64_t, std::string> keys_;  // key_of_, asked once per job
  std::map<std::string, UsageTotals> totals_;
  const std::string& Key(std::uint64_t job);
};

}  // namespace aryl::daemon
