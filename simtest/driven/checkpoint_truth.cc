#include "checkpoint_truth.h"

#include <algorithm>

namespace aryl::daemon::testing {

namespace {
std::string S(std::int64_t v) { return std::to_string(v); }
}  // namespace

void CheckpointTruth::Note(const std::string& line) {
  if (on_event) on_event(line);
}

void CheckpointTruth::Violate(const char* invariant, const std::string& what) {
  violations_.push_back({invariant, what});
}

std::vector<CheckpointTruth::Write>::iterator CheckpointTruth::Find(protocol::WorkerId writer) {
  return std::find_if(in_progress_.begin(), in_progress_.end(),
                      [&](const Write& w) { return w.writer == writer; });
}

void CheckpointTruth::Begun(const Write& w) {
  Note("checkpoint step " + S(w.step) + " begun by worker " + S(w.writer) + " (group " +
       S(w.group) + ", gen " + S(w.generation) + ")");
  for (const Write& other : in_progress_)
    Violate("D6", "group " + S(w.group) + " began checkpoint step " + S(w.step) + " while worker " +
                      S(other.writer) + " of group " + S(other.group) + " writes step " +
                      S(other.step));
  if (w.group != newest_group_)
    Violate("D6", "group " + S(w.group) + " began checkpoint step " + S(w.step) +
                      "; the newest group is " + S(newest_group_));
  in_progress_.push_back(w);
}

void CheckpointTruth::Committed(protocol::WorkerId writer, double now) {
  auto it = Find(writer);
  if (it == in_progress_.end())
    return Violate("D6", "worker " + S(writer) + " committed a write it never began");
  const Write w = *it;
  in_progress_.erase(it);
  Note("checkpoint step " + S(w.step) + " good (" +
       S(static_cast<std::int64_t>((now - w.begun) * 1000)) + " ms)");
  ++good_;
  if (w.group != newest_group_)
    Violate("D6", "checkpoint step " + S(w.step) + " committed by group " + S(w.group) +
                      "; the newest group is " + S(newest_group_));
  if (w.step < newest_good_)
    Violate("D7", "checkpoint step " + S(w.step) + " committed below the newest good one, step " +
                      S(newest_good_));
  newest_good_ = std::max(newest_good_, w.step);
  committed_.insert(w.step);
}

void CheckpointTruth::Torn(protocol::WorkerId writer, const std::string& why, double) {
  auto it = Find(writer);
  if (it == in_progress_.end()) return;
  Note("checkpoint step " + S(it->step) + " torn: " + why + "; step " + S(newest_good_) +
       " stays the newest good");
  ++torn_;
  in_progress_.erase(it);
}

void CheckpointTruth::Restored(std::int64_t group, std::int64_t step, double) {
  Note("group " + S(group) + " restores step " + S(step) + " (newest good " + S(newest_good_) +
       ", trained to " + S(trained_) + ")");
  for (const Write& w : in_progress_)
    if (w.group < group)
      Violate("D6", "group " + S(group) + " restored while worker " + S(w.writer) + " of group " +
                        S(w.group) + " writes checkpoint step " + S(w.step));
  if (step != newest_good_)
    Violate("D7", "group " + S(group) + " resumed at step " + S(step) +
                      "; the newest good checkpoint is step " + S(newest_good_));
  most_retrained_ = std::max(most_retrained_, trained_ - step);
  newest_group_ = std::max(newest_group_, group);
}

void CheckpointTruth::Trained(std::int64_t step) { trained_ = std::max(trained_, step); }

}  // namespace aryl::daemon::testing
