// What the driven daemon tests share (driven_daemon_test.cc,
// driven_faults_test.cc): a driven cluster whose harness failures fail the
// test, job specs, reads of a job, and the set-ups several tests start from.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "aryl/protocol/generation.h"
#include "driven_cluster.h"
#include "full_disk_store.h"

namespace aryl::daemon::testing {

using p::JobState;

// A driven cluster whose harness failures fail the test.
struct TestCluster : DrivenCluster {
  explicit TestCluster(DaemonOptions o = Defaults(), bool restartable = false) : DrivenCluster(std::move(o), restartable) {
    on_error = [](const std::string& what) { ADD_FAILURE() << what; };
  }
  TestCluster(DaemonOptions o, std::unique_ptr<StateStore> store) : DrivenCluster(std::move(o), std::move(store)) {
    on_error = [](const std::string& what) { ADD_FAILURE() << what; };
  }
};

inline p::SubmitJob Fixed(int workers) {
  p::SubmitJob s;
  s.workers = workers;
  s.argv = {"train.py"};
  return s;
}

inline p::SubmitJob Elastic(int min, int max) {
  p::SubmitJob s;
  s.min_workers = min;
  s.max_workers = max;
  s.argv = {"train.py"};
  return s;
}

inline JobState StateOf(DrivenCluster& c, p::JobId id) {
  auto row = c.Job(id);
  EXPECT_TRUE(row.ok()) << row.status().ToString();
  return row.ok() ? row->state : JobState::kQueued;
}

inline bool HasEvent(DrivenCluster& c, p::JobId id, const std::string& kind) {
  auto ev = c.Events(id);
  return std::any_of(ev.begin(), ev.end(), [&](const p::EventRow& e) { return e.kind == kind; });
}

inline std::string Kinds(DrivenCluster& c, p::JobId id) {
  std::string out;
  for (const auto& e : c.Events(id)) out += e.kind + ": " + e.detail + "\n";
  return out;
}

// A state store in memory whose disk can be made full (*store->full).
inline std::unique_ptr<StateStore> FullDisk(FullDiskStore** store) {
  auto real = StateStore::Open(":memory:");
  EXPECT_TRUE(real.ok()) << real.status().ToString();
  auto disk = std::make_unique<FullDiskStore>(std::move(*real));
  *store = disk.get();
  return disk;
}

// A trained job of 4 workers on t1 and t2 (2 slots each), started while t2
// hears nothing: t2's StartWorkers is lost. A second later; t2 still deaf.
inline Result<p::JobId> StartWhileT2IsDeaf(DrivenCluster& c) {
  c.workers_link_runtime = true;
  c.AddAgent("t1", p::Pool::kTraining, 2);
  c.AddAgent("t2", p::Pool::kTraining, 2);
  c.agent("t2").deaf = true;
  auto job = c.Submit(Fixed(4));
  if (!job.ok()) return job;
  c.Train(*job);
  c.Run(1);
  return job;
}

// An elastic 1..4 job trained on t1 (2 slots) that grows onto the loaned
// inference server i1 (2 slots); its id.
inline p::JobId GrowOntoLoanedServer(DrivenCluster& c) {
  c.workers_link_runtime = true;
  c.AddAgent("t1", p::Pool::kTraining, 2);
  c.AddAgent("i1", p::Pool::kInference, 2);
  auto job = c.Submit(Elastic(1, 4));
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  if (!job.ok()) return 0;
  c.Train(*job);
  EXPECT_TRUE(c.RunUntil([&] { return c.Formed(*job) > 0 && c.Step(*job) > 0; }, 10)) << Kinds(c, *job);
  EXPECT_TRUE(c.Call(p::PoolOffer{{"i1"}}).ok());
  EXPECT_TRUE(c.RunUntil([&] { return !c.WorkersOf(*job)["i1"].empty(); }, 30)) << Kinds(c, *job);
  return *job;
}

// Once `job` (GrowOntoLoanedServer) formed on i1, i1 goes deaf and is
// reclaimed with `deadline` seconds; when it was asked.
inline double ReclaimWhileI1IsDeaf(DrivenCluster& c, p::JobId job, double deadline) {
  EXPECT_TRUE(c.RunUntil([&] { return c.WorkersOf(job)["i1"].size() == 2 && c.Formed(job) > 1; }, 30))
      << Kinds(c, job);
  c.agent("i1").deaf = true;
  p::PoolReclaim r;
  r.servers = {"i1"};
  r.deadline_seconds = deadline;
  const double asked = c.now();
  EXPECT_TRUE(c.Call(r).ok());
  return asked;
}

}  // namespace aryl::daemon::testing
