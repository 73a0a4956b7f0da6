// The state store's journals: the event journal (events, event_nodes) and
// the core journal (core_events). See state_store.h.
#include <sqlite3.h>

#include <map>

#include "sqlite_state_store.h"
#include "sqlite_stmt.h"

namespace aryl::daemon {

using internal::Stmt;

Status SqliteStateStore::AppendEvent(const EventRecord& e) {
  return Batch([&]() -> Status {
    Stmt q(*stmts_, "INSERT INTO events(seq, time, job_id, kind, detail, data) VALUES(?, ?, ?, ?, ?, ?);");
    ARYL_RETURN_IF_ERROR(q.status("prepare append event"));
    if (e.seq > 0) q.Bind(1, e.seq); else q.BindNull(1);
    q.Bind(2, e.time);
    q.Bind(3, static_cast<std::int64_t>(e.job));
    q.Bind(4, e.kind);
    q.Bind(5, e.detail);
    q.Bind(6, e.data.empty() ? std::string("{}") : e.data);
    ARYL_RETURN_IF_ERROR(q.Done("append event"));
    if (e.nodes.empty()) return Status::Ok();
    std::int64_t seq = sqlite3_last_insert_rowid(db_);
    Stmt n(*stmts_, "INSERT OR IGNORE INTO event_nodes(seq, node) VALUES(?, ?);");
    ARYL_RETURN_IF_ERROR(n.status("prepare append event node"));
    for (const auto& node : e.nodes) {
      n.Reset();
      n.Bind(1, seq);
      n.Bind(2, node);
      ARYL_RETURN_IF_ERROR(n.Done("append event node"));
    }
    return Status::Ok();
  });
}

Result<std::vector<EventRecord>> SqliteStateStore::Events(const EventFilter& f) {
  std::string sql = "SELECT seq, time, job_id, kind, detail, data FROM events WHERE seq > ?";
  if (f.before > 0) sql += " AND seq < ?";
  if (f.job != 0) sql += " AND job_id = ?";
  if (!f.kind.empty()) sql += " AND kind = ?";
  if (f.since > 0) sql += " AND time >= ?";
  if (!f.node.empty()) sql += " AND seq IN (SELECT seq FROM event_nodes WHERE node = ?)";
  sql += f.newest_first ? " ORDER BY seq DESC LIMIT ?;" : " ORDER BY seq LIMIT ?;";
  Stmt q(db_, sql.c_str());
  ARYL_RETURN_IF_ERROR(q.status("prepare events"));
  int i = 1;
  q.Bind(i++, f.after);
  if (f.before > 0) q.Bind(i++, f.before);
  if (f.job != 0) q.Bind(i++, static_cast<std::int64_t>(f.job));
  if (!f.kind.empty()) q.Bind(i++, f.kind);
  if (f.since > 0) q.Bind(i++, f.since);
  if (!f.node.empty()) q.Bind(i++, f.node);
  q.Bind(i++, static_cast<std::int64_t>(f.limit));
  std::vector<EventRecord> out;
  std::map<std::int64_t, std::size_t> index;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    EventRecord e{q.Int(0), q.Real(1), static_cast<std::uint64_t>(q.Int(2)), q.Text(3), q.Text(4), {}, q.Text(5)};
    index[e.seq] = out.size();
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return q.Error("read events", rc);
  if (out.empty()) return out;
  // The nodes of the rows read, in one range query.
  Stmt n(*stmts_, "SELECT seq, node FROM event_nodes WHERE seq >= ? AND seq <= ? ORDER BY seq, node;");
  ARYL_RETURN_IF_ERROR(n.status("prepare event nodes"));
  n.Bind(1, index.begin()->first);
  n.Bind(2, index.rbegin()->first);
  while ((rc = n.Step()) == SQLITE_ROW) {
    auto it = index.find(n.Int(0));
    if (it != index.end()) out[it->second].nodes.push_back(n.Text(1));
  }
  if (rc != SQLITE_DONE) return n.Error("read event nodes", rc);
  return out;
}

Status SqliteStateStore::AppendCoreEvent(double time, const std::string& body) {
  return Batch([&]() -> Status {
    Stmt q(*stmts_, "INSERT INTO core_events(time, body) VALUES(?, ?);");
    ARYL_RETURN_IF_ERROR(q.status("prepare append core event"));
    q.Bind(1, time);
    q.Bind(2, body);
    return q.Done("append core event");
  });
}

Result<std::vector<std::pair<double, std::string>>> SqliteStateStore::CoreEvents() {
  // Rows the snapshot in force replaces may still be here until compacted.
  ARYL_ASSIGN_OR_RETURN(SnapshotHead head, CoreSnapshotHead());
  Stmt q(*stmts_, "SELECT time, body FROM core_events WHERE seq > ? ORDER BY seq;");
  ARYL_RETURN_IF_ERROR(q.status("prepare core events"));
  q.Bind(1, head.upto);
  std::vector<std::pair<double, std::string>> out;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) out.emplace_back(q.Real(0), q.Text(1));
  if (rc != SQLITE_DONE) return q.Error("read core events", rc);
  return out;
}

Status SqliteStateStore::DeleteCoreEvents(std::optional<std::int64_t> upto) {
  if (!upto) return Exec("DELETE FROM core_events;");
  Stmt q(*stmts_, "DELETE FROM core_events WHERE seq <= ?;");
  ARYL_RETURN_IF_ERROR(q.status("prepare delete core events"));
  q.Bind(1, *upto);
  return q.Done("delete core events");
}

Result<std::int64_t> SqliteStateStore::LastCoreEventSeq() {
  Stmt q(*stmts_, "SELECT coalesce(max(seq), 0) FROM core_events;");
  ARYL_RETURN_IF_ERROR(q.status("prepare last core event"));
  int rc = q.Step();
  if (rc != SQLITE_ROW) return q.Error("last core event", rc);
  return q.Int(0);
}

Result<std::int64_t> SqliteStateStore::LastEventSeq() {
  Stmt q(*stmts_, "SELECT coalesce(max(seq), 0) FROM events;");
  ARYL_RETURN_IF_ERROR(q.status("prepare last event"));
  int rc = q.Step();
  if (rc != SQLITE_ROW) return q.Error("last event", rc);
  return q.Int(0);
}

Status SqliteStateStore::RestoreCoreEvent(std::int64_t seq, double time, const std::string& body) {
  Stmt q(*stmts_, "INSERT INTO core_events(seq, time, body) VALUES(?, ?, ?);");
  ARYL_RETURN_IF_ERROR(q.status("prepare restore core event"));
  q.Bind(1, seq);
  q.Bind(2, time);
  q.Bind(3, body);
  return q.Done("restore core event");
}

}  // namespace aryl::daemon
