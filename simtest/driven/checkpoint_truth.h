// What happened to one job's checkpoints in the driven cluster, recorded as
// the runtime model does it, and the invariants over it (aryl-simtest
// --daemon's D6 and D7). The model (runtime_model.h) writes and restores; this
// record only watches, so a model or a daemon that breaks a rule is caught
// here, at the event that breaks it.
//
// A group is a lineage of generations: it begins when a fresh generation (no
// member of an earlier one) forms and restores, and lives on through in-place
// resizes and fault regroups. Its number is that fresh generation's.
//
//   D6 one writer: never two checkpoint writes of the job in progress at once;
//      a write is begun and committed only by the newest group to restore; and
//      no fresh group restores while an older group's write is in progress
//      (the restore would miss it: two live copies of the job).
//   D7 resume from the newest good checkpoint: a fresh group restores the step
//      of the newest checkpoint whose write completed (0 when none), so no
//      step is lost beyond it and the steps trained twice are only those
//      since it; a committed checkpoint's step is never below the newest good
//      one (checkpoint steps only grow).
//
// The checkpoint directory (memory_checkpoint_fs.h) may fill up, fail a
// write or corrupt a file; the runtime's CheckpointManager handles it, and
// the newest good checkpoint is the newest committed one that is intact on
// the disk (a corrupted one no longer counts; the next intact one older than
// it that is still there does).
//
//   D8 every failed write is counted: each reaches the scheduler as a
//      CheckpointReport with an error, and the scheduler's checkpoint_failed
//      events add up to the failures it received (checkpoint_faults.h checks
//      the scheduler's side).
//   D9 checkpointing resumes: a write fails for lack of room only when it
//      could not fit even with every checkpoint older than the newest good
//      one removed (room is made from them); a write that fits succeeds.
//   D10 the newest good checkpoint is never removed (to make room or by
//      retention): its file stays on the disk.
//   D11 restore skips corrupt files: a fresh group restores the newest good
//      checkpoint, having skipped exactly the corrupt files newer than it.
//
// Pure: time is passed in.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "aryl/protocol/messages.h"
#include "memory_checkpoint_fs.h"

namespace aryl::daemon::testing {

class CheckpointTruth {
 public:
  struct Write {
    std::int64_t group = 0;
    std::int64_t generation = 0;  // the writer's plan generation
    protocol::WorkerId writer = 0;
    std::int64_t step = 0;
    double begun = 0;
    double ends = 0;  // when the write completes, if its writer lives
  };
  struct Violation {
    std::string invariant;  // "D6" ... "D11"
    std::string what;
  };

  // The job's checkpoint directory on `fs` (D9-D11 look at it).
  void Watch(const MemoryCheckpointFs* fs, std::string dir);

  void Begun(const Write& w);
  // The write of `writer` completed and became the newest good checkpoint.
  void Committed(protocol::WorkerId writer, double now);
  // It did not: its writer died (`why`), or the fence refused it.
  void Torn(protocol::WorkerId writer, const std::string& why, double now);
  // It failed: CheckpointManager::Write returned `error` for a file of
  // `bytes` (no_space: CheckpointFs::IsNoSpace). The runtime reports it.
  void Failed(protocol::WorkerId writer, const std::string& error, bool no_space, std::uint64_t bytes,
              double now);
  // The file of checkpoint `step` was corrupted on the disk.
  void Corrupted(std::int64_t step);
  // A fresh group formed and restored `step` (0: no checkpoint), skipping
  // `skipped` files that failed their checks.
  void Restored(std::int64_t group, std::int64_t step, double now, std::size_t skipped = 0);
  void Trained(std::int64_t step);
  // D10, after every tick.
  void CheckDisk();

  const std::vector<Write>& in_progress() const { return in_progress_; }
  std::int64_t newest_good() const { return newest_good_; }
  bool WasGood(std::int64_t step) const { return committed_.count(step) > 0; }
  std::int64_t good() const { return good_; }
  std::int64_t torn() const { return torn_; }
  std::int64_t failed() const { return failed_; }
  std::int64_t corrupted() const { return corrupted_; }
  // The most steps one fresh start trained again.
  std::int64_t most_retrained() const { return most_retrained_; }
  std::vector<Violation> TakeViolations() { return std::exchange(violations_, {}); }

  // A line per write begun, completed or torn and per restore (a trace).
  std::function<void(const std::string&)> on_event;
  // Another line of that trace (the model's own events).
  void Note(const std::string& line);

 private:
  void Violate(const char* invariant, const std::string& what);
  std::vector<Write>::iterator Find(protocol::WorkerId writer);
  std::string PathOf(std::int64_t step) const;
  // The newest committed step whose file is intact on the disk (0: none).
  std::int64_t NewestIntact() const;
  std::size_t CorruptAbove(std::int64_t step) const;  // corrupt files on the disk

  const MemoryCheckpointFs* fs_ = nullptr;
  std::string dir_;
  std::set<std::int64_t> corrupt_;  // steps whose file was corrupted since its commit
  bool removed_said_ = false;

  std::vector<Write> in_progress_;
  std::set<std::int64_t> committed_;  // steps
  std::int64_t newest_group_ = 0;  // the newest group to restore
  std::int64_t newest_good_ = 0;   // step
  std::int64_t trained_ = 0;       // the highest step trained
  std::int64_t good_ = 0, torn_ = 0, failed_ = 0, corrupted_ = 0, most_retrained_ = 0;
  std::vector<Violation> violations_;
};

}  // namespace aryl::daemon::testing
