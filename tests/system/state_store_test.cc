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
  EXPECT_EQ((*s)->schema_version(), 2);
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

}  // namespace
}  // namespace aryl::daemon
