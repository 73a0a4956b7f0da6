// Stmt: one prepared SQLite statement of the state store, with SQLite's
// result codes turned into Status (state_store.cc and state_store_events.cc).
// Internal to the daemon's state store.
//
// A statement of fixed text is prepared once per connection (StmtCache) and
// reset on scope exit: compiling the SQL cost as much as running it for the
// store's one-row reads and writes (a restart reads two meta keys per node).
// Statements built at run time are prepared and finalized each time.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "aryl/status.h"

namespace aryl::daemon::internal {

// The prepared statements of one connection, by SQL text. Not thread-safe:
// used by the thread that owns the connection. Finalizes them before the
// connection closes (its owner destroys it first).
class StmtCache {
 public:
  explicit StmtCache(sqlite3* db) : db_(db) {}
  ~StmtCache() { Clear(); }
  StmtCache(const StmtCache&) = delete;
  StmtCache& operator=(const StmtCache&) = delete;

  sqlite3* db() const { return db_; }
  void Clear() {
    for (auto& [sql, e] : entries_) sqlite3_finalize(e.stmt);
    entries_.clear();
  }

 private:
  friend class Stmt;
  struct Entry {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;
  };
  sqlite3* db_;
  std::unordered_map<std::string, Entry> entries_;
};

class Stmt {
 public:
  // Prepared now, finalized on scope exit.
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr);
  }
  // From `cache` (prepared on first use), reset on scope exit. A statement
  // still in use further up the stack is prepared afresh instead.
  Stmt(StmtCache& cache, const char* sql) : db_(cache.db_) {
    StmtCache::Entry& e = cache.entries_[sql];
    if (e.in_use) {
      rc_ = sqlite3_prepare_v2(db_, sql, -1, &s_, nullptr);
      return;
    }
    if (!e.stmt) {
      rc_ = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &e.stmt, nullptr);
      if (rc_ != SQLITE_OK) {
        sqlite3_finalize(e.stmt);
        e.stmt = nullptr;
        return;
      }
    }
    rc_ = SQLITE_OK;
    e.in_use = true;
    s_ = e.stmt;
    cached_ = &e;
  }
  ~Stmt() {
    if (!cached_) {
      sqlite3_finalize(s_);
      return;
    }
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
    cached_->in_use = false;
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Status status(const char* what) const {
    if (rc_ == SQLITE_OK) return Status::Ok();
    return Error(what, rc_);
  }
  void Bind(int i, const std::string& v) { sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT); }
  // Not copied: `v` must outlive the step (the binding is cleared on scope exit).
  void BindBlob(int i, std::string_view v) {
    sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  }
  void Bind(int i, std::int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void Bind(int i, double v) { sqlite3_bind_double(s_, i, v); }
  void BindNull(int i) { sqlite3_bind_null(s_, i); }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(s_); }
  void Reset() { sqlite3_reset(s_); sqlite3_clear_bindings(s_); }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(s_, col);
    return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(s_, col)) : std::string();
  }
  void AppendBlob(int col, std::string* out) const {
    const void* b = sqlite3_column_blob(s_, col);
    if (b) out->append(static_cast<const char*>(b), static_cast<std::size_t>(sqlite3_column_bytes(s_, col)));
  }
  std::int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  double Real(int col) const { return sqlite3_column_double(s_, col); }
  Status Done(const char* what) {
    int rc = Step();
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) return Status::Ok();
    return Error(what, rc);
  }
  Status Error(const char* what, int rc) const {
    std::string msg = std::string(what) + ": " + sqlite3_errmsg(db_);
    if (rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB) return Status::Corruption(msg);
    if (rc == SQLITE_CONSTRAINT) return Status::AlreadyExists(msg);
    return Status::IoError(msg);
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
  StmtCache::Entry* cached_ = nullptr;  // null: this Stmt owns s_
};

}  // namespace aryl::daemon::internal
