#include "aryl/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "aryl/hash.h"

namespace aryl {
namespace {

constexpr char kMagic[8] = {'A', 'R', 'Y', 'L', 'C', 'K', 'P', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 + 8 + 4 + 8 + 8;
constexpr char kNoSpacePrefix[] = "no space: ";

// The message of a NoSpace status without its tag, to quote it in another.
std::string Cause(const Status& s) {
  std::string m = s.message();
  if (auto at = m.find(kNoSpacePrefix); at != std::string::npos)
    m.erase(at, sizeof(kNoSpacePrefix) - 1);
  return m;
}

template <typename T>
void Put(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(char((uint64_t(v) >> (8 * i)) & 0xff));
}
template <typename T>
T Get(std::string_view in, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t(uint8_t(in[at + i])) << (8 * i);
  return T(v);
}

// The failed call's errno as a Status; lack of space as CheckpointFs::NoSpace
// (fsync, close and rename can report it too, not only write).
Status Errno(std::string_view what, const std::string& path) {
  int err = errno;
  std::string msg = std::string(what) + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return CheckpointFs::NoSpace(msg);
  return Status::IoError(msg);
}

class PosixFs final : public CheckpointFs {
 public:
  Status WriteFileSynced(const std::string& path, std::string_view data) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("open", path);
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        Status s =
            n < 0 ? Errno("write", path)
                  : CheckpointFs::NoSpace("write " + path + ": stopped at " + std::to_string(done) +
                                          " of " + std::to_string(data.size()) + " bytes");
        ::close(fd);
        return s;
      }
      done += size_t(n);
    }
    if (::fsync(fd) != 0) {
      Status s = Errno("fsync", path);
      ::close(fd);
      return s;
    }
    if (::close(fd) != 0) return Errno("close", path);
    return Status::Ok();
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return Errno("rename to " + to + " from", from);
    return Status::Ok();
  }
  Status SyncDir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno("open dir", dir);
    int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) return Errno("fsync dir", dir);
    return Status::Ok();
  }
  Result<std::string> ReadFile(const std::string& path) override {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Errno("open", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return Errno("read", path);
    return ss.str();
  }
  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    std::vector<std::string> out;
    DIR* d = ::opendir(dir.c_str());
    if (!d) {
      if (errno == ENOENT) return out;
      return Errno("opendir", dir);
    }
    while (dirent* e = ::readdir(d)) out.emplace_back(e->d_name);
    ::closedir(d);
    return out;
  }
  Status CreateDirs(const std::string& dir) override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IoError("create_directories " + dir + ": " + ec.message());
    return Status::Ok();
  }
  Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("unlink", path);
    return Status::Ok();
  }
};

bool ParseName(const std::string& name, int64_t* step) {
  if (name.size() != 5 + 12 + 5 || name.rfind("ckpt-", 0) != 0 || name.substr(17) != ".aryl") return false;
  int64_t v = 0;
  for (size_t i = 5; i < 17; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + (name[i] - '0');
  }
  *step = v;
  return true;
}

constexpr char kFenceFile[] = "FENCE";
constexpr char kFenceLock[] = "FENCE.lock";
constexpr char kFencedPrefix[] = "fenced: ";
constexpr uint64_t kFenceBytes = 4096;  // room for "<job> <generation>" (one block)
// Held for the fence alone: on a disk full to the last block with nothing
// older than the newest good checkpoint to remove, removing it lets the
// fence be raised (checkpoint.h, "A full disk").
constexpr char kFenceReserve[] = "FENCE.reserve";

}  // namespace

struct CheckpointManager::Room {
  std::string kept;  // the newest good checkpoint ("" when there is none)
  int removed = 0;
  std::string free;  // free bytes after the removals, as text ("unknown" when not known)
};

Status CheckpointFs::WithLock(const std::string& path, const std::function<Status()>& body) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open lock", path);
  int rc;
  while ((rc = ::flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    Status s = Errno("flock", path);
    ::close(fd);
    return s;
  }
  Status s = body();
  ::close(fd);  // releases the lock
  return s;
}

bool CheckpointManager::IsFenced(const Status& s) {
  return s.code() == Status::Code::kFailedPrecondition && s.message().find(kFencedPrefix) != std::string::npos;
}

Result<CheckpointManager::FenceValue> CheckpointManager::Fence() {
  ARYL_ASSIGN_OR_RETURN(auto names, fs_->ListDir(dir_));
  if (std::find(names.begin(), names.end(), kFenceFile) == names.end()) return FenceValue{};
  std::string path = dir_ + "/" + kFenceFile;
  ARYL_ASSIGN_OR_RETURN(std::string text, fs_->ReadFile(path));
  FenceValue f;
  std::istringstream in(text);
  std::string rest;
  if (!(in >> f.job >> f.generation) || f.generation < 1 || (in >> rest))
    return Status::Corruption(path + ": expected '<job> <generation>', got '" + text.substr(0, 60) + "'");
  return f;
}

// FailedPrecondition ("fenced: ...") when `fence` is above this manager's
// generation for the same job.
Status CheckpointManager::StaleAgainst(const FenceValue& fence) const {
  if (fence.job != fence_job_ || fence.generation <= generation_) return Status::Ok();
  return Status::FailedPrecondition(std::string(kFencedPrefix) + "job " + fence_job_ + " generation " +
                                    std::to_string(generation_) + " is stale: generation " +
                                    std::to_string(fence.generation) + " has run in " + dir_);
}

Status CheckpointManager::CheckFence() {
  if (generation_ <= 0 || dir_.empty()) return Status::Ok();
  ARYL_ASSIGN_OR_RETURN(FenceValue fence, Fence());
  return StaleAgainst(fence);
}

Status CheckpointManager::CheckAndRaiseLocked() {
  ARYL_ASSIGN_OR_RETURN(FenceValue fence, Fence());
  ARYL_RETURN_IF_ERROR(StaleAgainst(fence));
  if (fence.job == fence_job_ && fence.generation == generation_) return Status::Ok();
  std::string path = dir_ + "/" + kFenceFile;
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Status s = fs_->WriteFileSynced(tmp, fence_job_ + " " + std::to_string(generation_) + "\n");
  if (s.ok()) s = fs_->Rename(tmp, path);
  if (!s.ok()) (void)fs_->Remove(tmp);
  return s;
}

Status CheckpointManager::RaiseFence() {
  if (generation_ <= 0) return Status::Ok();
  if (dir_.empty()) return Status::Ok();
  ARYL_RETURN_IF_ERROR(fs_->CreateDirs(dir_));
  auto raise = [&] {
    return fs_->WithLock(dir_ + "/" + kFenceLock, [&] { return CheckAndRaiseLocked(); });
  };
  Status s = raise();
  if (CheckpointFs::IsNoSpace(s)) {
    // A disk full to the last block would stop the job from starting again:
    // room from the older checkpoints first, then the fence's reserve.
    auto room = MakeRoom(kFenceBytes);
    if (!room.ok())
      return room.status().WithContext("raising the fence after \"" + s.message() + "\"");
    if (room->removed > 0) s = raise();
    const std::string reserve = dir_ + "/" + kFenceReserve;
    auto names = fs_->ListDir(dir_);
    if (CheckpointFs::IsNoSpace(s) && names.ok() &&
        std::find(names->begin(), names->end(), kFenceReserve) != names->end() && fs_->Remove(reserve).ok())
      s = raise();
  }
  if (s.ok()) KeepFenceReserve();
  return s;
}

Status CheckpointManager::RaiseFenceRetrying(const std::function<void(int tried)>& pause) {
  Status s = RaiseFence();
  for (int tried = 1; tried < kRaiseTries && s.IsIoError(); ++tried) {
    if (pause) pause(tried);
    s = RaiseFence();
  }
  return s;
}

void CheckpointManager::KeepFenceReserve() {
  auto names = fs_->ListDir(dir_);
  if (!names.ok() || std::find(names->begin(), names->end(), kFenceReserve) != names->end()) return;
  // Best effort: on a full disk it waits for the next raise.
  const std::string reserve = dir_ + "/" + kFenceReserve;
  if (!fs_->WriteFileSynced(reserve, std::string(kFenceBytes, '\0')).ok()) (void)fs_->Remove(reserve);
}

CheckpointFs* CheckpointFs::Posix() {
  static PosixFs fs;
  return &fs;
}

Result<uint64_t> CheckpointFs::FreeBytes(const std::string& dir) {
  struct statvfs st;
  if (::statvfs(dir.c_str(), &st) != 0) return Errno("statvfs", dir);
  return uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
}

Status CheckpointFs::NoSpace(const std::string& what) {
  return Status::IoError(kNoSpacePrefix + what);
}

bool CheckpointFs::IsNoSpace(const Status& s) {
  return s.IsIoError() && s.message().find(kNoSpacePrefix) != std::string::npos;
}

CheckpointManager::CheckpointManager(std::string dir, int keep, CheckpointFs* fs)
    : dir_(std::move(dir)), keep_(std::max(1, keep)), fs_(fs) {}

std::string CheckpointManager::FileName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "ckpt-%012lld.aryl", static_cast<long long>(step));
  return buf;
}

Status CheckpointManager::WriteAndCommit(const std::string& tmp, const std::string& path,
                                         std::string_view data) {
  // Fenced: the fence is checked and raised before the file is written as
  // well as at the commit, so a stale copy writes nothing and the fence's
  // own few bytes never compete with the checkpoint for the last room.
  Status s = generation_ > 0 ? fs_->WithLock(dir_ + "/" + kFenceLock, [&] { return CheckAndRaiseLocked(); })
                             : Status::Ok();
  if (!s.ok()) return s;
  s = fs_->WriteFileSynced(tmp, data);
  if (s.ok()) {
    if (generation_ > 0) {
      s = fs_->WithLock(dir_ + "/" + kFenceLock, [&]() -> Status {
        ARYL_RETURN_IF_ERROR(CheckAndRaiseLocked());
        return fs_->Rename(tmp, path);
      });
    } else {
      s = fs_->Rename(tmp, path);
    }
  }
  if (!s.ok()) (void)fs_->Remove(tmp);  // a partial file would hold the space we lack
  return s;
}

Result<CheckpointManager::Room> CheckpointManager::MakeRoom(uint64_t needed) {
  Room room;
  auto body = [&]() -> Status {
    // The same check as a commit: a stale copy must not touch the live copy's files.
    if (generation_ > 0) {
      ARYL_ASSIGN_OR_RETURN(FenceValue fence, Fence());
      ARYL_RETURN_IF_ERROR(StaleAgainst(fence));
    }
    ARYL_ASSIGN_OR_RETURN(auto files, List());
    // Validating reads whole files; this runs only after a write ran out of space.
    size_t good = files.size();  // the newest file Load accepts
    for (size_t i = 0; i < files.size() && good == files.size(); ++i)
      if (Load(files[i].path).ok()) good = i;
    if (good == files.size()) return Status::Ok();  // nothing good to keep, nothing removed
    room.kept = files[good].path;
    // A file takes whole blocks and some metadata: a little slack. The free
    // space may not tell (a quota), hence at least one removal per failure.
    const uint64_t want = needed + needed / 32 + 8192;
    for (size_t i = files.size(); i-- > good + 1;) {
      if (room.removed > 0) {
        auto free = fs_->FreeBytes(dir_);
        if (free.ok() && *free >= want) break;
      }
      ARYL_RETURN_IF_ERROR(fs_->Remove(files[i].path));
      ++room.removed;
    }
    return Status::Ok();
  };
  Status s = generation_ > 0 ? fs_->WithLock(dir_ + "/" + kFenceLock, body) : body();
  if (!s.ok()) return s;
  if (room.removed > 0) (void)fs_->SyncDir(dir_);
  auto free = fs_->FreeBytes(dir_);
  room.free = free.ok() ? std::to_string(*free) : "unknown";
  return room;
}

Result<CheckpointInfo> CheckpointManager::Write(int64_t step, int world_size, std::string_view payload) {
  if (dir_.empty()) return Status::FailedPrecondition("checkpoint: no directory configured (ARYL_CHECKPOINT_DIR)");
  ARYL_RETURN_IF_ERROR(fs_->CreateDirs(dir_));
  std::string data;
  data.reserve(kHeaderBytes + payload.size());
  data.append(kMagic, 8);
  Put<uint32_t>(data, kVersion);
  Put<uint64_t>(data, uint64_t(step));
  Put<uint32_t>(data, uint32_t(world_size));
  Put<uint64_t>(data, payload.size());
  Put<uint64_t>(data, Fnv1a64(payload));
  data.append(payload);
  CheckpointInfo info{dir_ + "/" + FileName(step), step, world_size};
  const std::string context = "checkpoint step " + std::to_string(step);
  // "<name>.tmp.g<generation>.<pid>": a stray file names who wrote it.
  std::string tmp = info.path + ".tmp.g" + std::to_string(generation_) + "." + std::to_string(::getpid());
  Status s = WriteAndCommit(tmp, info.path, data);
  if (CheckpointFs::IsNoSpace(s)) {
    // A full disk: room from older checkpoints, then one more try.
    auto room = MakeRoom(data.size());
    if (!room.ok())
      return room.status().WithContext(context + ": making room after \"" + s.message() + "\"");
    info.removed_for_space = room->removed;
    if (room->removed > 0) s = WriteAndCommit(tmp, info.path, data);
    if (CheckpointFs::IsNoSpace(s)) {
      std::string kept = room->kept.empty() ? "no valid checkpoint to keep"
                                            : "kept the newest good checkpoint " + room->kept;
      return CheckpointFs::NoSpace(context + " needs " + std::to_string(data.size()) +
                                   " bytes in " + dir_ + "; " + room->free +
                                   " bytes free after removing " + std::to_string(room->removed) +
                                   " older checkpoint(s); " + kept + "; cause: " + Cause(s));
    }
  }
  if (!s.ok()) return s.WithContext(context);
  ARYL_RETURN_IF_ERROR(fs_->SyncDir(dir_));
  // Retention: keep the newest keep_ files.
  auto listed = List();
  if (listed.ok()) {
    for (size_t i = size_t(keep_); i < listed->size(); ++i) (void)fs_->Remove((*listed)[i].path);
  }
  return info;
}

Result<std::vector<CheckpointInfo>> CheckpointManager::List() {
  ARYL_ASSIGN_OR_RETURN(auto names, fs_->ListDir(dir_));
  std::vector<CheckpointInfo> out;
  for (const auto& n : names) {
    int64_t step;
    if (ParseName(n, &step)) out.push_back({dir_ + "/" + n, step, 0});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.step > b.step; });
  return out;
}

Result<LoadedCheckpoint> CheckpointManager::Load(const std::string& path) {
  ARYL_ASSIGN_OR_RETURN(std::string data, fs_->ReadFile(path));
  if (data.size() < kHeaderBytes) {
    return Status::Corruption(path + ": truncated: " + std::to_string(data.size()) + " bytes < header " +
                              std::to_string(kHeaderBytes));
  }
  if (std::memcmp(data.data(), kMagic, 8) != 0) return Status::Corruption(path + ": bad magic");
  uint32_t version = Get<uint32_t>(data, 8);
  if (version != kVersion) {
    return Status::Corruption(path + ": version " + std::to_string(version) + " != " + std::to_string(kVersion));
  }
  LoadedCheckpoint out;
  out.info.path = path;
  out.info.step = int64_t(Get<uint64_t>(data, 12));
  out.info.world_size = int(Get<uint32_t>(data, 20));
  uint64_t size = Get<uint64_t>(data, 24);
  uint64_t sum = Get<uint64_t>(data, 32);
  if (data.size() - kHeaderBytes != size) {
    return Status::Corruption(path + ": truncated: payload " + std::to_string(data.size() - kHeaderBytes) +
                              " bytes, header says " + std::to_string(size));
  }
  std::string_view payload(data.data() + kHeaderBytes, size);
  uint64_t actual = Fnv1a64(payload);
  if (actual != sum) {
    return Status::Corruption(path + ": checksum " + std::to_string(actual) + " != stored " + std::to_string(sum));
  }
  out.payload.assign(payload);
  return out;
}

Result<LoadedCheckpoint> CheckpointManager::LoadLatest() {
  ARYL_ASSIGN_OR_RETURN(auto files, List());
  std::vector<Status> skipped;
  for (const auto& f : files) {
    auto loaded = Load(f.path);
    if (loaded.ok()) {
      loaded->skipped = std::move(skipped);
      return loaded;
    }
    skipped.push_back(loaded.status());
  }
  std::string msg = "no valid checkpoint in '" + dir_ + "'";
  for (const auto& s : skipped) msg += "; skipped " + s.ToString();
  return Status::NotFound(msg);
}

}  // namespace aryl
