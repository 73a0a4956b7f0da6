// SqliteStateStore: the core snapshot in pieces (the protocol's steps are in
// sqlite_state_store.h and state_store.h).
#include <sqlite3.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

#include "sqlite_state_store.h"
#include "sqlite_stmt.h"

namespace aryl::daemon {

using internal::Stmt;

Result<SqliteStateStore::SnapshotHead> SqliteStateStore::CoreSnapshotHead() {
  ARYL_ASSIGN_OR_RETURN(auto value, GetMeta("core_snapshot_head"));
  SnapshotHead head;
  if (!value) return head;
  if (std::sscanf(value->c_str(), "%" SCNd64 " %" SCNd64 " %" SCNd64, &head.id, &head.bytes, &head.upto) != 3 ||
      head.id <= 0 || head.bytes < 0 || head.upto < 0)
    return Status::Corruption(path_ + ": meta core_snapshot_head '" + value->substr(0, 100) +
                              "' is not '<id> <bytes> <upto>'");
  return head;
}

Status SqliteStateStore::DropStrayCoreSnapshotPieces() {
  ARYL_ASSIGN_OR_RETURN(SnapshotHead head, CoreSnapshotHead());
  Stmt q(*stmts_, "DELETE FROM core_snapshot_pieces WHERE snap <> ?;");
  ARYL_RETURN_IF_ERROR(q.status("prepare drop core snapshot pieces"));
  q.Bind(1, head.id);
  return q.Done("drop core snapshot pieces");
}

Result<std::int64_t> SqliteStateStore::BeginCoreSnapshot(std::optional<std::int64_t> upto) {
  std::int64_t id = 0;
  ARYL_RETURN_IF_ERROR(Batch([&]() -> Status {
    ARYL_ASSIGN_OR_RETURN(SnapshotHead head, CoreSnapshotHead());
    ARYL_RETURN_IF_ERROR(DropStrayCoreSnapshotPieces());
    // Above every id used before, the cancelled one's included: a late piece
    // of it never lands in the new one.
    id = std::max(head.id, writing_id_) + 1;
    return Status::Ok();
  }));
  writing_id_ = id;
  writing_upto_ = upto;
  writing_pieces_ = 0;
  writing_bytes_ = 0;
  return id;
}

Status SqliteStateStore::AppendCoreSnapshot(std::int64_t id, std::string_view piece) {
  if (id != writing_id_)
    return Status::Cancelled(path_ + ": core snapshot " + std::to_string(id) + " is not being written (" +
                             (writing_id_ ? "snapshot " + std::to_string(writing_id_) + " is" : std::string("none is")) +
                             ")");
  ARYL_RETURN_IF_ERROR(Batch([&]() -> Status {
    Stmt q(*stmts_, "INSERT INTO core_snapshot_pieces(snap, k, body) VALUES(?, ?, ?);");
    ARYL_RETURN_IF_ERROR(q.status("prepare append core snapshot piece"));
    q.Bind(1, id);
    q.Bind(2, writing_pieces_);
    q.BindBlob(3, piece);
    return q.Done("append core snapshot piece");
  }));
  ++writing_pieces_;
  writing_bytes_ += static_cast<std::int64_t>(piece.size());
  return Status::Ok();
}

Status SqliteStateStore::CommitCoreSnapshot(std::int64_t id) {
  if (id != writing_id_)
    return Status::Cancelled(path_ + ": core snapshot " + std::to_string(id) + " is not being written");
  ARYL_RETURN_IF_ERROR(Batch([&]() -> Status {
    // Every piece appended is still here (none rolled back with a batch).
    Stmt n(*stmts_, "SELECT count(*) FROM core_snapshot_pieces WHERE snap = ?;");
    ARYL_RETURN_IF_ERROR(n.status("prepare count core snapshot pieces"));
    n.Bind(1, id);
    if (n.Step() != SQLITE_ROW) return n.Error("count core snapshot pieces", SQLITE_ERROR);
    if (n.Int(0) != writing_pieces_)
      return Status::FailedPrecondition(path_ + ": core snapshot " + std::to_string(id) + " has " + std::to_string(n.Int(0)) +
                             " pieces, " + std::to_string(writing_pieces_) + " were appended");
    std::int64_t upto = 0;
    if (writing_upto_) {
      upto = *writing_upto_;
    } else {
      ARYL_ASSIGN_OR_RETURN(upto, LastCoreEventSeq());
    }
    ARYL_ASSIGN_OR_RETURN(SnapshotHead before, CoreSnapshotHead());
    upto = std::max(upto, before.upto);  // never fewer rows replaced than before
    return SetMeta("core_snapshot_head", std::to_string(id) + " " + std::to_string(writing_bytes_) + " " +
                                             std::to_string(upto));
  }));
  writing_id_ = 0;
  return Status::Ok();
}

Result<bool> SqliteStateStore::CompactCoreJournal(int max_pieces, int max_rows) {
  bool done = false;
  ARYL_RETURN_IF_ERROR(Batch([&]() -> Status {
    ARYL_ASSIGN_OR_RETURN(SnapshotHead head, CoreSnapshotHead());
    Stmt pieces(*stmts_,
                "DELETE FROM core_snapshot_pieces WHERE rowid IN "
                "(SELECT rowid FROM core_snapshot_pieces WHERE snap <> ? AND snap <> ? LIMIT ?);");
    ARYL_RETURN_IF_ERROR(pieces.status("prepare compact core snapshot pieces"));
    pieces.Bind(1, head.id);
    pieces.Bind(2, writing_id_);  // the one being written is not obsolete
    pieces.Bind(3, static_cast<std::int64_t>(max_pieces));
    ARYL_RETURN_IF_ERROR(pieces.Done("compact core snapshot pieces"));
    if (sqlite3_changes(db_) >= max_pieces) return Status::Ok();  // maybe more
    Stmt rows(*stmts_,
              "DELETE FROM core_events WHERE seq IN (SELECT seq FROM core_events WHERE seq <= ? ORDER BY seq LIMIT ?);");
    ARYL_RETURN_IF_ERROR(rows.status("prepare compact core events"));
    rows.Bind(1, head.upto);
    rows.Bind(2, static_cast<std::int64_t>(max_rows));
    ARYL_RETURN_IF_ERROR(rows.Done("compact core events"));
    done = sqlite3_changes(db_) < max_rows;
    return Status::Ok();
  }));
  return done;
}

Status SqliteStateStore::AbortCoreSnapshot(std::int64_t id) {
  if (id != writing_id_) return Status::Ok();  // cancelled already
  writing_id_ = 0;
  return Batch([&]() -> Status {
    Stmt q(*stmts_, "DELETE FROM core_snapshot_pieces WHERE snap = ?;");
    ARYL_RETURN_IF_ERROR(q.status("prepare abort core snapshot"));
    q.Bind(1, id);
    return q.Done("abort core snapshot");
  });
}

Result<std::optional<std::string>> SqliteStateStore::CoreSnapshot() {
  ARYL_ASSIGN_OR_RETURN(SnapshotHead head, CoreSnapshotHead());
  if (head.id == 0) return std::optional<std::string>();
  std::string body;
  body.reserve(static_cast<std::size_t>(head.bytes));
  Stmt q(*stmts_, "SELECT body FROM core_snapshot_pieces WHERE snap = ? ORDER BY k;");
  ARYL_RETURN_IF_ERROR(q.status("prepare read core snapshot"));
  q.Bind(1, head.id);
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) q.AppendBlob(0, &body);
  if (rc != SQLITE_DONE) return q.Error("read core snapshot", rc);
  if (static_cast<std::int64_t>(body.size()) != head.bytes)
    return Status::Corruption(path_ + ": core snapshot " + std::to_string(head.id) + " has " +
                              std::to_string(body.size()) + " bytes in its pieces, its head says " +
                              std::to_string(head.bytes));
  return std::optional<std::string>(std::move(body));
}

}  // namespace aryl::daemon
