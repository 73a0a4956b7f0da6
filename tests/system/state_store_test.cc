// Durable state: WAL, round trips, idempotent submission, crash recovery, versioning.
#include "aryl/daemon/state_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace aryl::daemon {
namespace {

namespace fs = std::filesystem;

class StateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("aryl-state-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "state.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static JobRecord Job(const std::string& name, const std::string& token = {}) {
    JobRecord j;
    j.name = name;
    j.client_token = token;
    j.spec_json = R"({"command":["sh","-c","exit 0"],"min":1,"max":2})";
    j.submit_time = 1000;
    return j;
  }
  fs::path dir_;
  std::string path_;
};

// A job, its placement and its events survive close and reopen.
TEST_F(StateStoreTest, RoundTripAcrossReopen) {
  std::uint64_t id = 0;
  {
    auto s = StateStore::Open(path_);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->schema_version(), StateStore::kSchemaVersion);
    auto r = (*s)->InsertJob(Job("mlp", "tok-1"));
    ASSERT_TRUE(r.ok()) << r.status();
    id = *r;
    auto j = (*s)->GetJob(id);
    ASSERT_TRUE(j.ok());
    j->state = JobState::kRunning;
    j->generation = 3;
    j->placement = {{"node-a", 2}, {"node-b", 1}};
    ASSERT_TRUE((*s)->UpdateJob(*j).ok());
    ASSERT_TRUE((*s)->AppendEvent(1001, id, "start", "node-a:2,node-b:1").ok());
    ASSERT_TRUE((*s)->UpsertNode({"node-a", "training", "cpu", 2, "available", 0}).ok());
    ASSERT_TRUE((*s)->UpsertNode({"node-a", "training", "cpu", 4, "available", 0}).ok());
  }
  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok()) << s.status();
  auto j = (*s)->GetJob(id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->name, "mlp");
  EXPECT_EQ(j->state, JobState::kRunning);
  EXPECT_EQ(j->generation, 3u);
  EXPECT_EQ(j->placement, (std::map<std::string, int>{{"node-a", 2}, {"node-b", 1}}));
  auto ev = (*s)->Events(id);
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->size(), 1u);
  EXPECT_EQ((*ev)[0].kind, "start");
  auto nodes = (*s)->ListNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].gpus, 4);
  auto live = (*s)->ListJobs(true);
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(live->size(), 1u);
}

// The file is in WAL mode.
TEST_F(StateStoreTest, WalMode) {
  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(fs::exists(path_ + "-wal"));
}

// Submitting twice with one client token yields one job.
TEST_F(StateStoreTest, ClientTokenIsIdempotent) {
  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok());
  auto a = (*s)->InsertJob(Job("a", "same"));
  ASSERT_TRUE(a.ok());
  auto b = (*s)->InsertJob(Job("a", "same"));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Status::Code::kAlreadyExists);
  EXPECT_EQ(b.status().message(), std::to_string(*a));
  auto jobs = (*s)->ListJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->size(), 1u);
}

// A failed batch leaves nothing behind.
TEST_F(StateStoreTest, BatchRollsBack) {
  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok());
  Status st = (*s)->Batch([&]() -> Status {
    auto r = (*s)->InsertJob(Job("x"));
    if (!r.ok()) return r.status();
    ARYL_RETURN_IF_ERROR((*s)->AppendEvent(1, *r, "submit", ""));
    return Status::Internal("fail the round");
  });
  EXPECT_FALSE(st.ok());
  EXPECT_EQ((*s)->ListJobs()->size(), 0u);
  EXPECT_EQ((*s)->Events()->size(), 0u);
  // A placement with 0 workers is refused and changes nothing.
  auto id = (*s)->InsertJob(Job("y"));
  ASSERT_TRUE(id.ok());
  auto j = *(*s)->GetJob(*id);
  j.state = JobState::kRunning;
  j.placement = {{"n", 0}};
  EXPECT_TRUE((*s)->UpdateJob(j).IsInvalidArgument());
  EXPECT_EQ((*s)->GetJob(*id)->state, JobState::kQueued);
  // Unknown ids are NotFound.
  j.id = 999;
  j.placement.clear();
  EXPECT_TRUE((*s)->UpdateJob(j).IsNotFound());
  EXPECT_TRUE((*s)->GetJob(999).status().IsNotFound());
}

// The journal cannot be rewritten.
TEST_F(StateStoreTest, JournalIsAppendOnly) {
  ASSERT_TRUE(StateStore::Open(path_).ok());
  {
    auto s = StateStore::Open(path_);
    ASSERT_TRUE((*s)->AppendEvent(1, 0, "loan", "n1").ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  EXPECT_NE(sqlite3_exec(db, "UPDATE events SET kind='x';", nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_NE(sqlite3_exec(db, "DELETE FROM events;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
}

// A process SIGKILLed in the middle of writing loses nothing it committed
// and nothing half-written appears.
TEST_F(StateStoreTest, SurvivesSigkillMidWrite) {
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(pipefd[0]);
    auto s = StateStore::Open(path_);
    if (!s.ok()) ::_exit(1);
    for (int i = 0;; ++i) {
      Status st = (*s)->Batch([&]() -> Status {
        auto r = (*s)->InsertJob(Job("job" + std::to_string(i), "tok" + std::to_string(i)));
        if (!r.ok()) return r.status();
        return (*s)->AppendEvent(i, *r, "submit", "job" + std::to_string(i));
      });
      if (!st.ok()) ::_exit(2);
      // Tell the parent how many are committed.
      if (::write(pipefd[1], &i, sizeof(i)) != sizeof(i)) ::_exit(3);
    }
  }
  ::close(pipefd[1]);
  int committed = -1, v;
  while (committed < 50 && ::read(pipefd[0], &v, sizeof(v)) == sizeof(v)) committed = v;
  ::kill(pid, SIGKILL);
  // Drain what was committed before the kill landed.
  while (::read(pipefd[0], &v, sizeof(v)) == sizeof(v)) committed = v;
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));

  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok()) << s.status();
  auto jobs = (*s)->ListJobs();
  ASSERT_TRUE(jobs.ok());
  auto events = (*s)->Events(0, 0, 100000);
  ASSERT_TRUE(events.ok());
  // Every acknowledged commit is there; at most one more (committed, not yet acknowledged).
  EXPECT_GE(static_cast<int>(jobs->size()), committed + 1);
  EXPECT_LE(static_cast<int>(jobs->size()), committed + 2);
  // Jobs and their submit events were written together: equal counts, no duplicates.
  EXPECT_EQ(jobs->size(), events->size());
  for (size_t i = 0; i < jobs->size(); ++i) EXPECT_EQ((*jobs)[i].name, "job" + std::to_string(i));
  // And the store keeps working.
  EXPECT_TRUE((*s)->InsertJob(Job("after")).ok());
}

// A file that is not an Aryl store is refused with a clear error.
TEST_F(StateStoreTest, RefusesForeignFiles) {
  {
    std::ofstream out(path_);
    out << "this is not a database, just some text that is long enough to be a header........";
  }
  auto s = StateStore::Open(path_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kCorruption) << s.status();
  fs::remove(path_);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE other(x);", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  s = StateStore::Open(path_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not an Aryl state file"), std::string::npos) << s.status();
}

// A file from a newer schema is refused, not silently misread.
TEST_F(StateStoreTest, RefusesNewerSchema) {
  {
    auto s = StateStore::Open(path_);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->SetMeta("schema_version", "99").ok());
  }
  auto s = StateStore::Open(path_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("99"), std::string::npos);
}

// Journal rows name their nodes and carry JSON facts; Events filters by job,
// node, kind and time, reads newest first, and pages by seq.
TEST_F(StateStoreTest, EventFiltersNodesAndData) {
  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->AppendEvent(100, 0, "register", "a").ok());  // the old call: no nodes, data {}
  ASSERT_TRUE((*s)->AppendEvent({0, 101, 7, "start", "generation 1 on a:1,b:1", {"a", "b"}, R"({"generation":1})"}).ok());
  ASSERT_TRUE((*s)->AppendEvent({0, 102, 7, "worker_exit", "worker 0 on b", {"b"}, R"({"worker":0})"}).ok());
  ASSERT_TRUE((*s)->AppendEvent({0, 103, 8, "start", "generation 1 on a:1", {"a"}, "{}"}).ok());
  auto all = (*s)->Events(EventFilter{});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].data, "{}");
  EXPECT_TRUE((*all)[0].nodes.empty());
  EXPECT_EQ((*all)[1].nodes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ((*all)[1].data, R"({"generation":1})");
  auto count = [&](EventFilter f) {
    auto r = (*s)->Events(f);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->size() : 0u;
  };
  EXPECT_EQ(count({.job = 7}), 2u);
  EXPECT_EQ(count({.node = "b"}), 2u);
  EXPECT_EQ(count({.node = "a", .kind = "start"}), 2u);
  EXPECT_EQ(count({.job = 8, .node = "b"}), 0u);
  EXPECT_EQ(count({.since = 102}), 2u);
  EXPECT_EQ(count({.after = (*all)[1].seq, .limit = 1}), 1u);
  auto newest = (*s)->Events(EventFilter{.kind = "start", .limit = 1, .newest_first = true});
  ASSERT_TRUE(newest.ok() && newest->size() == 1u);
  EXPECT_EQ(newest->front().job, 8u);
  EXPECT_EQ(newest->front().nodes, std::vector<std::string>{"a"});
}

// A schema-1 file (no event nodes, no data) is migrated in place: its rows
// read with data {} and new rows carry both.
TEST_F(StateStoreTest, MigratesSchema1Journal) {
  {
    auto s = StateStore::Open(path_);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->AppendEvent(1, 0, "loan", "n1").ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  for (const char* sql : {"DROP TABLE event_nodes;", "DROP INDEX events_kind;", "DROP INDEX events_time;",
                          "ALTER TABLE events DROP COLUMN data;", "UPDATE meta SET value = '1' WHERE key = 'schema_version';"})
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db);
  sqlite3_close(db);
  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->schema_version(), StateStore::kSchemaVersion);
  ASSERT_TRUE((*s)->AppendEvent({0, 2, 0, "reclaim", "n1", {"n1"}, R"({"count":1})"}).ok());
  auto rows = (*s)->Events(EventFilter{.node = "n1"});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(rows->front().kind, "reclaim");
  auto old = (*s)->Events(EventFilter{.kind = "loan"});
  ASSERT_TRUE(old.ok() && old->size() == 1u);
  EXPECT_EQ(old->front().data, "{}");
}

// A snapshot taken at a journal row replaces that row and the ones before it,
// never rows appended after it (the daemon encodes snapshots off the serving
// thread while rows keep coming).
TEST_F(StateStoreTest, SnapshotReplacesOnlyTheRowsItCovers) {
  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE((*s)->AppendCoreEvent(i, "row" + std::to_string(i)).ok());
  auto upto = (*s)->LastCoreEventSeq();
  ASSERT_TRUE(upto.ok()) << upto.status();
  ASSERT_TRUE((*s)->AppendCoreEvent(4, "row4").ok());
  ASSERT_TRUE((*s)->SaveCoreSnapshot("image-at-3", *upto).ok());
  auto rows = (*s)->CoreEvents();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].second, "row4");
  auto snap = (*s)->CoreSnapshot();
  ASSERT_TRUE(snap.ok() && snap->has_value());
  EXPECT_EQ(**snap, "image-at-3");
  // Without a bound every row goes, as before.
  ASSERT_TRUE((*s)->SaveCoreSnapshot("image-at-4").ok());
  rows = (*s)->CoreEvents();
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(rows->empty());
}

// Counts the rows of core_snapshot_pieces in the file at `path`, all of them
// or those of one snapshot.
int Pieces(const std::string& path, std::int64_t snap = 0) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return -1;
  std::string sql = "SELECT count(*) FROM core_snapshot_pieces";
  if (snap) sql += " WHERE snap = " + std::to_string(snap);
  sqlite3_stmt* q = nullptr;
  int n = -1;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &q, nullptr) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
    n = sqlite3_column_int(q, 0);
  sqlite3_finalize(q);
  sqlite3_close(db);
  return n;
}

// A snapshot written in many pieces, with journal rows appended between them:
// until its commit the previous snapshot and every row are what a reader
// sees; the commit puts its pieces, joined, in force and deletes only the
// rows it covers.
TEST_F(StateStoreTest, SnapshotInPiecesWithRowsBetween) {
  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->SaveCoreSnapshot("old").ok());
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE((*s)->AppendCoreEvent(i, "row" + std::to_string(i)).ok());
  auto upto = (*s)->LastCoreEventSeq();
  ASSERT_TRUE(upto.ok());
  auto id = (*s)->BeginCoreSnapshot(*upto);
  ASSERT_TRUE(id.ok()) << id.status();
  std::string whole;
  for (int k = 0; k < 50; ++k) {
    std::string piece = "piece" + std::to_string(k) + std::string(k * 100, 'x') + '\0' + "|";
    whole += piece;
    ASSERT_TRUE((*s)->AppendCoreSnapshot(*id, piece).ok());
    ASSERT_TRUE((*s)->AppendCoreEvent(10 + k, "between" + std::to_string(k)).ok());
    EXPECT_EQ(**(*s)->CoreSnapshot(), "old");
  }
  EXPECT_EQ((*s)->CoreEvents()->size(), 53u);
  ASSERT_TRUE((*s)->CommitCoreSnapshot(*id).ok());
  auto snap = (*s)->CoreSnapshot();
  ASSERT_TRUE(snap.ok() && snap->has_value()) << snap.status();
  EXPECT_EQ(**snap, whole);
  auto rows = (*s)->CoreEvents();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 50u);
  EXPECT_EQ(rows->front().second, "between0");
  // The commit only switched: the old piece and rows 1..3 go with the
  // compaction, a few a transaction.
  EXPECT_EQ(Pieces(path_), 51);
  int calls = 0;
  for (bool done = false; !done; ++calls) {
    auto r = (*s)->CompactCoreJournal(1, 1);
    ASSERT_TRUE(r.ok()) << r.status();
    done = *r;
  }
  EXPECT_GE(calls, 4);
  EXPECT_EQ((*s)->CoreEvents()->size(), 50u);
  s->reset();
  EXPECT_EQ(Pieces(path_), 50);  // the old snapshot's piece is gone
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT count(*) FROM core_events", -1, &q, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(q, 0), 50);
  sqlite3_finalize(q);
  sqlite3_close(db);
  auto t = StateStore::Open(path_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(**(*t)->CoreSnapshot(), whole);
}

// The store closes (a crash, a restart) while a snapshot is half written: the
// reopened store reads the previous snapshot and every row after it, and has
// dropped the pieces of the one that was not committed.
TEST_F(StateStoreTest, RestartMidSnapshotKeepsThePreviousOne) {
  {
    auto s = StateStore::Open(path_);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE((*s)->AppendCoreEvent(1, "row1").ok());
    ASSERT_TRUE((*s)->SaveCoreSnapshot(std::string(600 * 1024, 'A')).ok());  // three pieces
    ASSERT_TRUE((*s)->AppendCoreEvent(2, "row2").ok());
    auto id = (*s)->BeginCoreSnapshot(*(*s)->LastCoreEventSeq());
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE((*s)->AppendCoreSnapshot(*id, "half of").ok());
    ASSERT_TRUE((*s)->AppendCoreSnapshot(*id, " a snapshot").ok());
    ASSERT_TRUE((*s)->AppendCoreEvent(3, "row3").ok());
  }
  EXPECT_EQ(Pieces(path_), 5);
  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Pieces(path_), 3);
  EXPECT_EQ(**(*s)->CoreSnapshot(), std::string(600 * 1024, 'A'));
  auto rows = (*s)->CoreEvents();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].second, "row2");
  EXPECT_EQ((*rows)[1].second, "row3");
  // The next snapshot goes on from there.
  ASSERT_TRUE((*s)->SaveCoreSnapshot("next", 4).ok());
  EXPECT_EQ(**(*s)->CoreSnapshot(), "next");
  EXPECT_TRUE((*s)->CoreEvents()->empty());
}

// A newer snapshot begun while one is being written cancels it: the older
// one's pieces go, its appends and commit are refused, and only the newer one
// comes in force. An aborted one leaves the snapshot in force as it was.
TEST_F(StateStoreTest, NewerSnapshotCancelsTheOneInFlight) {
  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->AppendCoreEvent(1, "row1").ok());
  auto older = (*s)->BeginCoreSnapshot(1);
  ASSERT_TRUE(older.ok());
  ASSERT_TRUE((*s)->AppendCoreSnapshot(*older, "older-").ok());
  ASSERT_TRUE((*s)->AppendCoreEvent(2, "row2").ok());
  auto newer = (*s)->BeginCoreSnapshot(2);
  ASSERT_TRUE(newer.ok());
  EXPECT_NE(*newer, *older);
  EXPECT_EQ(Pieces(path_, *older), 0);
  EXPECT_TRUE((*s)->AppendCoreSnapshot(*older, "more").code() == Status::Code::kCancelled);
  EXPECT_TRUE((*s)->CommitCoreSnapshot(*older).code() == Status::Code::kCancelled);
  EXPECT_FALSE((*s)->CoreSnapshot()->has_value());
  EXPECT_EQ((*s)->CoreEvents()->size(), 2u);
  ASSERT_TRUE((*s)->AppendCoreSnapshot(*newer, "newer").ok());
  ASSERT_TRUE((*s)->CommitCoreSnapshot(*newer).ok());
  EXPECT_EQ(**(*s)->CoreSnapshot(), "newer");
  EXPECT_TRUE((*s)->CoreEvents()->empty());
  // Aborted: its pieces go, the one in force stays.
  ASSERT_TRUE((*s)->AppendCoreEvent(3, "row3").ok());
  auto aborted = (*s)->BeginCoreSnapshot(3);
  ASSERT_TRUE(aborted.ok());
  ASSERT_TRUE((*s)->AppendCoreSnapshot(*aborted, "never").ok());
  ASSERT_TRUE((*s)->AbortCoreSnapshot(*aborted).ok());
  EXPECT_EQ(Pieces(path_, *aborted), 0);
  EXPECT_TRUE((*s)->CommitCoreSnapshot(*aborted).code() == Status::Code::kCancelled);
  EXPECT_EQ(**(*s)->CoreSnapshot(), "newer");
  EXPECT_EQ((*s)->CoreEvents()->size(), 1u);
}

// A schema-2 file holds its snapshot whole in meta: the migration makes it
// snapshot 1, read back as it was.
TEST_F(StateStoreTest, MigratesASchema2Snapshot) {
  {
    auto s = StateStore::Open(path_);
    ASSERT_TRUE(s.ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  for (const char* sql : {"DROP TABLE core_snapshot_pieces;", "INSERT INTO meta VALUES('core_snapshot', 'v2-image');",
                          "UPDATE meta SET value = '2' WHERE key = 'schema_version';"})
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db);
  sqlite3_close(db);
  auto s = StateStore::Open(path_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->schema_version(), StateStore::kSchemaVersion);
  auto snap = (*s)->CoreSnapshot();
  ASSERT_TRUE(snap.ok() && snap->has_value()) << snap.status();
  EXPECT_EQ(**snap, "v2-image");
  EXPECT_FALSE((*(*s)->GetMeta("core_snapshot")).has_value());
}

}  // namespace
}  // namespace aryl::daemon
