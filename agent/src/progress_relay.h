// ProgressRelay: what the scheduler learns of a job's progress from this
// agent (protocol/messages.h, steps 9 and 14), at most once a second per job:
//  - rank 0's WorkerProgress messages, with the loss from its stdout when the
//    message has none (the program did not call Runtime::ReportLoss), each
//    step summary relayed once;
//  - for programs that do not speak to the agent, rank 0's stdout lines
//    "step=N loss=X step_s=S" (the examples print them), their step_s
//    summarised as the runtime's step times are (stdout_progress.h);
//  - as soon as a job's worker says WorkerHello, that the program links the
//    runtime (the scheduler then resizes it in place, SubmitJob::elastic).
// It returns the JobProgress messages to send; sending is the caller's.
//
// Thread safety: none; the agent's loop owns it.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "aryl/protocol/messages.h"
#include "local_workers.h"

namespace aryl::agent {

class ProgressRelay {
 public:
  // Rank 0's WorkerProgress, kept until relayed (a newer step replaces it).
  void OnWorkerProgress(const protocol::WorkerProgress& pr);
  // For each job of `workers` not reported yet whose worker `said_hello`:
  // JobProgress{runtime}. Called while registered.
  std::vector<protocol::JobProgress> RuntimeReports(const LocalWorkers& workers,
                                                    const std::function<bool(const std::string&)>& said_hello);
  // At most once a second: reads rank 0's stdout and returns the progress to
  // send (none while not `registered`). Forgets jobs no longer in `workers`.
  std::vector<protocol::JobProgress> Tick(double now, LocalWorkers& workers, bool registered);

 private:
  // Rank 0's newest WorkerProgress per job; `fresh` until sent as a JobProgress.
  struct Latest {
    protocol::WorkerProgress msg;
    bool fresh = false;
  };
  std::map<protocol::JobId, Latest> worker_progress_;
  std::map<protocol::JobId, double> stdout_loss_;  // the newest loss rank 0 printed
  std::set<protocol::JobId> runtime_reported_;     // jobs whose program was seen to link the runtime
  double last_tick_ = 0;
};

}  // namespace aryl::agent
