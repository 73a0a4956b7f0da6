// StopNotices: the file a worker's ARYL_STOP_NOTICE names. It appears when the
// agent starts to stop the worker (a preemption, a reclaim, a restart to resize,
// a cancel, a lost lease), just before SIGTERM, and says by when the worker
// must be gone: after that the agent sends SIGKILL. Programs that do not link
// the runtime (torchrun-style scripts) poll it at step boundaries, or read it on
// SIGTERM, to checkpoint in time (docs/user-guide.md, "Stop notice").
//
// The file is one JSON object on one line, written whole (temporary file and
// rename, so a reader never sees half of it):
//   {"deadline": <unix seconds>, "grace_seconds": <s>, "reason": "<why>",
//    "job": <id>, "worker": <id>}
// It lives in <log dir>/notices (mode 0711: reachable, not listable), named
// job-<job>-worker-<worker>, owned by the worker's account, mode 0600; it is
// removed when the worker ends.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <map>
#include <string>

#include "aryl/result.h"

namespace aryl::agent {

struct StopNotice {
  std::int64_t job = 0;
  std::int64_t worker = 0;
  double deadline = 0;  // unix seconds
  double grace_seconds = 0;
  std::string reason;
  std::string ToJson() const;
};

class StopNotices {
 public:
  explicit StopNotices(std::filesystem::path dir) : dir_(std::move(dir)) {}

  // Creates the directory (0711). Idempotent.
  Status Prepare() const;
  // The path ARYL_STOP_NOTICE names for one worker.
  std::string PathOf(std::int64_t job, std::int64_t worker) const;
  // Writes the notice, owned by `owner` (uid, gid) when given. A worker's
  // notice is written again only for an earlier deadline: the SIGKILL comes at
  // the earliest deadline any stop asked for (ProcessLauncher::RequestStop,
  // WorkerLife), and the notice says when.
  Status Write(const StopNotice& n, std::optional<std::pair<uid_t, gid_t>> owner);
  // The notice of a stop `grace_seconds` from now.
  Status WriteFor(std::int64_t job, std::int64_t worker, double grace_seconds, const std::string& reason,
                  std::optional<std::pair<uid_t, gid_t>> owner);
  // Removes the worker's notice (it ended, or its id starts again).
  void Remove(std::int64_t job, std::int64_t worker);

 private:
  std::filesystem::path dir_;
  std::map<std::pair<std::int64_t, std::int64_t>, double> written_;  // the deadline written
};

}  // namespace aryl::agent
