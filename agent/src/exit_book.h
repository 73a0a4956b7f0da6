// ExitBook: the worker exits this agent reported and the scheduler has not
// acknowledged yet (protocol/messages.h, step 7). Exits are kept until a
// WorkerExitAck (sent once the exit is durable at the scheduler), sent again
// every kResendSeconds and on every registration, so no exit is lost to a
// scheduler restart, a full state disk or a dropped message. It also builds
// the reports: what the scheduler learns of a worker's end.
//
// Pure: times are passed in; sending is the caller's. Thread safety: none
// (the agent's loop owns it).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "aryl/agent/process.h"
#include "aryl/protocol/messages.h"

namespace aryl::agent {

class ExitBook {
 public:
  static constexpr double kResendSeconds = 2.0;

  // Keeps `m` until Acked (a later exit of the same worker replaces it).
  void Add(const protocol::WorkerExited& m) { unacked_[{m.job, m.worker}] = m; }
  void Acked(protocol::JobId job, protocol::WorkerId worker) { unacked_.erase({job, worker}); }
  // Every unacknowledged exit, by (job, worker): for a registration.
  std::vector<protocol::WorkerExited> Unacked() const;
  // The exits to send again at `now`: all of them at most every
  // kResendSeconds, else none.
  std::vector<protocol::WorkerExited> DueForResend(double now);
  bool empty() const { return unacked_.empty(); }

 private:
  std::map<std::pair<protocol::JobId, protocol::WorkerId>, protocol::WorkerExited> unacked_;
  double last_resend_ = 0;
};

// A worker's end as the scheduler learns it: exit code or signal, whether the
// program linked the runtime (`runtime`: it said WorkerHello), and the
// runtime's own outcome and step when it reported one (`done`).
protocol::WorkerExited ExitReport(const std::string& agent_id, protocol::JobId job, protocol::WorkerId worker,
                                  std::int64_t generation, const ExitInfo& ex, bool runtime,
                                  const std::optional<protocol::WorkerDone>& done);

// A worker that could not be started: exit code 127 with the reason.
protocol::WorkerExited LaunchFailure(const std::string& agent_id, protocol::JobId job, protocol::WorkerId worker,
                                     std::int64_t generation, const std::string& error);

}  // namespace aryl::agent
