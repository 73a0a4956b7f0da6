#include "job_table.h"

#include <gtest/gtest.h>

#include <string>

namespace aryl::daemon {
namespace {

// A job `id` of `owner` (nullopt: "local"), no workers.
LiveJob MakeJob(s::JobId id, std::optional<std::string> owner = std::nullopt) {
  LiveJob j;
  j.rec.id = id;
  j.spec.owner = std::move(owner);
  return j;
}

LiveWorker MakeWorker(p::WorkerId id, const std::string& node, int slot = 0) {
  LiveWorker w;
  w.id = id;
  w.agent = node;
  w.slot = slot;
  return w;
}

// The invariant of job_table.h: the index holds exactly the live jobs' workers.
void ExpectIndexAgrees(const JobTable& t, const NodeRegistry& r) {
  NodeRegistry::WorkerIndex want;
  for (const auto& [jid, j] : t.jobs())
    for (const auto& [wid, w] : j.workers) want[w.agent].insert({jid, wid});
  EXPECT_EQ(r.workers_on(), want);
}

struct Table {
  NodeRegistry registry;
  JobTable table{registry};
};

// Workers added, erased and cleared keep the nodes' index in step; an empty
// node leaves the index.
TEST(JobTable, WorkerIndexFollowsAddEraseClear) {
  Table x;
  LiveJob& a = x.table.Add(MakeJob(1));
  LiveJob& b = x.table.Add(MakeJob(2));
  x.table.AddWorker(a, MakeWorker(0, "n1", 0));
  x.table.AddWorker(a, MakeWorker(1, "n2", 0));
  x.table.AddWorker(b, MakeWorker(0, "n1", 1));
  ExpectIndexAgrees(x.table, x.registry);
  EXPECT_EQ(x.registry.WorkersOn("n1").size(), 2u);

  x.table.EraseWorker(a, 1);
  x.table.EraseWorker(a, 7);  // not there: nothing happens
  ExpectIndexAgrees(x.table, x.registry);
  EXPECT_EQ(x.registry.workers_on().count("n2"), 0u);
  EXPECT_TRUE(x.registry.WorkersOn("n2").empty());

  x.table.ClearWorkers(a);
  EXPECT_TRUE(a.workers.empty());
  ExpectIndexAgrees(x.table, x.registry);
  EXPECT_EQ(x.registry.WorkersOn("n1"), (std::set<std::pair<p::JobId, p::WorkerId>>{{2, 0}}));
}

// A worker id added again on another node moves its index entry.
TEST(JobTable, ReAddedWorkerMovesInTheIndex) {
  Table x;
  LiveJob& a = x.table.Add(MakeJob(1));
  x.table.AddWorker(a, MakeWorker(0, "n1"));
  x.table.AddWorker(a, MakeWorker(0, "n2"));
  ExpectIndexAgrees(x.table, x.registry);
  EXPECT_TRUE(x.registry.WorkersOn("n1").empty());
}

// An erased job takes its workers and its owner's entry with it.
TEST(JobTable, EraseDropsWorkersAndOwner) {
  Table x;
  LiveJob& a = x.table.Add(MakeJob(1, "ann"));
  x.table.Add(MakeJob(2, "ann"));
  x.table.Add(MakeJob(3));
  x.table.AddWorker(a, MakeWorker(0, "n1"));
  EXPECT_EQ(x.table.OwnedBy("ann"), (std::set<s::JobId>{1, 2}));
  EXPECT_EQ(x.table.OwnedBy("local"), (std::set<s::JobId>{3}));
  EXPECT_TRUE(x.table.OwnedBy("bob").empty());

  x.table.Erase(1);
  EXPECT_EQ(x.table.Find(1), nullptr);
  EXPECT_TRUE(x.registry.workers_on().empty());
  EXPECT_EQ(x.table.OwnedBy("ann"), (std::set<s::JobId>{2}));
  x.table.Erase(1);  // again: nothing happens

  // An ended job no longer counts for its owner while it is still in the table.
  x.table.ForgetOwner(*x.table.Find(2));
  EXPECT_TRUE(x.table.OwnedBy("ann").empty());
  EXPECT_NE(x.table.Find(2), nullptr);
}

// A reload rebuilds the owners and the index from the jobs' own workers.
TEST(JobTable, ReplaceRebuildsOwnersAndIndex) {
  Table x;
  LiveJob& old = x.table.Add(MakeJob(9, "old"));
  x.table.AddWorker(old, MakeWorker(0, "gone"));
  std::map<s::JobId, LiveJob> loaded;
  loaded[1] = MakeJob(1, "ann");
  loaded[1].workers[0] = MakeWorker(0, "n1");
  loaded[1].workers[1] = MakeWorker(1, "n2");
  loaded[4] = MakeJob(4);
  loaded[4].workers[3] = MakeWorker(3, "n1", 1);
  x.table.Replace(std::move(loaded));
  ExpectIndexAgrees(x.table, x.registry);
  EXPECT_TRUE(x.registry.WorkersOn("gone").empty());
  EXPECT_TRUE(x.table.OwnedBy("old").empty());
  EXPECT_EQ(x.table.OwnedBy("ann"), (std::set<s::JobId>{1}));
  EXPECT_EQ(x.table.OwnedBy("local"), (std::set<s::JobId>{4}));
}

// Checkpoints: the newest report is kept; one journal row per interval.
TEST(JobTable, CheckpointSavedIsDueOncePerInterval) {
  Table x;
  x.table.Add(MakeJob(1));
  EXPECT_EQ(x.table.LastCheckpoint(1), nullptr);
  p::CheckpointRow row;
  row.time = 1000;
  row.step = 100;
  EXPECT_TRUE(x.table.CheckpointSaved(1, row, 30));
  row.time = 1010;
  row.step = 200;
  EXPECT_FALSE(x.table.CheckpointSaved(1, row, 30));
  ASSERT_NE(x.table.LastCheckpoint(1), nullptr);
  EXPECT_EQ(x.table.LastCheckpoint(1)->step, 200);
  row.time = 1030;
  EXPECT_TRUE(x.table.CheckpointSaved(1, row, 30));
  // A late report of an older checkpoint (overtaken on the wire) is ignored;
  // a newer generation's is kept even at a lower step (a fresh group restored).
  p::CheckpointRow late = row;
  late.time = 1100;
  late.step = 150;
  EXPECT_FALSE(x.table.CheckpointSaved(1, late, 30));
  EXPECT_EQ(x.table.LastCheckpoint(1)->step, 200);
  late.generation = 5;
  EXPECT_TRUE(x.table.CheckpointSaved(1, late, 30));
  EXPECT_EQ(x.table.LastCheckpoint(1)->step, 150);
  // An ended job's last checkpoint stays for describe job.
  x.table.Erase(1);
  ASSERT_NE(x.table.LastCheckpoint(1), nullptr);
}

// Failures are all counted; the first is due at once, a recovery brings the rest.
TEST(JobTable, CheckpointFailuresAreCounted) {
  Table x;
  x.table.Add(MakeJob(1));
  EXPECT_EQ(x.table.CheckpointFailures(1), 0);
  EXPECT_FALSE(x.table.CheckpointRecovered(1));
  auto first = x.table.CheckpointFailed(1, 1000, 100, "no space", 30);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->failures, 1);
  EXPECT_FALSE(x.table.CheckpointFailed(1, 1005, 150, "no space", 30));
  EXPECT_FALSE(x.table.CheckpointFailed(1, 1010, 200, "no space", 30));
  EXPECT_EQ(x.table.CheckpointFailures(1), 3);
  auto rest = x.table.CheckpointRecovered(1);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->failures, 2);
  EXPECT_EQ(rest->first_step, 150);
  EXPECT_FALSE(x.table.CheckpointRecovered(1));
}

// Ended jobs' checkpoint entries go once there are more than twice the live
// jobs and 1,000 of them; live jobs' stay.
TEST(JobTable, EndedJobsCheckpointsArePruned) {
  Table x;
  x.table.Add(MakeJob(1));
  p::CheckpointRow row;
  for (s::JobId id = 100; id < 1102; ++id)
    x.table.CheckpointSaved(id, row, 30);  // 1,002 ended jobs' rows
  EXPECT_NE(x.table.LastCheckpoint(100), nullptr);
  x.table.CheckpointSaved(1, row, 30);  // 1,003 > 2 * 1 + 1000
  EXPECT_EQ(x.table.LastCheckpoint(100), nullptr);
  EXPECT_NE(x.table.LastCheckpoint(1), nullptr);
}

}  // namespace
}  // namespace aryl::daemon

namespace aryl::daemon {
namespace {

// A job waits out each lost node's lease on its own; a registration of the
// same agent process releases a wait only when no start there was
// unconfirmed (LeaseFence, live_job.h): such a start may still be on the
// wire. A new agent process releases it either way.
TEST(LeaseFence, AnUnconfirmedStartsWaitOutlastsARegistrationOfTheSameProcess) {
  LeaseFence f;
  f.Wait("t1", 100);
  f.Wait("t2", 120, /*start_unconfirmed=*/true);
  EXPECT_EQ(f.NotBefore(), 120);
  EXPECT_TRUE(f.ReleasedByRegistration("t1", false));
  EXPECT_FALSE(f.ReleasedByRegistration("t2", false));
  EXPECT_TRUE(f.ReleasedByRegistration("t2", true)) << "a new process cannot get what was sent to the old one";
  f.Wait("t2", 110);  // a later loss keeps the longer wait and the mark
  EXPECT_EQ(f.until["t2"], 120);
  EXPECT_FALSE(f.ReleasedByRegistration("t2", false));
  f.Prune(115);  // t1's wait is over
  EXPECT_FALSE(f.WaitsOn("t1"));
  EXPECT_TRUE(f.WaitsOn("t2"));
  f.Prune(121);
  EXPECT_FALSE(f.WaitsOn("t2"));
  EXPECT_TRUE(f.unconfirmed.empty()) << "the mark goes with its wait";
  f.Wait("t3", 200, true);
  EXPECT_TRUE(f.Release("t3"));
  EXPECT_TRUE(f.unconfirmed.empty());
}

}  // namespace
}  // namespace aryl::daemon
