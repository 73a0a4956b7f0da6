// A job's checkpoint directory in memory, shared by whichever worker is its
// rank 0 (one file system under every agent, as a cluster's shared checkpoint
// storage is): the CheckpointFs that the simulated runtime's real
// CheckpointManager (runtime/include/aryl/checkpoint.h) writes through.
//
// Its faults, as a real file system shows them:
//   - a capacity in bytes: a write that does not fit fails with
//     CheckpointFs::NoSpace (ENOSPC) and leaves nothing behind;
//   - other bytes on the file system (another job's files filling the shared
//     disk for a while): they take room the checkpoints cannot get back;
//   - the next write fails with an I/O error (EIO), not for lack of room;
//   - a committed file corrupted (a byte flipped) or torn (cut short).
//
// Pure and single-threaded: WithLock runs its body (no other process).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/checkpoint.h"

namespace aryl::daemon::testing {

class MemoryCheckpointFs final : public CheckpointFs {
 public:
  static constexpr std::uint64_t kUnlimited = ~std::uint64_t{0};

  Status WriteFileSynced(const std::string& path, std::string_view data) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string&) override { return Status::Ok(); }
  Result<std::string> ReadFile(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) override;
  Status CreateDirs(const std::string&) override { return Status::Ok(); }
  Status Remove(const std::string& path) override;
  Status WithLock(const std::string&, const std::function<Status()>& body) override { return body(); }
  Result<std::uint64_t> FreeBytes(const std::string& dir) override;

  // The faults (above).
  void set_capacity(std::uint64_t bytes) { capacity_ = bytes; }
  std::uint64_t capacity() const { return capacity_; }
  void set_other_bytes(std::uint64_t bytes) { other_ = bytes; }
  std::uint64_t other_bytes() const { return other_; }
  void FailNextWrite() { fail_next_write_ = true; }
  // Flips a byte in the middle of `path` (torn, or a file corrupted before:
  // cuts it to half). False when there is no such file.
  bool Corrupt(const std::string& path, bool torn);

  // The names in `dir` (ListDir without the Result).
  std::vector<std::string> Names(const std::string& dir) const;
  bool Exists(const std::string& path) const { return files_.count(path) > 0; }
  std::uint64_t Size(const std::string& path) const;
  std::uint64_t used() const { return used_; }
  // Writes refused for lack of room, and failed by FailNextWrite.
  std::int64_t no_space() const { return no_space_; }
  std::int64_t io_errors() const { return io_errors_; }

 private:
  std::map<std::string, std::string> files_;  // path -> bytes
  std::set<std::string> corrupt_;              // until written again
  std::uint64_t used_ = 0;
  std::uint64_t capacity_ = kUnlimited;
  std::uint64_t other_ = 0;
  bool fail_next_write_ = false;
  std::int64_t no_space_ = 0, io_errors_ = 0;
};

}  // namespace aryl::daemon::testing
