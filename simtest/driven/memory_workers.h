// MemoryWorkers: the worker processes of one driven agent, in memory. It is
// the WorkerHost (agent/src/agent_core.h) aryl-agent's own AgentCore runs
// over in the driven cluster, where ProcessLauncher, the worker channel and
// the stop notices serve the binary:
//  1. Launch: a process record with a pid of its own and a channel identity.
//  2. RequestStop: SIGTERM once (what the worker does with it is the
//     cluster's OnTerm: its runtime model's), SIGKILL at the earliest deadline
//     any stop asked for (Escalate), as ProcessLauncher does.
//  3. Kill: SIGKILL; the process ends now.
//  4. Push: a WorkerCheckpointRequest that asks to stop after it is what a
//     worker's later SIGTERM is taken as (checkpoint first); other pushes
//     reach no runtime here.
//  5. A process that ended waits to be reaped (Poll), as a child does, with
//     what its runtime said (TakeEnding).
//
// Pure: times come from the clock passed in. Thread safety: none.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "agent_core.h"
#include "aryl/clock.h"
#include "aryl/protocol/messages.h"

namespace aryl::daemon::testing {

class MemoryWorkers final : public agent::WorkerHost {
 public:
  // A worker's SIGTERM (the first): what it does is the cluster's.
  using OnTerm = std::function<void(protocol::JobId, protocol::WorkerId, bool checkpoint_first, double grace)>;
  MemoryWorkers(const Clock& clock, OnTerm on_term) : clock_(clock), on_term_(std::move(on_term)) {}

  void Starting(const protocol::StartWorkers&) override {}
  Result<agent::StartedWorker> Launch(const protocol::StartWorkers& m, const protocol::WorkerPlacement& wp) override;
  void RequestStop(pid_t pid, double grace) override;
  void Kill(pid_t pid) override;
  void Notify(const agent::LocalWorker&, double, const std::string&) override {}
  void Push(const agent::LocalWorker& w, const protocol::Message& m) override;
  agent::WorkerEnding TakeEnding(const agent::LocalWorker& w) override;
  void Ended(const agent::LocalWorker&, bool) override {}

  // The process of `worker` ends as `ex` says, its runtime having said
  // `ending`; false when no process of it runs.
  bool End(protocol::WorkerId worker, agent::ExitInfo ex, agent::WorkerEnding ending = {});
  // SIGKILL to the stopping processes past their deadline.
  void Escalate();
  // The processes that ended since the last call (ProcessLauncher::Poll).
  std::vector<agent::ExitInfo> Poll();
  // The job of `worker`'s running process; nullopt: none runs.
  std::optional<protocol::JobId> JobOf(protocol::WorkerId worker) const;
  // The agent's process died: its workers die with it, reaped by nobody.
  void DieAll();

 private:
  struct Process {
    protocol::JobId job = 0;
    protocol::WorkerId worker = 0;
    bool checkpoint_first = false;  // asked to checkpoint and stop (step 4)
    double kill_at = -1;            // SIGTERM sent: SIGKILL then
  };
  std::map<pid_t, Process>::iterator Find(protocol::WorkerId worker);
  const Clock& clock_;
  OnTerm on_term_;
  std::map<pid_t, Process> alive_;
  std::vector<agent::ExitInfo> ended_;
  std::map<pid_t, agent::WorkerEnding> endings_;
  pid_t next_pid_ = 100000;
};

}  // namespace aryl::daemon::testing
