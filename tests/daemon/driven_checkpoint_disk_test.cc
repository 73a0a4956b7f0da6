// A full checkpoint disk and a corrupt checkpoint file, end to end in one
// process: the runtime's own CheckpointManager (runtime_model.h) writes
// through a MemoryCheckpointFs, each failure goes to the real daemon as the
// runtime reports it (a CheckpointReport with an error), and the daemon's
// checkpoint_failed events count them (issue 34: "only 4 of the 100 failures
// became checkpoint_failed events", "no checkpoint is ever written again").
#include <gtest/gtest.h>

#include "driven_test_util.h"

namespace aryl::daemon::testing {
namespace {

constexpr std::uint64_t kFile = ModelCheckpoints{}.bytes + RuntimeModel::kFileHeader;  // one checkpoint file

// The failures the job's checkpoint_failed events stand for.
std::int64_t JournaledFailures(DrivenCluster& c, p::JobId job) {
  std::int64_t n = 0;
  for (const auto& e : c.Events(job))
    if (e.kind == "checkpoint_failed") n += e.data.value("failures", std::int64_t{0});
  return n;
}

struct CheckpointedJob {
  TestCluster c;
  p::JobId job = 0;
  CheckpointTruth* truth = nullptr;
  MemoryCheckpointFs* disk = nullptr;
  explicit CheckpointedJob(int room_for) {
    c.workers_link_runtime = true;
    c.AddAgent("t1", p::Pool::kTraining, 2);
    p::SubmitJob s = Fixed(1);
    s.checkpoint_dir = "/ckpt";
    auto id = c.Submit(s);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    job = id.ok() ? *id : 0;
    c.Train(job, 0, {.every = 5, .seconds = 1});
    truth = c.Checkpoints(job);
    disk = c.CheckpointDisk(job);
    disk->set_capacity(static_cast<std::uint64_t>(room_for) * kFile + 1000);
  }
  void ExpectNoViolation() {
    for (const auto& v : truth->TakeViolations()) ADD_FAILURE() << v.invariant << ": " << v.what;
  }
};

// Other files fill the shared disk for 100 s, leaving room for the newest good
// checkpoint only: every write fails (and is counted), the newest good one
// stays; once they are gone the next write succeeds, and the events add up
// to every failure.
TEST(DrivenCheckpointDisk, EveryFailureIsCountedAndWritesResume) {
  CheckpointedJob x(3);
  ASSERT_TRUE(x.c.RunUntil([&] { return x.truth->good() >= 3; }, 60)) << Kinds(x.c, x.job);
  const std::int64_t kept = x.truth->newest_good();
  x.disk->set_other_bytes(x.disk->capacity() - kFile - 500);
  x.c.Run(100);
  x.ExpectNoViolation();
  const std::int64_t failed = x.truth->failed();
  EXPECT_GE(failed, 10) << Kinds(x.c, x.job);
  EXPECT_EQ(x.truth->newest_good(), kept);
  EXPECT_TRUE(x.disk->Exists("/ckpt/" + std::to_string(x.job) + "/" + CheckpointManager::FileName(kept)));
  const std::int64_t good = x.truth->good();
  x.disk->set_other_bytes(0);
  ASSERT_TRUE(x.c.RunUntil([&] { return x.truth->good() > good; }, 10)) << "checkpointing stopped for good";
  x.c.Run(1);
  EXPECT_EQ(x.truth->failed(), failed);
  EXPECT_EQ(JournaledFailures(x.c, x.job), failed) << Kinds(x.c, x.job);
  x.ExpectNoViolation();
}

// The disk fills up for a while with room for two more files once the older
// checkpoints go: room is made from them, so no write fails.
TEST(DrivenCheckpointDisk, OlderCheckpointsMakeRoom) {
  CheckpointedJob x(4);
  ASSERT_TRUE(x.c.RunUntil([&] { return x.truth->good() >= 3; }, 60));
  x.disk->set_other_bytes(x.disk->capacity() - x.disk->used());
  x.c.Run(60);
  EXPECT_EQ(x.truth->failed(), 0) << Kinds(x.c, x.job);
  EXPECT_GE(x.truth->good(), 10);
  x.ExpectNoViolation();
}

// The newest checkpoint is corrupted and the job restarts: the fresh group
// skips it and restores the one before.
TEST(DrivenCheckpointDisk, RestoreSkipsACorruptFile) {
  CheckpointedJob x(4);
  ASSERT_TRUE(x.c.RunUntil([&] { return x.truth->good() >= 3; }, 60));
  const std::int64_t newest = x.truth->newest_good();
  const std::string dir = "/ckpt/" + std::to_string(x.job) + "/";
  ASSERT_TRUE(x.disk->Corrupt(dir + CheckpointManager::FileName(newest), /*torn=*/false));
  x.truth->Corrupted(newest);
  EXPECT_EQ(x.truth->newest_good(), newest - 5);
  for (const auto& [agent, ws] : x.c.WorkersOf(x.job))
    for (const auto& w : ws) x.c.Kill(agent, w.worker, 9);
  ASSERT_TRUE(x.c.RunUntil([&] { return x.c.FreshStart(x.job) > 0 && x.c.Formed(x.job) >= x.c.FreshStart(x.job); }, 30))
      << Kinds(x.c, x.job);
  EXPECT_EQ(x.c.Step(x.job), newest - 5);  // the restore; no step trained since
  x.ExpectNoViolation();
}

}  // namespace
}  // namespace aryl::daemon::testing
