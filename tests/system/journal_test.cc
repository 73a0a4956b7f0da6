// The core journal stays bounded: every --journal-snapshot-rows rows the
// scheduler replaces it with a snapshot of the core, and a restart restores the
// snapshot and replays only the rows after it (docs/architecture.md).
#include <sqlite3.h>

#include <cstdio>

#include "live_cluster.h"

namespace aryl::livetest {
namespace {

// COUNT(*)-style query on the state file, read-only while the scheduler runs.
long long Query(const fs::path& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  long long v = -1;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

// The rows a restart replays: those after the snapshot in force, whose head
// is meta core_snapshot_head "<id> <bytes> <upto>" (state_store.h, step 3);
// rows up to `upto` may still wait for their compaction (step 4).
long long TailRows(const fs::path& db_path) {
  long long upto = 0;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'core_snapshot_head'", -1, &st, nullptr) ==
            SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      long long id = 0, bytes = 0;
      const char* v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      if (!v || std::sscanf(v, "%lld %lld %lld", &id, &bytes, &upto) != 3) upto = 0;
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return Query(db_path, "SELECT count(*) FROM core_events WHERE seq > " + std::to_string(upto));
}

class JournalTest : public LiveCluster {};

// 120 short jobs make hundreds of journal rows; with a snapshot every 30 rows
// the journal never holds more than about twice 30. Then, with one job running and
// one queued, SIGKILL and restart the scheduler: it restores the snapshot and
// the rows after it, the running job keeps its workers and generation, the
// queued one stays queued and starts once the first one's slots are free.
TEST_F(JournalTest, BoundedAndRestartRebuildsFromSnapshotAndTail) {
  const int kEvery = 30;
  StartScheduler({"--journal-snapshot-rows", std::to_string(kEvery)});
  StartAgent("a", 2);
  StartAgent("b", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 2)) << Logs();
  fs::path db = dir_ / "state.db";
  std::vector<p::JobId> quick;
  long long max_rows = 0;
  for (int i = 0; i < 120; ++i) {
    auto id = i % 2 ? Submit(*c, {"true"}, 1) : Submit(*c, {"true"}, 0, 1, 2);
    ASSERT_TRUE(id.ok()) << id.status();
    quick.push_back(*id);
    max_rows = std::max(max_rows, Query(db, "SELECT count(*) FROM core_events"));
  }
  for (auto id : quick) ASSERT_TRUE(WaitState(*c, id, p::JobState::kCompleted, 60)) << "job " << id << Logs();
  max_rows = std::max(max_rows, Query(db, "SELECT count(*) FROM core_events"));
  long long history = Query(db, "SELECT seq FROM sqlite_sequence WHERE name = 'core_events'");
  std::printf("core journal: %lld rows appended in all, at most %lld held at once\n", history, max_rows);
  EXPECT_GE(history, 2 * 120) << "every job makes at least a submit and a finish row";
  // A snapshot is taken after the durable step that brought the journal to
  // kEvery rows and lands (its rows deleted) at the first tick after a helper
  // thread encoded it (core_journal.cc, MaybeSnapshot): the rows appended
  // meanwhile, a tick's worth and more on a loaded machine (46 seen under
  // ctest -j2 beside a build), stay until the next one. Without snapshots the
  // journal would hold all of the history (hundreds of rows).
  EXPECT_LE(max_rows, 2 * kEvery + 10) << Logs();
  EXPECT_EQ(Query(db, "SELECT count(*) FROM meta WHERE key = 'core_snapshot_head'"), 1);

  auto running = Submit(*c, {"sleep", "60"}, 4);
  ASSERT_TRUE(running.ok());
  auto queued = Submit(*c, {"sleep", "1"}, 2);
  ASSERT_TRUE(queued.ok());
  ASSERT_TRUE(WaitState(*c, *running, p::JobState::kRunning, 10)) << Logs();
  auto before = Status(*c, *running);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(Status(*c, *queued)->row.state, p::JobState::kQueued);
  // Rows after the last snapshot for the restart to replay: when a snapshot
  // came just now, one more (queued) submission adds some, and no snapshot is
  // due again so soon.
  long long tail = TailRows(db);
  if (tail == 0) {
    ASSERT_TRUE(Submit(*c, {"sleep", "1"}, 4).ok());
    ASSERT_TRUE(WaitFor([&] { return TailRows(db) >= 2; }, 5));
  }
  std::this_thread::sleep_for(milliseconds(300));
  tail = TailRows(db);
  ASSERT_GT(tail, 0) << "the restart replays rows after the snapshot";
  Kill(scheduler_pid_);
  fs::rename(dir_ / "scheduler.log", dir_ / "scheduler-1.log");
  StartScheduler({"--journal-snapshot-rows", std::to_string(kEvery)});
  auto c2 = Client();
  ASSERT_TRUE(WaitAgents(*c2, 2)) << Logs();
  EXPECT_NE(ReadFile(dir_ / "scheduler.log").find("from a snapshot and " + std::to_string(tail) + " journaled rows"),
            std::string::npos)
      << Logs();
  auto after = Status(*c2, *running);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->row.state, p::JobState::kRunning);
  EXPECT_EQ(after->row.generation, before->row.generation) << "no restart or resize of the running job";
  EXPECT_EQ(after->row.workers, 4);
  EXPECT_EQ(Status(*c2, *queued)->row.state, p::JobState::kQueued);
  // The restored core accounts the running job's slots: the queued job starts
  // only when they are free.
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(Status(*c2, *queued)->row.state, p::JobState::kQueued);
  p::CancelJob cancel;
  cancel.job = *running;
  ASSERT_TRUE(c2->Call<p::Ok>(cancel, milliseconds(3000)).ok());
  EXPECT_TRUE(WaitState(*c2, *queued, p::JobState::kCompleted, 20)) << Logs();
}

}  // namespace
}  // namespace aryl::livetest
