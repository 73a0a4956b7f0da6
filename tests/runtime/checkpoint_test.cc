#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "aryl/checkpoint.h"
#include "checkpoint_test_util.h"

namespace aryl {
namespace {

using namespace ckpt_test;  // NOLINT

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

// ---- a full disk --------------------------------------------------------------


// Fenced (the scheduler's jobs) and unfenced (standalone) managers alike.
class CheckpointFullDisk : public ::testing::TestWithParam<int64_t> {
 protected:
  std::string dir_ = TempDir("full_g" + std::to_string(GetParam()));
  void Fence(CheckpointManager& m) {
    if (GetParam() > 0) m.set_fence("7", GetParam());
  }
};

// A disk that holds three and a half checkpoints, keep = 3: from the 4th on,
// each write fails once, the oldest is removed, and the second try succeeds;
// the newest is always loadable and no temp file is ever left.
TEST_P(CheckpointFullDisk, OlderOnesMakeRoomForTheNext) {
  BudgetFs fs(dir_, 3 * (kPayload + 40) + kPayload / 2 + 64);
  CheckpointManager m(dir_, 3, &fs);
  Fence(m);
  for (int64_t step = 1; step <= 10; ++step) {
    auto w = m.Write(step, 2, PayloadOf(step));
    ASSERT_TRUE(w.ok()) << "step " << step << ": " << w.status();
    EXPECT_EQ(w->removed_for_space, step >= 4 ? 1 : 0) << "step " << step;
    auto latest = m.LoadLatest();
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(latest->info.step, step);
    EXPECT_EQ(latest->payload, PayloadOf(step));
    DirFiles files = FilesOf(dir_);
    EXPECT_TRUE(files.temps.empty()) << files.temps[0];
    EXPECT_EQ(files.checkpoints.size(), size_t(std::min<int64_t>(step, 3))) << "step " << step;
  }
  EXPECT_EQ(fs.no_space, 7);  // steps 4..10, once each
}

// A disk too small for two: the one good checkpoint is kept and loadable, the
// failed write leaves no temp file, and the error says what and where.
TEST_P(CheckpointFullDisk, TooSmallForTwoKeepsTheNewestGood) {
  BudgetFs fs(dir_, 2 * (kPayload + 40) - 100);
  CheckpointManager m(dir_, 3, &fs);
  Fence(m);
  ASSERT_TRUE(m.Write(1, 2, PayloadOf(1)).ok());
  for (int64_t step = 2; step <= 4; ++step) {
    auto w = m.Write(step, 2, PayloadOf(step));
    ASSERT_FALSE(w.ok());
    const Status& s = w.status();
    EXPECT_TRUE(s.IsIoError()) << s;
    EXPECT_TRUE(CheckpointFs::IsNoSpace(s)) << s;
    EXPECT_FALSE(CheckpointManager::IsFenced(s)) << s;
    const std::vector<std::string> parts = {
        "checkpoint step " + std::to_string(step),
        "needs " + std::to_string(kPayload + 40) + " bytes in " + dir_,
        "removing 0 older",
        "kept the newest good checkpoint " + dir_ + "/" + CheckpointManager::FileName(1),
        "cause: write " + dir_ + "/",
        "injected: disk of"};
    for (const std::string& part : parts)
      EXPECT_NE(s.message().find(part), std::string::npos) << "'" << part << "' not in " << s;
    DirFiles files = FilesOf(dir_);
    EXPECT_TRUE(files.temps.empty()) << files.temps[0];
    ASSERT_EQ(files.checkpoints.size(), 1u);
    auto latest = m.LoadLatest();
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(latest->info.step, 1);
  }
  EXPECT_EQ(fs.no_space, 3);
}

// The newest good checkpoint is the newest that loads, not the newest file: a
// truncated newer file is left for the operator, only older ones make room.
TEST_P(CheckpointFullDisk, NeverRemovesTheNewestGoodBehindACorruptOne) {
  BudgetFs fs(dir_, 4 * (kPayload + 40) + 64);
  CheckpointManager m(dir_, 5, &fs);
  Fence(m);
  for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(m.Write(step, 2, PayloadOf(step)).ok());
  std::string third = dir_ + "/" + CheckpointManager::FileName(3);
  std::filesystem::resize_file(third, 600);       // truncated: steps 1, 2 good, 3 not
  ASSERT_TRUE(m.Write(4, 2, PayloadOf(4)).ok());  // fits: the truncation freed room
  auto w = m.Write(5, 2, PayloadOf(5));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->removed_for_space, 1);
  EXPECT_EQ(
      FilesOf(dir_).checkpoints,
      (std::vector<std::string>{CheckpointManager::FileName(2), CheckpointManager::FileName(3),
                                CheckpointManager::FileName(4), CheckpointManager::FileName(5)}));
  // Steps 5 and 4 damaged too: step 2 is the newest good, and nothing is
  // older than it, so a write that does not fit removes nothing.
  std::filesystem::resize_file(dir_ + "/" + CheckpointManager::FileName(5), 10);
  std::filesystem::resize_file(dir_ + "/" + CheckpointManager::FileName(4), 20);
  BudgetFs tight(dir_, (kPayload + 40) + 600 + 10 + 20 + 100);
  CheckpointManager t(dir_, 5, &tight);
  Fence(t);
  auto r = t.Write(6, 2, PayloadOf(6));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(CheckpointFs::IsNoSpace(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("kept the newest good checkpoint " + dir_ + "/" +
                                      CheckpointManager::FileName(2)),
            std::string::npos)
      << r.status();
  auto latest = t.LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->info.step, 2);
  EXPECT_EQ(latest->skipped.size(), 3u);  // 5, 4, 3: still there for the operator
}

INSTANTIATE_TEST_SUITE_P(Fencing, CheckpointFullDisk, ::testing::Values(int64_t{0}, int64_t{3000}),
                         [](const auto& info) { return info.param ? "Fenced" : "Unfenced"; });

// An I/O error that is not a lack of space removes no checkpoint.
TEST(Checkpoint, OtherWriteErrorsMakeNoRoom) {
  FailingFs fs;
  std::string dir = TempDir("other_error");
  CheckpointManager m(dir, 3, &fs);
  for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(m.Write(step, 1, "x").ok());
  fs.fail = true;
  auto r = m.Write(4, 1, "y");
  EXPECT_TRUE(r.status().IsIoError()) << r.status();
  EXPECT_FALSE(CheckpointFs::IsNoSpace(r.status())) << r.status();
  EXPECT_EQ(FilesOf(dir).checkpoints.size(), 3u);
}

// ---- a real full disk (tmpfs) ---------------------------------------------------

// A tmpfs of `size` mounted on a fresh directory for one test; unmounted after.
class Tmpfs {
 public:
  explicit Tmpfs(const std::string& name, const std::string& size) : dir_(TempDir(name)) {
    std::filesystem::create_directories(dir_);
    if (::geteuid() != 0) {
      why_ = "not root";
    } else if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      why_ = std::string("mount -t tmpfs: ") + std::strerror(errno);
    } else {
      mounted_ = true;
    }
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  std::string ckpt_dir() const { return dir_ + "/ckpt"; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string why_;
};

constexpr size_t kRealPayload = 260 * 1024;  // the checkpoint size

// The setup on a real file system (real ENOSPC): checkpoints of 260 KB
// on 1 MiB, keep = 3. Every write succeeds, making room when the disk is full.
TEST(CheckpointRealDisk, OneMebibyteTmpfsKeepsCheckpointing) {
  Tmpfs fs("tmpfs1m", "1m");
  if (!fs.mounted())
    GTEST_SKIP() << "no tmpfs (" << fs.why() << "): the real-disk check did not run";
  CheckpointManager m(fs.ckpt_dir(), 3);
  m.set_fence("7", 3000);
  int removed = 0;
  for (int64_t step = 50; step <= 1000; step += 50) {
    auto w = m.Write(step, 4, std::string(kRealPayload, char('a' + step % 26)));
    ASSERT_TRUE(w.ok()) << "step " << step << ": " << w.status();
    removed += w->removed_for_space;
    auto latest = m.LoadLatest();
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(latest->info.step, step);
    EXPECT_TRUE(FilesOf(fs.ckpt_dir()).temps.empty());
  }
  EXPECT_GT(removed, 0);  // the disk did fill
}

// A real disk too small for two: the first checkpoint is kept and loadable,
// the failure is a NoSpace naming the directory, and no temp file is left.
TEST(CheckpointRealDisk, TooSmallForTwoKeepsTheFirst) {
  Tmpfs fs("tmpfs400k", "400k");
  if (!fs.mounted())
    GTEST_SKIP() << "no tmpfs (" << fs.why() << "): the real-disk check did not run";
  CheckpointManager m(fs.ckpt_dir(), 3);
  ASSERT_TRUE(m.Write(1, 4, std::string(kRealPayload, 'a')).ok());
  auto w = m.Write(2, 4, std::string(kRealPayload, 'b'));
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(CheckpointFs::IsNoSpace(w.status())) << w.status();
  EXPECT_NE(w.status().message().find("bytes in " + fs.ckpt_dir()), std::string::npos)
      << w.status();
  EXPECT_NE(w.status().message().find("No space left on device"), std::string::npos) << w.status();
  EXPECT_TRUE(FilesOf(fs.ckpt_dir()).temps.empty());
  auto latest = m.LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->info.step, 1);
}

}  // namespace
}  // namespace aryl
