// The checkpoint fence (checkpoint.h, "Fencing"): stale generations refused,
// other jobs and unfenced writers not, a corrupt fence named, and the fence
// on a full disk (room from older checkpoints, the reserve, the fence raised
// before a checkpoint is written).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "aryl/checkpoint.h"
#include "checkpoint_test_util.h"

namespace aryl {
namespace {

using namespace ckpt_test;  // NOLINT

// A stale copy (an older generation) on a full disk removes nothing: it is
// refused before it writes a byte (the fence is checked before the file is
// written, not only at the commit), the live copy's checkpoints all stay,
// and the stale copy learns it is fenced.
TEST(CheckpointFence, StaleCopyOnAFullDiskRemovesNothing) {
  std::string dir = TempDir("fence_full");
  BudgetFs fs(dir, 3 * (kPayload + 40) + 4096 + 200);  // three checkpoints and the fence's reserve
  CheckpointManager stale(dir, 3, &fs), live(dir, 3, &fs);
  stale.set_fence("7", 2001);
  live.set_fence("7", 3000);
  ASSERT_TRUE(live.RaiseFence().ok());
  for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(live.Write(step, 2, PayloadOf(step)).ok());
  auto r = stale.Write(4, 2, PayloadOf(4));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(CheckpointManager::IsFenced(r.status())) << r.status();
  EXPECT_EQ(fs.no_space, 0);  // it wrote nothing
  EXPECT_EQ(FilesOf(dir).checkpoints.size(), 3u);
  EXPECT_TRUE(FilesOf(dir).temps.empty());
  auto latest = live.LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->info.step, 3);
}

// A new generation starting on a disk full to the byte still raises the fence
// (room from the older checkpoints) and restores the newest.
TEST(CheckpointFence, RaisingTheFenceOnAFullDiskMakesRoom) {
  std::string dir = TempDir("fence_raise_full");
  {
    CheckpointManager old_gen(dir, 3);
    old_gen.set_fence("7", 2000);
    for (int64_t step = 1; step <= 3; ++step)
      ASSERT_TRUE(old_gen.Write(step, 2, PayloadOf(step)).ok());
  }
  uint64_t used = 0;
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) used += e.file_size();
  BudgetFs fs(dir, used);  // not a byte free
  CheckpointManager next(dir, 3, &fs);
  next.set_fence("7", 3000);
  ASSERT_TRUE(next.RaiseFence().ok());
  EXPECT_EQ(fs.no_space, 1);
  EXPECT_EQ(FilesOf(dir).checkpoints.size(), 2u);  // step 1 made room
  auto fence = next.Fence();
  ASSERT_TRUE(fence.ok()) << fence.status();
  EXPECT_EQ(fence->generation, 3000);
  auto latest = next.LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->info.step, 3);
}

// A new generation starting on a disk full to the byte with only the newest
// good checkpoint on it (nothing older to remove) raises the fence from the
// reserve the earlier raise left; the reserve is written again after each
// raise, so the generation after it starts too. Without the reserve the raise
// fails for room (and the job could not start again until the disk empties).
TEST(CheckpointFence, RaisingTheFenceWithNothingOlderUsesTheReserve) {
  std::string dir = TempDir("fence_reserve");
  {
    CheckpointManager first(dir, 3);
    first.set_fence("7", 2000);
    ASSERT_TRUE(first.RaiseFence().ok());  // the start of generation 2000
    ASSERT_TRUE(first.Write(1, 2, PayloadOf(1)).ok());
  }
  ASSERT_TRUE(std::filesystem::exists(dir + "/FENCE.reserve"));
  uint64_t used = 0;
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) used += e.file_size();
  BudgetFs fs(dir, used);  // not a byte free
  for (int64_t gen : {3000, 4000}) {
    CheckpointManager next(dir, 3, &fs);
    next.set_fence("7", gen);
    Status raised = next.RaiseFence();
    ASSERT_TRUE(raised.ok()) << "generation " << gen << ": " << raised;
    auto fence = next.Fence();
    ASSERT_TRUE(fence.ok()) << fence.status();
    EXPECT_EQ(fence->generation, gen);
    EXPECT_TRUE(std::filesystem::exists(dir + "/FENCE.reserve")) << "generation " << gen;
    auto latest = next.LoadLatest();
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(latest->info.step, 1);
  }
  EXPECT_EQ(FilesOf(dir).checkpoints.size(), 1u);
  EXPECT_TRUE(FilesOf(dir).temps.empty());
  std::filesystem::remove(dir + "/FENCE.reserve");
  used = 0;
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) used += e.file_size();
  BudgetFs full(dir, used);  // still not a byte free
  CheckpointManager without(dir, 3, &full);
  without.set_fence("7", 5000);
  Status s = without.RaiseFence();
  EXPECT_TRUE(CheckpointFs::IsNoSpace(s)) << s;
  EXPECT_TRUE(FilesOf(dir).temps.empty());
}

// The first checkpoint of a new generation on a disk with room for exactly
// that checkpoint: the fence (a few bytes) is raised before the file is
// written, so it does not take the checkpoint's last bytes.
TEST(CheckpointFence, ANewGenerationsFirstWriteFitsExactly) {
  std::string dir = TempDir("fence_exact");
  {
    CheckpointManager old_gen(dir, 1);
    old_gen.set_fence("7", 2000);
    ASSERT_TRUE(old_gen.Write(1, 2, PayloadOf(1)).ok());
  }
  uint64_t used = 0;
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) used += e.file_size();
  // Room for one more file exactly, and for the fence's new text beside the old.
  BudgetFs fs(dir, used + kPayload + 40 + 16);
  CheckpointManager next(dir, 1, &fs);
  next.set_fence("7", 3000);
  auto w = next.Write(2, 2, PayloadOf(2));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(fs.no_space, 0);
  auto fence = next.Fence();
  ASSERT_TRUE(fence.ok()) << fence.status();
  EXPECT_EQ(fence->generation, 3000);
}

// A copy of the job of an older generation (cut off while the job started
// again elsewhere) cannot commit once the newer one raised the fence: the good
// checkpoint stays, no temp file is left, and the refusal says "fenced".
TEST(CheckpointFence, StaleGenerationCannotCommit) {
  std::string dir = TempDir("fence");
  CheckpointManager stale(dir, 3), current(dir, 3);
  stale.set_fence("7", 2001);
  current.set_fence("7", 3000);
  ASSERT_TRUE(stale.Write(100, 2, "stale-100").ok());
  ASSERT_TRUE(current.RaiseFence().ok());
  auto r = stale.Write(150, 2, "stale-150");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(CheckpointManager::IsFenced(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("generation 2001 is stale: generation 3000"), std::string::npos) << r.status();
  EXPECT_TRUE(CheckpointManager::IsFenced(stale.CheckFence()));
  EXPECT_TRUE(CheckpointManager::IsFenced(stale.RaiseFence()));
  EXPECT_TRUE(current.CheckFence().ok());
  for (auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  auto latest = current.LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->payload, "stale-100");
  ASSERT_TRUE(current.Write(120, 2, "current-120").ok());
  auto fence = current.Fence();
  ASSERT_TRUE(fence.ok()) << fence.status();
  EXPECT_EQ(fence->job, "7");
  EXPECT_EQ(fence->generation, 3000);
}

// A new job resuming from another job's directory replaces that job's fence;
// a manager without a generation is not fenced at all (standalone runs).
TEST(CheckpointFence, OtherJobsAndUnfencedWritersAreNotRefused) {
  std::string dir = TempDir("fence_other");
  CheckpointManager old_job(dir), new_job(dir), unfenced(dir);
  old_job.set_fence("7", 9000);
  new_job.set_fence("8", 1000);
  ASSERT_TRUE(old_job.RaiseFence().ok());
  ASSERT_TRUE(new_job.RaiseFence().ok());
  EXPECT_TRUE(new_job.Write(1, 1, "a").ok());
  EXPECT_TRUE(unfenced.Write(2, 1, "b").ok());
  EXPECT_TRUE(unfenced.CheckFence().ok());
  auto fence = new_job.Fence();
  ASSERT_TRUE(fence.ok());
  EXPECT_EQ(fence->job, "8");
}

// A damaged fence file is a clear error naming the file, never a silent pass.
TEST(CheckpointFence, CorruptFenceNamesTheFile) {
  std::string dir = TempDir("fence_corrupt");
  CheckpointManager m(dir);
  m.set_fence("7", 5);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/FENCE") << "seven\n";
  Status s = m.RaiseFence();
  EXPECT_TRUE(s.IsCorruption()) << s;
  EXPECT_NE(s.message().find(dir + "/FENCE"), std::string::npos) << s;
  EXPECT_NE(s.message().find("seven"), std::string::npos) << s;
}

}  // namespace
}  // namespace aryl
