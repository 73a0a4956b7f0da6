// The checkpoint disk side of aryl-simtest --daemon (daemon_sim.h): the
// `cdisk` fault on the job's checkpoint directory (a MemoryCheckpointFs under
// the runtime's own CheckpointManager: a small capacity, windows when other
// files fill the disk, a write that fails with an I/O error, a committed file
// corrupted or torn), and D8 on the scheduler's side: every failed write the
// runtime reported is counted.
//
// D8, exactly: the scheduler counts a failure per CheckpointReport with an
// error it reads (a duplicate on the wire is read, and counted, twice), and
// its checkpoint_failed events stand for every one of them:
//   - the failures the events add up to (their "failures" fields) never
//     exceed the failure reports the scheduler read;
//   - once a good checkpoint's report is read after failures, the events add
//     up to all of them, in a run whose scheduler neither restarts (the
//     count not yet in an event lives in its memory) nor has its state disk
//     fill up (an event not journaled is lost);
//   - in a run whose wire loses nothing (no loss, partition, one-way
//     partition or scheduler restart), every failure the runtime had reaches
//     the scheduler: at the end the reports read equal the failures (at least
//     as many with duplicates).
// D9-D11 are the job's CheckpointTruth's (simtest/driven/checkpoint_truth.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "driven_cluster.h"

namespace aryl::simtest {

class CheckpointDiskFaults {
 public:
  using Violation = daemon::testing::CheckpointTruth::Violation;

  // `exact`: the run's scheduler neither restarts nor has a full state disk.
  CheckpointDiskFaults(daemon::testing::DrivenCluster& c, protocol::JobId job, bool exact,
                       std::function<void(const std::string&)> trace);

  // Draws the fault for one seed and puts its steps on the run's plan:
  // room for 1-4 checkpoint files of `file_bytes` (and up to one more's
  // worth of slack), 1-2 windows of 5-60 s in which other files take 30-100%
  // of the disk, 0-2 writes that fail with an I/O error, 0-2 checkpoint files
  // corrupted (a byte flipped, or cut short), and 1-2 SIGKILLs of every
  // worker of the job at 20-320 s (a fresh group then restores from the disk).
  using Uniform = std::function<double(double lo, double hi)>;
  using Plan = std::function<void(double at, std::string what, std::function<void()> fn)>;
  void Draw(const Uniform& uniform, const Plan& plan, std::uint64_t file_bytes);

  // The faults (each a step on the run's plan). A checkpoint file is
  // `file_bytes`; the disk has room for `files` of them and `slack` more bytes.
  void Capacity(int files, std::uint64_t file_bytes, std::uint64_t slack);
  // Other files take `fraction` of the capacity until Empty().
  void Fill(double fraction);
  void Empty();
  void FailNextWrite();
  // The newest checkpoint file on the disk: a byte flipped, or cut short.
  void CorruptNewest(bool torn);
  void KillAll();

  // After each tick: D8 (the scheduler's events every 20 ticks or after a
  // good report that followed failures) and D10.
  std::vector<Violation> Check();
  // At the end: D8's runtime side, for a wire that lost nothing (`dup`: it
  // may have duplicated).
  std::vector<Violation> Finish(bool lossless, bool dup);
  std::int64_t reported_failures() const { return read_failures_; }
  std::int64_t kills() const { return kills_; }

 private:
  daemon::testing::MemoryCheckpointFs* Disk() { return c_.CheckpointDisk(job_); }
  void ReadEvents();

  daemon::testing::DrivenCluster& c_;
  protocol::JobId job_;
  bool exact_;
  std::function<void(const std::string&)> trace_;
  std::int64_t read_failures_ = 0;  // failure reports the scheduler read
  std::int64_t due_ = 0;  // a good report read after failures: the failures read before it
  std::int64_t ticks_ = 0;
  std::int64_t kills_ = 0;
  std::int64_t events_after_ = 0;   // the newest checkpoint_failed row read
  std::int64_t journaled_ = 0;      // the failures those rows stand for
  bool over_said_ = false, short_said_ = false;
};

}  // namespace aryl::simtest
