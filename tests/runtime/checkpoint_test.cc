#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

// ---- a full disk --------------------------------------------------------------

// A disk of `budget` bytes over a real directory: the used bytes are the sizes
// of the files in it. A write that does not fit writes what fits (as a real
// disk leaves a partial file) and fails with NoSpace.
class BudgetFs : public CheckpointFs {
 public:
  BudgetFs(std::string dir, uint64_t budget) : dir_(std::move(dir)), budget_(budget) {}
  Status WriteFileSynced(const std::string& path, std::string_view data) override {
    uint64_t used = Used(path);
    if (used + data.size() > budget_) {
      ++no_space;
      uint64_t fits = budget_ > used ? budget_ - used : 0;
      (void)base_->WriteFileSynced(path, data.substr(0, fits));
      return NoSpace("write " + path + ": injected: disk of " + std::to_string(budget_) +
                     " bytes is full");
    }
    return base_->WriteFileSynced(path, data);
  }
  Result<uint64_t> FreeBytes(const std::string&) override {
    uint64_t used = Used("");
    return budget_ > used ? budget_ - used : 0;
  }
  Status Rename(const std::string& a, const std::string& b) override { return base_->Rename(a, b); }
  Status SyncDir(const std::string& d) override { return base_->SyncDir(d); }
  Result<std::string> ReadFile(const std::string& p) override { return base_->ReadFile(p); }
  Result<std::vector<std::string>> ListDir(const std::string& d) override {
    return base_->ListDir(d);
  }
  Status CreateDirs(const std::string& d) override { return base_->CreateDirs(d); }
  Status Remove(const std::string& p) override {
    ++removes;
    return base_->Remove(p);
  }
  int no_space = 0;  // writes that did not fit
  int removes = 0;

 private:
  // Bytes held by the files of the directory, but `except` (a file rewritten).
  uint64_t Used(const std::string& except) const {
    uint64_t used = 0;
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator(dir_, ec))
      if (e.is_regular_file() && e.path().string() != except) used += e.file_size();
    return used;
  }
  std::string dir_;
  uint64_t budget_;
  CheckpointFs* base_ = CheckpointFs::Posix();
};

// The checkpoint files of `dir` (temp files are counted apart), by name.
struct DirFiles {
  std::vector<std::string> checkpoints;
  std::vector<std::string> temps;
};
DirFiles FilesOf(const std::string& dir) {
  DirFiles out;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos)
      out.temps.push_back(name);
    else if (name.rfind("ckpt-", 0) == 0)
      out.checkpoints.push_back(name);
  }
  std::sort(out.checkpoints.begin(), out.checkpoints.end());
  return out;
}

constexpr size_t kPayload = 64 * 1024;  // bytes; a file is this plus a 40-byte header
std::string PayloadOf(int64_t step) { return std::string(kPayload, char('a' + step % 26)); }

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
