// What every StateStore backend shares: job state names, the journal's
// convenience overloads and the SQLite default behind StateStore::Open.
#include "aryl/daemon/state_store.h"

#include "state/sqlite/sqlite_state_store.h"

namespace aryl::daemon {

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kFinished: return "finished";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "unknown";
}

Result<JobState> ParseJobState(std::string_view s) {
  for (auto st : {JobState::kQueued, JobState::kRunning, JobState::kFinished, JobState::kFailed,
                  JobState::kCancelled}) {
    if (JobStateName(st) == s) return st;
  }
  return Status::Corruption("unknown job state '" + std::string(s) + "'");
}

Result<std::unique_ptr<StateStore>> StateStore::Open(const std::string& path) {
  ARYL_ASSIGN_OR_RETURN(auto s, SqliteStateStore::Open(path));
  return std::unique_ptr<StateStore>(std::move(s));
}

Status StateStore::AppendEvent(double time, std::uint64_t job, const std::string& kind,
                               const std::string& detail) {
  EventRecord e;
  e.time = time;
  e.job = job;
  e.kind = kind;
  e.detail = detail;
  return AppendEvent(e);
}

Status StateStore::SaveCoreSnapshot(const std::string& body, std::optional<std::int64_t> upto) {
  return Batch([&]() -> Status {
    ARYL_ASSIGN_OR_RETURN(std::int64_t id, BeginCoreSnapshot(upto));
    for (std::size_t at = 0; at < body.size(); at += kCoreSnapshotPieceBytes)
      ARYL_RETURN_IF_ERROR(AppendCoreSnapshot(id, std::string_view(body).substr(at, kCoreSnapshotPieceBytes)));
    ARYL_RETURN_IF_ERROR(CommitCoreSnapshot(id));
    for (;;) {
      ARYL_ASSIGN_OR_RETURN(bool done, CompactCoreJournal(1 << 20, 1 << 20));
      if (done) return Status::Ok();
    }
  });
}

Result<std::vector<EventRecord>> StateStore::Events(std::uint64_t job, std::int64_t after, int limit) {
  EventFilter f;
  f.job = job;
  f.after = after;
  f.limit = limit;
  return Events(f);
}

}  // namespace aryl::daemon
