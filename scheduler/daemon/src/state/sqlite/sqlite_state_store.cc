#include "sqlite_state_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <string>

#include "sqlite_stmt.h"

namespace aryl::daemon {

using internal::Stmt;
namespace {

// Schema v1. Each later version appends its migration to kMigrations.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  client_token TEXT UNIQUE,
  spec TEXT NOT NULL,
  state TEXT NOT NULL,
  submit_time REAL NOT NULL,
  start_time REAL NOT NULL DEFAULT 0,
  end_time REAL NOT NULL DEFAULT 0,
  generation INTEGER NOT NULL DEFAULT 0,
  exit_code INTEGER NOT NULL DEFAULT 0,
  message TEXT NOT NULL DEFAULT '',
  workers TEXT NOT NULL DEFAULT '{}');
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS placements(
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  node TEXT NOT NULL,
  workers INTEGER NOT NULL CHECK (workers > 0),
  PRIMARY KEY(job_id, node));
CREATE TABLE IF NOT EXISTS nodes(
  name TEXT PRIMARY KEY,
  pool TEXT NOT NULL,
  gpu_type TEXT NOT NULL,
  gpus INTEGER NOT NULL,
  loan_state TEXT NOT NULL,
  server_id INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS events(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  time REAL NOT NULL,
  job_id INTEGER NOT NULL,
  kind TEXT NOT NULL,
  detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id, seq);
CREATE TABLE IF NOT EXISTS core_events(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  time REAL NOT NULL,
  body TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS core_events_no_update BEFORE UPDATE ON core_events
  BEGIN SELECT RAISE(ABORT, 'the core journal is append-only'); END;
-- The journal is append-only.
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
  BEGIN SELECT RAISE(ABORT, 'the event journal is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
  BEGIN SELECT RAISE(ABORT, 'the event journal is append-only'); END;
)sql";

// Migrations, in order: kMigrations[i] takes a file from version i + 1 to i + 2.
// v2: journal rows name the nodes they are about and carry their facts as JSON
// (aryl describe, aryl events --node).
constexpr const char* kMigrations[] = {
    R"sql(
ALTER TABLE events ADD COLUMN data TEXT NOT NULL DEFAULT '{}';
CREATE TABLE IF NOT EXISTS event_nodes(
  seq INTEGER NOT NULL,
  node TEXT NOT NULL,
  PRIMARY KEY(node, seq));
CREATE INDEX IF NOT EXISTS event_nodes_seq ON event_nodes(seq);
CREATE INDEX IF NOT EXISTS events_kind ON events(kind, seq);
CREATE INDEX IF NOT EXISTS events_time ON events(time);
CREATE TRIGGER IF NOT EXISTS event_nodes_no_update BEFORE UPDATE ON event_nodes
  BEGIN SELECT RAISE(ABORT, 'the event journal is append-only'); END;
CREATE TRIGGER IF NOT EXISTS event_nodes_no_delete BEFORE DELETE ON event_nodes
  BEGIN SELECT RAISE(ABORT, 'the event journal is append-only'); END;
)sql",
    // v3: the core snapshot in pieces (sqlite_core_snapshot.cc); the one
    // snapshot a v2 file holds in meta becomes snapshot 1 of one piece.
    R"sql(
CREATE TABLE IF NOT EXISTS core_snapshot_pieces(
  snap INTEGER NOT NULL,
  k INTEGER NOT NULL,
  body BLOB NOT NULL,
  PRIMARY KEY(snap, k));
INSERT INTO core_snapshot_pieces(snap, k, body)
  SELECT 1, 0, CAST(value AS BLOB) FROM meta WHERE key = 'core_snapshot';
INSERT INTO meta(key, value)
  SELECT 'core_snapshot_head', '1 ' || length(CAST(value AS BLOB)) || ' 0' FROM meta WHERE key = 'core_snapshot';
DELETE FROM meta WHERE key = 'core_snapshot';
)sql",
};
static_assert(std::size(kMigrations) + 1 == StateStore::kSchemaVersion);

}  // namespace

SqliteStateStore::~SqliteStateStore() {
  stmts_.reset();  // finalized before the connection closes
  if (db_) sqlite3_close_v2(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

namespace {

// Takes the exclusive lock on "<path>.lock" and writes this process's pid in it.
Result<int> LockStateFile(const std::string& path) {
  std::string lock_path = path + ".lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError("cannot open lock file " + lock_path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) < 0) {
    int err = errno;
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "unknown";
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      return Status::FailedPrecondition("state file " + path + " is in use by another aryl-scheduler (pid " + pid +
                                        ", lock " + lock_path + "); one scheduler per state file");
    }
    return Status::IoError("cannot lock " + lock_path + ": " + std::strerror(err));
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The lock is what matters; the pid is only for the error message.
  }
  return fd;
}

}  // namespace

Status SqliteStateStore::Exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string msg = err ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  if (rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT) {
    return Status::Corruption(path_ + " is not an Aryl state file: " + msg);
  }
  return Status::IoError(path_ + ": " + msg);
}

Result<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(const std::string& path) {
  std::unique_ptr<SqliteStateStore> store(new SqliteStateStore());
  store->path_ = path;
  if (path != ":memory:") {
    ARYL_ASSIGN_OR_RETURN(store->lock_fd_, LockStateFile(path));
  }
  int rc = sqlite3_open_v2(path.c_str(), &store->db_,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    return Status::IoError("cannot open state file " + path + ": " +
                           (store->db_ ? sqlite3_errmsg(store->db_) : sqlite3_errstr(rc)));
  }
  store->stmts_ = std::make_unique<internal::StmtCache>(store->db_);
  // Never block forever on a lock held by another process.
  sqlite3_busy_timeout(store->db_, 5000);
  // WAL + synchronous=NORMAL: a commit survives a process crash (SIGKILL); FULL
  // also survives power loss. The daemon's durability promise is about its own
  // crashes, and NORMAL keeps a round's commit well under a millisecond.
  if (path != ":memory:") {
    ARYL_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL;"));
    Stmt check(store->db_, "PRAGMA journal_mode;");
    if (check.Step() == SQLITE_ROW && check.Text(0) != "wal") {
      return Status::IoError(path + ": cannot switch to WAL mode (journal_mode=" + check.Text(0) + ")");
    }
  }
  ARYL_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"));
  ARYL_RETURN_IF_ERROR(store->Migrate());
  ARYL_RETURN_IF_ERROR(store->DropStrayCoreSnapshotPieces());
  return store;
}

Status SqliteStateStore::Migrate() {
  // A fresh file has no tables; an Aryl file has meta.schema_version.
  Stmt has_meta(db_, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='meta';");
  ARYL_RETURN_IF_ERROR(has_meta.status("read schema"));
  int rc = has_meta.Step();
  if (rc != SQLITE_ROW) return has_meta.Error(("read schema of " + path_).c_str(), rc);
  bool fresh = has_meta.Int(0) == 0;
  if (fresh) {
    Stmt any(db_, "SELECT count(*) FROM sqlite_master;");
    if (any.Step() == SQLITE_ROW && any.Int(0) > 0) {
      return Status::Corruption(path_ + " is a SQLite file but not an Aryl state file (no meta table)");
    }
    ARYL_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
    Status s = Exec(kSchemaV1);
    for (const char* m : kMigrations)
      if (s.ok()) s = Exec(m);
    if (s.ok()) {
      s = Exec(("INSERT INTO meta(key, value) VALUES('schema_version', '" +
                std::to_string(kSchemaVersion) + "');").c_str());
    }
    if (!s.ok()) {
      (void)Exec("ROLLBACK;");
      return s;
    }
    ARYL_RETURN_IF_ERROR(Exec("COMMIT;"));
    schema_version_ = kSchemaVersion;
    return Status::Ok();
  }
  ARYL_ASSIGN_OR_RETURN(auto version, GetMeta("schema_version"));
  if (!version) return Status::Corruption(path_ + ": meta has no schema_version");
  int v = 0;
  try {
    v = std::stoi(*version);
  } catch (const std::exception&) {
    return Status::Corruption(path_ + ": bad schema_version '" + *version + "'");
  }
  if (v > kSchemaVersion) {
    return Status::FailedPrecondition(path_ + " has schema version " + std::to_string(v) +
                                      " but this aryl-scheduler supports up to " +
                                      std::to_string(kSchemaVersion) + "; upgrade Aryl");
  }
  if (v < 1) return Status::Corruption(path_ + ": bad schema_version " + std::to_string(v));
  // Migrations from v to kSchemaVersion, each in its own transaction.
  for (; v < kSchemaVersion; ++v) {
    ARYL_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
    Status s = Exec(kMigrations[v - 1]);
    if (s.ok())
      s = Exec(("UPDATE meta SET value = '" + std::to_string(v + 1) + "' WHERE key = 'schema_version';").c_str());
    if (!s.ok()) {
      (void)Exec("ROLLBACK;");
      return s.WithContext("migrating " + path_ + " to schema " + std::to_string(v + 1));
    }
    ARYL_RETURN_IF_ERROR(Exec("COMMIT;"));
  }
  schema_version_ = v;
  return Status::Ok();
}

Status SqliteStateStore::Batch(const std::function<Status()>& body) {
  if (batch_depth_ > 0) return body();  // nested: part of the outer transaction
  ARYL_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  ++batch_depth_;
  Status s = body();
  --batch_depth_;
  if (!s.ok()) {
    (void)Exec("ROLLBACK;");
    return s;
  }
  Status c = Exec("COMMIT;");
  if (!c.ok()) (void)Exec("ROLLBACK;");
  return c;
}

static Status WritePlacement(internal::StmtCache& db, const JobRecord& job) {
  Stmt del(db, "DELETE FROM placements WHERE job_id = ?;");
  ARYL_RETURN_IF_ERROR(del.status("prepare delete placement"));
  del.Bind(1, static_cast<std::int64_t>(job.id));
  ARYL_RETURN_IF_ERROR(del.Done("delete placement"));
  Stmt ins(db, "INSERT INTO placements(job_id, node, workers) VALUES(?, ?, ?);");
  ARYL_RETURN_IF_ERROR(ins.status("prepare insert placement"));
  for (const auto& [node, workers] : job.placement) {
    if (workers <= 0) {
      return Status::InvalidArgument("job " + std::to_string(job.id) + ": placement on " + node +
                                     " has " + std::to_string(workers) + " workers");
    }
    ins.Reset();
    ins.Bind(1, static_cast<std::int64_t>(job.id));
    ins.Bind(2, node);
    ins.Bind(3, static_cast<std::int64_t>(workers));
    ARYL_RETURN_IF_ERROR(ins.Done("insert placement"));
  }
  return Status::Ok();
}

Result<std::uint64_t> SqliteStateStore::InsertJob(const JobRecord& job) {
  if (!job.client_token.empty()) {
    ARYL_ASSIGN_OR_RETURN(auto existing, FindJobByToken(job.client_token));
    if (existing) return Status::AlreadyExists(std::to_string(*existing));
  }
  std::uint64_t id = 0;
  Status s = Batch([&]() -> Status {
    Stmt ins(*stmts_,
             "INSERT INTO jobs(id, name, client_token, spec, state, submit_time, start_time, end_time,"
             " generation, exit_code, message, workers) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);");
    ARYL_RETURN_IF_ERROR(ins.status("prepare insert job"));
    if (job.id != 0) ins.Bind(1, static_cast<std::int64_t>(job.id)); else ins.BindNull(1);
    ins.Bind(2, job.name);
    if (job.client_token.empty()) ins.BindNull(3); else ins.Bind(3, job.client_token);
    ins.Bind(4, job.spec_json);
    ins.Bind(5, std::string(JobStateName(job.state)));
    ins.Bind(6, job.submit_time);
    ins.Bind(7, job.start_time);
    ins.Bind(8, job.end_time);
    ins.Bind(9, static_cast<std::int64_t>(job.generation));
    ins.Bind(10, static_cast<std::int64_t>(job.exit_code));
    ins.Bind(11, job.message);
    ins.Bind(12, job.workers_json);
    ARYL_RETURN_IF_ERROR(ins.Done("insert job"));
    id = static_cast<std::uint64_t>(sqlite3_last_insert_rowid(db_));
    JobRecord with_id = job;
    with_id.id = id;
    return WritePlacement(*stmts_, with_id);
  });
  if (!s.ok()) return s;
  return id;
}

Result<std::optional<std::uint64_t>> SqliteStateStore::FindJobByToken(const std::string& token) {
  Stmt q(*stmts_, "SELECT id FROM jobs WHERE client_token = ?;");
  ARYL_RETURN_IF_ERROR(q.status("prepare find job"));
  q.Bind(1, token);
  int rc = q.Step();
  if (rc == SQLITE_ROW) return std::optional<std::uint64_t>(static_cast<std::uint64_t>(q.Int(0)));
  if (rc == SQLITE_DONE) return std::optional<std::uint64_t>();
  return q.Error("find job by token", rc);
}

Status SqliteStateStore::UpdateJob(const JobRecord& job) {
  return Batch([&]() -> Status {
    Stmt up(*stmts_,
            "UPDATE jobs SET state = ?, start_time = ?, end_time = ?, generation = ?, exit_code = ?,"
            " message = ?, workers = ? WHERE id = ?;");
    ARYL_RETURN_IF_ERROR(up.status("prepare update job"));
    up.Bind(1, std::string(JobStateName(job.state)));
    up.Bind(2, job.start_time);
    up.Bind(3, job.end_time);
    up.Bind(4, static_cast<std::int64_t>(job.generation));
    up.Bind(5, static_cast<std::int64_t>(job.exit_code));
    up.Bind(6, job.message);
    up.Bind(7, job.workers_json);
    up.Bind(8, static_cast<std::int64_t>(job.id));
    ARYL_RETURN_IF_ERROR(up.Done("update job"));
    if (sqlite3_changes(db_) != 1) return Status::NotFound("job " + std::to_string(job.id));
    return WritePlacement(*stmts_, job);
  });
}

namespace {
constexpr const char* kJobColumns =
    "SELECT id, name, IFNULL(client_token, ''), spec, state, submit_time, start_time, end_time,"
    " generation, exit_code, message, workers FROM jobs";

Result<JobRecord> ReadJobRow(const Stmt& q) {
  JobRecord j;
  j.id = static_cast<std::uint64_t>(q.Int(0));
  j.name = q.Text(1);
  j.client_token = q.Text(2);
  j.spec_json = q.Text(3);
  ARYL_ASSIGN_OR_RETURN(j.state, ParseJobState(q.Text(4)));
  j.submit_time = q.Real(5);
  j.start_time = q.Real(6);
  j.end_time = q.Real(7);
  j.generation = static_cast<std::uint64_t>(q.Int(8));
  j.exit_code = static_cast<int>(q.Int(9));
  j.message = q.Text(10);
  j.workers_json = q.Text(11);
  return j;
}
}  // namespace

Result<JobRecord> SqliteStateStore::GetJob(std::uint64_t id) {
  Stmt q(db_, (std::string(kJobColumns) + " WHERE id = ?;").c_str());
  ARYL_RETURN_IF_ERROR(q.status("prepare get job"));
  q.Bind(1, static_cast<std::int64_t>(id));
  int rc = q.Step();
  if (rc == SQLITE_DONE) return Status::NotFound("job " + std::to_string(id) + " does not exist");
  if (rc != SQLITE_ROW) return q.Error("get job", rc);
  ARYL_ASSIGN_OR_RETURN(JobRecord j, ReadJobRow(q));
  Stmt p(*stmts_, "SELECT node, workers FROM placements WHERE job_id = ? ORDER BY node;");
  p.Bind(1, static_cast<std::int64_t>(id));
  while ((rc = p.Step()) == SQLITE_ROW) j.placement[p.Text(0)] = static_cast<int>(p.Int(1));
  if (rc != SQLITE_DONE) return p.Error("get placement", rc);
  return j;
}

Result<std::vector<JobRecord>> SqliteStateStore::ListJobs(bool only_live, std::uint64_t after, int limit) {
  std::string sql = kJobColumns;
  sql += " WHERE id > ?";
  if (only_live) sql += " AND state IN ('queued', 'running')";
  sql += " ORDER BY id";
  if (limit >= 0) sql += " LIMIT " + std::to_string(limit);
  sql += ";";
  Stmt q(db_, sql.c_str());
  ARYL_RETURN_IF_ERROR(q.status("prepare list jobs"));
  q.Bind(1, static_cast<std::int64_t>(after));
  std::vector<JobRecord> jobs;
  std::map<std::uint64_t, size_t> index;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    ARYL_ASSIGN_OR_RETURN(JobRecord j, ReadJobRow(q));
    index[j.id] = jobs.size();
    jobs.push_back(std::move(j));
  }
  if (rc != SQLITE_DONE) return q.Error("list jobs", rc);
  if (jobs.empty()) return jobs;
  Stmt p(*stmts_, "SELECT job_id, node, workers FROM placements WHERE job_id > ? AND job_id <= ?;");
  p.Bind(1, static_cast<std::int64_t>(after));
  p.Bind(2, static_cast<std::int64_t>(jobs.back().id));
  while ((rc = p.Step()) == SQLITE_ROW) {
    auto it = index.find(static_cast<std::uint64_t>(p.Int(0)));
    if (it != index.end()) jobs[it->second].placement[p.Text(1)] = static_cast<int>(p.Int(2));
  }
  if (rc != SQLITE_DONE) return p.Error("list placements", rc);
  return jobs;
}

Result<std::uint64_t> SqliteStateStore::MaxJobId() {
  Stmt q(*stmts_, "SELECT IFNULL(MAX(id), 0) FROM jobs;");
  int rc = q.Step();
  if (rc != SQLITE_ROW) return q.Error("max job id", rc);
  return static_cast<std::uint64_t>(q.Int(0));
}

Status SqliteStateStore::UpsertNode(const NodeRecord& node) {
  return Batch([&]() -> Status {
    Stmt q(*stmts_,
           "INSERT INTO nodes(name, pool, gpu_type, gpus, loan_state, server_id) VALUES(?, ?, ?, ?, ?, ?)"
           " ON CONFLICT(name) DO UPDATE SET pool = excluded.pool, gpu_type = excluded.gpu_type,"
           " gpus = excluded.gpus, loan_state = excluded.loan_state, server_id = excluded.server_id;");
    ARYL_RETURN_IF_ERROR(q.status("prepare upsert node"));
    q.Bind(1, node.name);
    q.Bind(2, node.pool);
    q.Bind(3, node.gpu_type);
    q.Bind(4, static_cast<std::int64_t>(node.gpus));
    q.Bind(5, node.loan_state);
    q.Bind(6, static_cast<std::int64_t>(node.server_id));
    return q.Done("upsert node");
  });
}

Result<std::vector<NodeRecord>> SqliteStateStore::ListNodes() {
  Stmt q(*stmts_, "SELECT name, pool, gpu_type, gpus, loan_state, server_id FROM nodes ORDER BY server_id;");
  ARYL_RETURN_IF_ERROR(q.status("prepare list nodes"));
  std::vector<NodeRecord> nodes;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    nodes.push_back({q.Text(0), q.Text(1), q.Text(2), static_cast<int>(q.Int(3)), q.Text(4),
                     static_cast<std::uint32_t>(q.Int(5))});
  }
  if (rc != SQLITE_DONE) return q.Error("list nodes", rc);
  return nodes;
}

Status SqliteStateStore::SetMeta(const std::string& key, const std::string& value) {
  return Batch([&]() -> Status {
    Stmt q(*stmts_, "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value;");
    ARYL_RETURN_IF_ERROR(q.status("prepare set meta"));
    q.Bind(1, key);
    q.Bind(2, value);
    return q.Done("set meta");
  });
}

Result<std::optional<std::string>> SqliteStateStore::GetMeta(const std::string& key) {
  Stmt q(*stmts_, "SELECT value FROM meta WHERE key = ?;");
  ARYL_RETURN_IF_ERROR(q.status("prepare get meta"));
  q.Bind(1, key);
  int rc = q.Step();
  if (rc == SQLITE_ROW) return std::optional<std::string>(q.Text(0));
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  return q.Error(("read meta of " + path_).c_str(), rc);
}

}  // namespace aryl::daemon
