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

Result<std::vector<EventRecord>> StateStore::Events(std::uint64_t job, std::int64_t after, int limit) {
  EventFilter f;
  f.job = job;
  f.after = after;
  f.limit = limit;
  return Events(f);
}

}  // namespace aryl::daemon
