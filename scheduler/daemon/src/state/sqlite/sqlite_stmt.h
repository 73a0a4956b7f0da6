// Stmt: one prepared SQLite statement of the state store, finalized on scope
// exit, with SQLite's result codes turned into Status (state_store.cc and
// state_store_events.cc). Internal to the daemon's state store.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "aryl/status.h"

namespace aryl::daemon::internal {

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Status status(const char* what) const {
    if (rc_ == SQLITE_OK) return Status::Ok();
    return Error(what, rc_);
  }
  void Bind(int i, const std::string& v) { sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT); }
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
};

}  // namespace aryl::daemon::internal
