// Helpers of the checkpoint tests (checkpoint_test.cc, checkpoint_fence_test.cc):
// scratch directories, a disk of a byte budget over a real directory, the
// files a directory holds, and payloads of a known size.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "aryl/checkpoint.h"

namespace aryl::ckpt_test {

inline std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("aryl_ckpt_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

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
inline DirFiles FilesOf(const std::string& dir) {
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
inline std::string PayloadOf(int64_t step) { return std::string(kPayload, char('a' + step % 26)); }

}  // namespace aryl::ckpt_test
