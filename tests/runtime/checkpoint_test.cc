#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "aryl/checkpoint.h"

namespace aryl {
namespace {

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("aryl_ckpt_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// Writes three checkpoints; the newest loads; retention keeps two.
TEST(Checkpoint, WriteLoadAndRetention) {
  CheckpointManager m(TempDir("basic"), 2);
  ASSERT_TRUE(m.Write(10, 2, "ten").ok());
  ASSERT_TRUE(m.Write(20, 4, "twenty").ok());
  ASSERT_TRUE(m.Write(30, 3, "thirty").ok());
  auto listed = m.List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 2u);
  auto latest = m.LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->info.step, 30);
  EXPECT_EQ(latest->info.world_size, 3);
  EXPECT_EQ(latest->payload, "thirty");
  EXPECT_TRUE(latest->skipped.empty());
}

// A truncated newest file and a bit-flipped one are reported and skipped.
TEST(Checkpoint, CorruptNewestFallsBackToPrevious) {
  CheckpointManager m(TempDir("corrupt"), 5);
  ASSERT_TRUE(m.Write(1, 2, std::string(1000, 'a')).ok());
  auto second = m.Write(2, 2, std::string(1000, 'b'));
  auto third = m.Write(3, 2, std::string(1000, 'c'));
  ASSERT_TRUE(second.ok() && third.ok());
  std::filesystem::resize_file(third->path, 500);  // truncated
  {
    std::fstream f(second->path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('X');  // payload bit flip
  }
  auto latest = m.LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->info.step, 1);
  ASSERT_EQ(latest->skipped.size(), 2u);
  EXPECT_TRUE(latest->skipped[0].IsCorruption());
  EXPECT_NE(latest->skipped[0].message().find("truncated"), std::string::npos) << latest->skipped[0];
  EXPECT_NE(latest->skipped[1].message().find("checksum"), std::string::npos) << latest->skipped[1];
}

TEST(Checkpoint, EmptyDirectoryIsNotFound) {
  CheckpointManager m(TempDir("empty"));
  EXPECT_TRUE(m.LoadLatest().status().IsNotFound());
}

// An fs whose writes fail after N bytes: the old checkpoint stays intact, no
// temp file is left and the error is an IoError.
class FailingFs : public CheckpointFs {
 public:
  Status WriteFileSynced(const std::string& path, std::string_view data) override {
    if (fail) {
      (void)base->WriteFileSynced(path, data.substr(0, data.size() / 2));
      return Status::IoError("injected: disk full writing " + path);
    }
    return base->WriteFileSynced(path, data);
  }
  Status Rename(const std::string& a, const std::string& b) override { return base->Rename(a, b); }
  Status SyncDir(const std::string& d) override { return base->SyncDir(d); }
  Result<std::string> ReadFile(const std::string& p) override { return base->ReadFile(p); }
  Result<std::vector<std::string>> ListDir(const std::string& d) override { return base->ListDir(d); }
  Status CreateDirs(const std::string& d) override { return base->CreateDirs(d); }
  Status Remove(const std::string& p) override { return base->Remove(p); }
  CheckpointFs* base = CheckpointFs::Posix();
  bool fail = false;
};

TEST(Checkpoint, InjectedWriteFailureKeepsThePreviousOne) {
  FailingFs fs;
  std::string dir = TempDir("inject");
  CheckpointManager m(dir, 3, &fs);
  ASSERT_TRUE(m.Write(5, 1, "five").ok());
  fs.fail = true;
  auto r = m.Write(6, 1, "six");
  EXPECT_TRUE(r.status().IsIoError()) << r.status();
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
  EXPECT_EQ(files, 1u);
  auto latest = m.LoadLatest();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->payload, "five");
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
