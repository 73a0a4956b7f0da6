// SqliteStateStore: the StateStore in one SQLite file (WAL mode), the default
// backend for a scheduler on one head node. Also the etcd backend's local
// index: it keeps the rows the leader wrote in an in-memory SQLite store and
// answers every query from there (state/etcd/etcd_state_store.h).
//
// The core snapshot in pieces (StateStore's steps 1-4, sqlite_core_snapshot.cc):
//   table core_snapshot_pieces(snap, k, body)  piece k of snapshot `snap`
//   meta core_snapshot_head = "<id> <bytes> <upto>": the snapshot in force,
//                              which replaces the core_events rows up to seq upto
//  1. Begin deletes every piece whose snap is not the head's and takes the
//     next id (one transaction).
//  2. Each Append inserts one row (its own transaction; in WAL mode with
//     synchronous=NORMAL a commit is a WAL append, no fsync).
//  3. Commit checks that every piece appended is there and points the head
//     at the new id and `upto` (one short transaction); CoreEvents skips the
//     rows up to `upto` from then on.
//  4. Compact deletes, a few at a time, the pieces of other snapshots and the
//     rows up to `upto` (each call one transaction): deleting 4-50 MB of
//     pieces and 10,000 rows in the commit held it for 95 ms at 20,000 jobs.
// Open deletes the pieces that no head names (a crash between 1 and 3).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "aryl/daemon/state_store.h"

struct sqlite3;

namespace aryl::daemon {

namespace internal {
class StmtCache;
}

class SqliteStateStore final : public StateStore {
 public:
  static Result<std::unique_ptr<SqliteStateStore>> Open(const std::string& path);
  ~SqliteStateStore() override;

  int schema_version() const override { return schema_version_; }
  std::string location() const override { return path_; }
  Status Batch(const std::function<Status()>& body) override;

  Result<std::uint64_t> InsertJob(const JobRecord& job) override;
  Result<std::optional<std::uint64_t>> FindJobByToken(const std::string& token) override;
  Status UpdateJob(const JobRecord& job) override;
  Result<JobRecord> GetJob(std::uint64_t id) override;
  Result<std::vector<JobRecord>> ListJobs(bool only_live = false, std::uint64_t after = 0, int limit = -1) override;
  Result<std::uint64_t> MaxJobId() override;

  Status UpsertNode(const NodeRecord& node) override;
  Result<std::vector<NodeRecord>> ListNodes() override;

  using StateStore::AppendEvent;
  using StateStore::Events;
  Status AppendEvent(const EventRecord& e) override;
  Result<std::vector<EventRecord>> Events(const EventFilter& filter) override;

  Status AppendCoreEvent(double time, const std::string& body) override;
  Result<std::vector<std::pair<double, std::string>>> CoreEvents() override;
  Result<std::int64_t> BeginCoreSnapshot(std::optional<std::int64_t> upto) override;
  Status AppendCoreSnapshot(std::int64_t id, std::string_view piece) override;
  Status CommitCoreSnapshot(std::int64_t id) override;
  Status AbortCoreSnapshot(std::int64_t id) override;
  Result<bool> CompactCoreJournal(int max_pieces, int max_rows) override;
  Result<std::int64_t> LastCoreEventSeq() override;
  Result<std::optional<std::string>> CoreSnapshot() override;

  Status SetMeta(const std::string& key, const std::string& value) override;
  Result<std::optional<std::string>> GetMeta(const std::string& key) override;

  // For a replica (the etcd backend's index): the seq of the newest event row
  // (0: none), and a core journal row restored with the seq it had.
  Result<std::int64_t> LastEventSeq();
  Status RestoreCoreEvent(std::int64_t seq, double time, const std::string& body);
  // Removes the core journal rows up to seq (all of them when nullopt).
  Status DeleteCoreEvents(std::optional<std::int64_t> upto);

 private:
  SqliteStateStore() = default;
  Status Exec(const char* sql);
  Status Migrate();
  // The snapshot in force: its id, bytes and the last row it replaces (id 0:
  // none), from meta core_snapshot_head ("<id> <bytes> <upto>").
  struct SnapshotHead {
    std::int64_t id = 0;
    std::int64_t bytes = 0;
    std::int64_t upto = 0;
  };
  Result<SnapshotHead> CoreSnapshotHead();
  // Deletes every piece not of the snapshot in force (sqlite_core_snapshot.cc).
  Status DropStrayCoreSnapshotPieces();

  sqlite3* db_ = nullptr;
  std::unique_ptr<internal::StmtCache> stmts_;  // prepared once (sqlite_stmt.h)
  int lock_fd_ = -1;  // flock on "<path>.lock", held while open
  std::string path_;
  int schema_version_ = 0;
  int batch_depth_ = 0;
  // The core snapshot being written (BeginCoreSnapshot): its id (0: none),
  // the rows it replaces and the pieces appended so far.
  std::int64_t writing_id_ = 0;
  std::optional<std::int64_t> writing_upto_;
  std::int64_t writing_pieces_ = 0;
  std::int64_t writing_bytes_ = 0;
};

}  // namespace aryl::daemon
