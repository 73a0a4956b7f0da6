#include "checkpoint_truth.h"

#include <algorithm>

#include "aryl/checkpoint.h"

namespace aryl::daemon::testing {

namespace {
std::string S(std::int64_t v) { return std::to_string(v); }
}  // namespace

void CheckpointTruth::Watch(const MemoryCheckpointFs* fs, std::string dir) {
  fs_ = fs;
  dir_ = std::move(dir);
}

std::string CheckpointTruth::PathOf(std::int64_t step) const { return dir_ + "/" + CheckpointManager::FileName(step); }

std::int64_t CheckpointTruth::NewestIntact() const {
  for (auto it = committed_.rbegin(); it != committed_.rend(); ++it)
    if (!corrupt_.count(*it) && (!fs_ || fs_->Exists(PathOf(*it)))) return *it;
  return 0;
}

std::size_t CheckpointTruth::CorruptAbove(std::int64_t step) const {
  std::size_t n = 0;
  for (std::int64_t c : corrupt_) n += c > step && fs_ && fs_->Exists(PathOf(c));
  return n;
}

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
  corrupt_.erase(w.step);  // written again over the corrupt file
}

void CheckpointTruth::Failed(protocol::WorkerId writer, const std::string& error, bool no_space,
                             std::uint64_t bytes, double) {
  auto it = Find(writer);
  if (it == in_progress_.end())
    return Violate("D6", "worker " + S(writer) + " failed a write it never began");
  const Write w = *it;
  in_progress_.erase(it);
  ++failed_;
  Note("checkpoint step " + S(w.step) + " failed: " + error + "; step " + S(newest_good_) +
       " stays the newest good");
  if (!no_space || !fs_ || fs_->capacity() == MemoryCheckpointFs::kUnlimited) return;
  // D9: the room there would be with every checkpoint older than the newest
  // good one removed (the newest good and the corrupt files newer than it stay).
  std::uint64_t kept = 0;
  for (const auto& name : fs_->Names(dir_)) {
    const std::string path = dir_ + "/" + name;
    std::int64_t step = -1;
    if (name.size() == CheckpointManager::FileName(0).size() && name.rfind("ckpt-", 0) == 0)
      step = std::stoll(name.substr(5, 12));
    if (step < 0 || step >= newest_good_) kept += fs_->Size(path);
  }
  const std::uint64_t taken = kept + fs_->other_bytes();
  const std::uint64_t room = taken >= fs_->capacity() ? 0 : fs_->capacity() - taken;
  if (room >= bytes)
    Violate("D9", "checkpoint step " + S(w.step) + " (" + S(static_cast<std::int64_t>(bytes)) +
                      " bytes) failed for lack of room, but removing the checkpoints older than step " +
                      S(newest_good_) + " leaves " + S(static_cast<std::int64_t>(room)) + " bytes: " + error);
}

void CheckpointTruth::Corrupted(std::int64_t step) {
  if (!committed_.count(step)) return;
  corrupt_.insert(step);
  ++corrupted_;
  if (step == newest_good_) newest_good_ = NewestIntact();
  Note("checkpoint step " + S(step) + " corrupted on the disk; step " + S(newest_good_) + " is the newest good");
}

void CheckpointTruth::CheckDisk() {
  if (!fs_ || newest_good_ == 0 || removed_said_ || fs_->Exists(PathOf(newest_good_))) return;
  removed_said_ = true;
  Violate("D10", "the newest good checkpoint, step " + S(newest_good_) + ", was removed from the disk");
}

void CheckpointTruth::Torn(protocol::WorkerId writer, const std::string& why, double) {
  auto it = Find(writer);
  if (it == in_progress_.end()) return;
  Note("checkpoint step " + S(it->step) + " torn: " + why + "; step " + S(newest_good_) +
       " stays the newest good");
  ++torn_;
  in_progress_.erase(it);
}

void CheckpointTruth::Restored(std::int64_t group, std::int64_t step, double, std::size_t skipped) {
  Note("group " + S(group) + " restores step " + S(step) + " (newest good " + S(newest_good_) +
       ", trained to " + S(trained_) + (skipped ? ", " + S(static_cast<std::int64_t>(skipped)) + " skipped" : "") +
       ")");
  for (const Write& w : in_progress_)
    if (w.group < group)
      Violate("D6", "group " + S(group) + " restored while worker " + S(w.writer) + " of group " +
                        S(w.group) + " writes checkpoint step " + S(w.step));
  const std::size_t corrupt = CorruptAbove(newest_good_);
  if (corrupt > 0 && (step != newest_good_ || skipped != corrupt))
    Violate("D11", "group " + S(group) + " restored step " + S(step) + " skipping " +
                       S(static_cast<std::int64_t>(skipped)) + " file(s); the newest good is step " +
                       S(newest_good_) + ", below " + S(static_cast<std::int64_t>(corrupt)) + " corrupt one(s)");
  else if (step != newest_good_)
    Violate("D7", "group " + S(group) + " resumed at step " + S(step) +
                      "; the newest good checkpoint is step " + S(newest_good_));
  most_retrained_ = std::max(most_retrained_, trained_ - step);
  newest_group_ = std::max(newest_group_, group);
}

void CheckpointTruth::Trained(std::int64_t step) { trained_ = std::max(trained_, step); }

}  // namespace aryl::daemon::testing
