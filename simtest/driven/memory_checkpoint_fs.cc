#include "memory_checkpoint_fs.h"

#include <algorithm>

namespace aryl::daemon::testing {

Status MemoryCheckpointFs::WriteFileSynced(const std::string& path, std::string_view data) {
  if (fail_next_write_) {
    fail_next_write_ = false;
    ++io_errors_;
    return Status::IoError("write " + path + ": Input/output error (injected)");
  }
  const std::uint64_t replaced = Size(path);
  const std::uint64_t taken = used_ - replaced + other_;
  if (capacity_ != kUnlimited && (taken > capacity_ || capacity_ - taken < data.size())) {
    ++no_space_;
    (void)Remove(path);  // O_TRUNC happened; the short file is the caller's to remove
    return NoSpace("write " + path + ": No space left on device (" + std::to_string(data.size()) + " bytes, " +
                   std::to_string(capacity_ - std::min(capacity_, taken)) + " free)");
  }
  used_ = used_ - replaced + data.size();
  files_[path] = std::string(data);
  return Status::Ok();
}

Status MemoryCheckpointFs::Rename(const std::string& from, const std::string& to) {
  auto it = files_.find(from);
  if (it == files_.end()) return Status::IoError("rename " + from + ": No such file or directory");
  std::string bytes = std::move(it->second);
  files_.erase(it);
  used_ -= Size(to);
  files_[to] = std::move(bytes);
  corrupt_.erase(to);
  return Status::Ok();
}

Result<std::string> MemoryCheckpointFs::ReadFile(const std::string& path) {
  auto it = files_.find(path);
  if (it == files_.end()) return Status::IoError("open " + path + ": No such file or directory");
  return it->second;
}

Result<std::vector<std::string>> MemoryCheckpointFs::ListDir(const std::string& dir) { return Names(dir); }

std::vector<std::string> MemoryCheckpointFs::Names(const std::string& dir) const {
  std::vector<std::string> out;
  const std::string prefix = dir + "/";
  for (const auto& [path, bytes] : files_)
    if (path.rfind(prefix, 0) == 0 && path.find('/', prefix.size()) == std::string::npos)
      out.push_back(path.substr(prefix.size()));
  return out;
}

Status MemoryCheckpointFs::Remove(const std::string& path) {
  auto it = files_.find(path);
  if (it == files_.end()) return Status::Ok();
  used_ -= it->second.size();
  files_.erase(it);
  corrupt_.erase(path);
  return Status::Ok();
}

Result<std::uint64_t> MemoryCheckpointFs::FreeBytes(const std::string&) {
  if (capacity_ == kUnlimited) return kUnlimited;
  const std::uint64_t taken = used_ + other_;
  return taken >= capacity_ ? 0 : capacity_ - taken;
}

bool MemoryCheckpointFs::Corrupt(const std::string& path, bool torn) {
  auto it = files_.find(path);
  if (it == files_.end() || it->second.empty()) return false;
  std::string& bytes = it->second;
  const bool again = !corrupt_.insert(path).second;
  if (torn || again) {  // a second flip of the same byte would mend it
    used_ -= bytes.size() - bytes.size() / 2;
    bytes.resize(bytes.size() / 2);
  } else {
    bytes[bytes.size() / 2] ^= 0x5a;
  }
  return true;
}

std::uint64_t MemoryCheckpointFs::Size(const std::string& path) const {
  auto it = files_.find(path);
  return it == files_.end() ? 0 : it->second.size();
}

}  // namespace aryl::daemon::testing
