// FullDiskStore: a StateStore that passes everything to the real one (SQLite)
// and, while its disk is "full", fails every write the way SQLite does
// (SQLITE_FULL: "database or disk is full"), reads still answered. LevelDB's
// error-injecting Env, for the daemon's state.
#pragma once

#include <memory>
#include <utility>

#include "aryl/daemon/state_store.h"

namespace aryl::daemon::testing {

class FullDiskStore final : public StateStore {
 public:
  explicit FullDiskStore(std::unique_ptr<StateStore> real) : real_(std::move(real)) {}
  // Shared with the test, which fills and frees the disk.
  std::shared_ptr<bool> full = std::make_shared<bool>(false);
  int refused = 0;  // writes refused so far

  int schema_version() const override { return real_->schema_version(); }
  std::string location() const override { return real_->location(); }
  Status Batch(const std::function<Status()>& body) override {
    if (Full()) return Refuse();
    return real_->Batch(body);
  }
  Result<std::uint64_t> InsertJob(const JobRecord& job) override {
    if (Full()) return Refuse();
    return real_->InsertJob(job);
  }
  Result<std::optional<std::uint64_t>> FindJobByToken(const std::string& token) override {
    return real_->FindJobByToken(token);
  }
  Status UpdateJob(const JobRecord& job) override { return Full() ? Refuse() : real_->UpdateJob(job); }
  Result<JobRecord> GetJob(std::uint64_t id) override { return real_->GetJob(id); }
  Result<std::vector<JobRecord>> ListJobs(bool only_live, std::uint64_t after, int limit) override {
    return real_->ListJobs(only_live, after, limit);
  }
  Result<std::uint64_t> MaxJobId() override { return real_->MaxJobId(); }
  Status UpsertNode(const NodeRecord& node) override { return Full() ? Refuse() : real_->UpsertNode(node); }
  Result<std::vector<NodeRecord>> ListNodes() override { return real_->ListNodes(); }
  using StateStore::AppendEvent;
  Status AppendEvent(const EventRecord& e) override { return Full() ? Refuse() : real_->AppendEvent(e); }
  using StateStore::Events;
  Result<std::vector<EventRecord>> Events(const EventFilter& filter) override { return real_->Events(filter); }
  Status AppendCoreEvent(double time, const std::string& body) override {
    return Full() ? Refuse() : real_->AppendCoreEvent(time, body);
  }
  Result<std::vector<std::pair<double, std::string>>> CoreEvents() override { return real_->CoreEvents(); }
  Result<std::int64_t> BeginCoreSnapshot(std::optional<std::int64_t> upto) override {
    if (Full()) return Refuse();
    return real_->BeginCoreSnapshot(upto);
  }
  Status AppendCoreSnapshot(std::int64_t id, std::string_view piece) override {
    return Full() ? Refuse() : real_->AppendCoreSnapshot(id, piece);
  }
  Status CommitCoreSnapshot(std::int64_t id) override { return Full() ? Refuse() : real_->CommitCoreSnapshot(id); }
  Status AbortCoreSnapshot(std::int64_t id) override { return Full() ? Refuse() : real_->AbortCoreSnapshot(id); }
  Result<bool> CompactCoreJournal(int max_pieces, int max_rows) override {
    if (Full()) return Refuse();
    return real_->CompactCoreJournal(max_pieces, max_rows);
  }
  Result<std::int64_t> LastCoreEventSeq() override { return real_->LastCoreEventSeq(); }
  Result<std::optional<std::string>> CoreSnapshot() override { return real_->CoreSnapshot(); }
  Status SetMeta(const std::string& key, const std::string& value) override {
    return Full() ? Refuse() : real_->SetMeta(key, value);
  }
  Result<std::optional<std::string>> GetMeta(const std::string& key) override { return real_->GetMeta(key); }

 private:
  bool Full() const { return *full; }
  Status Refuse() {
    ++refused;
    return Status::IoError("state write: database or disk is full");
  }
  std::unique_ptr<StateStore> real_;
};

}  // namespace aryl::daemon::testing
