// Checkpoints: atomic, checksummed files of an ElasticState's bytes.
//
// File "<dir>/ckpt-<step, 12 digits>.aryl":
//   magic "ARYLCKP1" | u32 version | u64 step | u32 world_size | u64 payload
//   bytes | u64 FNV-1a 64 checksum of the payload | payload
// (little-endian). A write goes to "<name>.tmp.<pid>", is fsync'ed, renamed
// over the final name and the directory is fsync'ed: a reader sees either the
// whole new file or none. LoadLatest() returns the newest file that passes
// every check; each newer file that fails (truncated, wrong checksum, bad
// header) is reported in `skipped` and left for an operator to inspect.
//
// Fencing (docs/architecture.md, "Leases and fencing"): "<dir>/FENCE" holds
// "<job> <generation>", the newest generation of the job that has written or
// restored in this directory. A manager given its job and generation
// (set_fence) raises the fence to it when it restores (RaiseFence) and when it
// commits a write, and refuses both when the fence is above it for the same
// job: a worker of a stale generation (a copy cut off from the scheduler while
// the job started again elsewhere) can never replace a good checkpoint. A
// fence of another job is replaced (a new job resuming from an old one's
// directory). Raise and commit run under flock(2) on "<dir>/FENCE.lock", so
// the check and the rename are one step. IsFenced() tells that refusal from
// other errors. Generation 0 (the default): no fencing.
//
// A full disk (docs/runtime.md, "A full checkpoint disk"): when a write fails
// for lack of space (CheckpointFs::IsNoSpace: ENOSPC, EDQUOT, a short write),
// its temp file is removed and room is made from checkpoints older than the
// newest good one (the newest that Load accepts), oldest first: at least one,
// then until the free space covers the new file. The write is then tried once
// more. The newest good checkpoint is never removed, nor any newer file that
// failed its checks. Room is made under the fence lock after the same check as
// a commit, so a stale copy removes nothing. Still no room: an IoError that
// IsNoSpace, naming the directory, the bytes needed and free, the checkpoint
// kept and the cause. Retention (keep) is applied after each good write as before.
// Raising the fence (a fresh generation's start) on a disk full to the last
// block, with nothing older than the newest good checkpoint to remove, uses
// "<dir>/FENCE.reserve": a block kept for it, written after each raise
// (best effort) and removed when a raise finds no other room. The raise's
// rename frees the old fence's block, so the reserve is written again even
// on a disk that stays full.
//
// File I/O goes through CheckpointFs so tests can inject failures.
// Thread safety: CheckpointManager is not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl {

// The file operations a checkpoint needs (LevelDB's Env, reduced).
class CheckpointFs {
 public:
  virtual ~CheckpointFs() = default;
  // Creates `path`, writes `data`, fsyncs it.
  virtual Status WriteFileSynced(const std::string& path, std::string_view data) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status SyncDir(const std::string& dir) = 0;
  virtual Result<std::string> ReadFile(const std::string& path) = 0;
  virtual Result<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  virtual Status CreateDirs(const std::string& dir) = 0;
  virtual Status Remove(const std::string& path) = 0;
  // Runs `body` holding an exclusive lock on `path` (created if missing).
  // The default is flock(2), which also serializes processes.
  virtual Status WithLock(const std::string& path, const std::function<Status()>& body);
  // Bytes an unprivileged writer may still use on the file system of `dir`.
  // The default is statvfs(3); a quota (EDQUOT) is not seen there.
  virtual Result<uint64_t> FreeBytes(const std::string& dir);
  static CheckpointFs* Posix();

  // An implementation returns NoSpace when an operation failed for lack of
  // space (ENOSPC, EDQUOT, a write that stopped short): an IoError whose
  // message starts "no space: ". The manager then makes room (above).
  static Status NoSpace(const std::string& what);
  static bool IsNoSpace(const Status& s);
};

struct CheckpointInfo {
  std::string path;
  int64_t step = 0;
  int world_size = 0;
  // Write: older checkpoints removed to make room on a full disk (0: none).
  int removed_for_space = 0;
};

struct LoadedCheckpoint {
  CheckpointInfo info;
  std::string payload;
  std::vector<Status> skipped;  // newer checkpoints rejected, newest first
};

class CheckpointManager {
 public:
  // Keeps the newest `keep` checkpoints (older ones are removed after a write).
  explicit CheckpointManager(std::string dir, int keep = 3, CheckpointFs* fs = CheckpointFs::Posix());

  // Writes atomically; on a full disk makes room and tries once more (above).
  // Errors: fenced (IsFenced), no space (CheckpointFs::IsNoSpace), other I/O.
  Result<CheckpointInfo> Write(int64_t step, int world_size, std::string_view payload);
  // NotFound when the directory holds no valid checkpoint.
  Result<LoadedCheckpoint> LoadLatest();
  // Validates and decodes one file.
  Result<LoadedCheckpoint> Load(const std::string& path);
  Result<std::vector<CheckpointInfo>> List();  // newest first, unvalidated

  // The job and generation this manager writes for (generation 0: unfenced).
  void set_fence(std::string job, int64_t generation) {
    fence_job_ = std::move(job);
    generation_ = generation;
  }
  // Moves the fence up to this manager's generation; FailedPrecondition
  // ("fenced: ...") when a newer generation of the job has already run here.
  // On a full disk makes room as Write does and tries once more.
  Status RaiseFence();
  // RaiseFence, tried up to kRaiseTries times while it fails with an I/O
  // error (one that may pass: EIO, no space), never again after a fenced
  // refusal or a corrupt fence. `pause(n)` runs before try n + 1 (the runtime
  // sleeps a second); the last error is returned. A fresh generation's start
  // has no later chance to raise it: without it the start fails.
  static constexpr int kRaiseTries = 3;
  Status RaiseFenceRetrying(const std::function<void(int tried)>& pause);
  // Reads the fence without changing it: the same refusal as RaiseFence when
  // a newer generation of the job has run here (a cheap periodic check).
  Status CheckFence();
  struct FenceValue {
    std::string job;
    int64_t generation = 0;  // 0: no fence written
  };
  Result<FenceValue> Fence();
  static bool IsFenced(const Status& s);

  const std::string& dir() const { return dir_; }
  static std::string FileName(int64_t step);

 private:
  std::string dir_;
  int keep_;
  CheckpointFs* fs_;
  std::string fence_job_;
  int64_t generation_ = 0;
  // Under the lock: checks the fence against generation_ and raises it.
  Status CheckAndRaiseLocked();
  Status StaleAgainst(const FenceValue& fence) const;
  // Writes FENCE.reserve when it is missing (best effort).
  void KeepFenceReserve();
  // Writes `data` to `tmp` and commits it as `path` (under the fence when
  // fenced); removes `tmp` when either step fails.
  Status WriteAndCommit(const std::string& tmp, const std::string& path, std::string_view data);
  struct Room;
  // After a write of `needed` bytes failed for lack of space: removes older
  // checkpoints (see the header comment). Fenced when this copy is stale.
  Result<Room> MakeRoom(uint64_t needed);
};

}  // namespace aryl
