#include "invariants.h"

#include <algorithm>

#include "job_truth.h"
#include "network.h"
#include "workers.h"

namespace aryl::simtest {
namespace {

constexpr double kQuietForProgress = 120;  // I4: no step this long after the last fault

}  // namespace

void InvariantChecker::Violate(const std::string& invariant, const std::string& what) {
  if (!violated_.insert(invariant).second) return;
  violations_.push_back({net_.now(), invariant, what});
  net_.Trace("VIOLATION " + invariant + ": " + what);
}

void InvariantChecker::Check() {
  std::set<std::int64_t> training;
  for (const auto& [id, w] : workers_.all()) {
    if (w.state == WorkerState::kTraining) training.insert(w.gen);
    auto& seen = max_gen_seen_[id];
    if (w.state != WorkerState::kGone && w.gen > 0) {
      if (w.gen < seen)
        Violate("I1", "worker " + std::to_string(id) + " went back from generation " +
                          std::to_string(seen) + " to " + std::to_string(w.gen));
      seen = std::max(seen, w.gen);
    }
  }
  if (training.size() > 1)
    Violate("I2", "two groups train at once: generations " + std::to_string(*training.begin()) +
                      " and " + std::to_string(*training.rbegin()));
  if (job_.step < job_.checkpoint)
    Violate("I3", "step " + std::to_string(job_.step) + " behind checkpoint " +
                      std::to_string(job_.checkpoint));
  if (!job_.done && job_.plans_since_step > kMaxGenerationsWithoutStep)
    Violate("I4", std::to_string(job_.plans_since_step) +
                      " generations planned without a trained step (livelock)");
  const double quiet = net_.now() - std::max(job_.last_step_at, job_.last_fault_at);
  if (!job_.done && quiet > kQuietForProgress)
    Violate("I4", "no step for " + std::to_string(int(quiet)) + " s after the last fault (" +
                      std::to_string(job_.plans_since_step) + " generations since)");
}

void InvariantChecker::CheckReclaim(int agent, std::int64_t started_before) {
  for (const auto& [id, w] : workers_.all())
    if (id < started_before && w.agent == agent && w.state != WorkerState::kGone)
      Violate("I5", "worker " + std::to_string(id) +
                        " still on the returned server after the reclaim's deadline");
}

void InvariantChecker::CheckEnded(double horizon) {
  if (!job_.done && violations_.empty())
    Violate("I6", "the job did not complete within " + std::to_string(int(horizon)) + " s (step " +
                      std::to_string(job_.step) + " of " + std::to_string(job_.total_steps) + ")");
}

}  // namespace aryl::simtest
