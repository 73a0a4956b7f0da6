// AgentCore: what the agent decides about its workers, apart from the world
// it acts on. aryl-agent's loop (agent.cc) runs it over real processes, its
// worker channel and SchedulerSession; the driven cluster (simtest/driven)
// runs the same object over in-memory workers and wire, on virtual time.
//
// What it decides (agent.h, steps 1-7):
//  1. AgentRegister: this agent, its running workers and every exit the
//     scheduler has not acknowledged (exit_book.h).
//  2. Heartbeat: free slots and running workers. When the lease (lease.h)
//     runs out, every worker checkpoints and stops: a WorkerCheckpointRequest
//     (stop after), then SIGTERM, SIGKILL after kLeaseStopGraceSeconds.
//  3. StartWorkers: refused when invalid, without a lease, or of a
//     generation older than one seen here (generation_fence.h); a worker that
//     runs or ran here (this process) is not started again: a late or
//     repeated copy of its start; one that cannot start is reported as exit
//     127 with the reason.
//  4. NewGeneration: refused when stale; members take their new rank,
//     leavers must be gone by leave_timeout (worker_life.h a), else they are
//     stopped (d) with WorkerLife::kOverdueGrace.
//  5. StopWorkers: with checkpoint_first, a WorkerCheckpointRequest first;
//     then each worker through its WorkerLife (b, c, e): SIGKILL now without
//     a grace, else its stop notice, SIGTERM once and SIGKILL at the earliest
//     deadline any stop asked for.
//  6. WorkerCheckpointRequest: relayed to the job's workers here.
//  7. A worker's end: a WorkerExited, kept and sent again until the
//     scheduler's WorkerExitAck.
//
// The world comes in through three interfaces: a Clock, the SchedulerLink
// (is the agent registered, one-way sends, the lease its heartbeats renew)
// and the WorkerHost (launch, signals, stop notices, pushes to a worker, what
// a worker's channel said before it ended). The host reports a worker's end
// by OnExit, never from inside a call of the core.
//
// Thread safety: none; the agent's loop owns it.
#pragma once

#include <sys/types.h>

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "aryl/clock.h"
#include "aryl/protocol/messages.h"
#include "aryl/result.h"
#include "exit_book.h"
#include "generation_fence.h"
#include "lease.h"
#include "local_workers.h"

namespace aryl::agent {

// The agent's standing with its scheduler (SchedulerSession in aryl-agent, the
// driven agent's link in the simulation; both decide by a SessionCore).
class SchedulerLink {
 public:
  virtual ~SchedulerLink() = default;
  virtual bool registered() const = 0;
  // One-way to the scheduler; lost when it cannot be delivered.
  virtual void Send(const protocol::Message& m) = 0;
  virtual SchedulerLease& lease() = 0;
};

// A worker the host started: what the agent keeps of it besides the
// StartWorkers' placement.
struct StartedWorker {
  pid_t pid = 0;
  std::string identity;     // on the worker channel; empty: none
  std::string stdout_path;  // empty: none
  std::string store_key;    // the job's key in its store; empty: no store
  std::optional<std::pair<uid_t, gid_t>> owner;  // its account, when not the agent's
};

// What a worker's channel said before it ended (WorkerHello, WorkerDone).
struct WorkerEnding {
  bool runtime = false;
  std::optional<protocol::WorkerDone> done;
};

// The machine the workers run on.
class WorkerHost {
 public:
  virtual ~WorkerHost() = default;
  // A StartWorkers the agent takes, before any of its workers is launched.
  virtual void Starting(const protocol::StartWorkers& m) = 0;
  // Starts worker `wp` of `m`.
  virtual Result<StartedWorker> Launch(const protocol::StartWorkers& m, const protocol::WorkerPlacement& wp) = 0;
  // SIGTERM now and SIGKILL `grace` seconds later (process.h, RequestStop).
  virtual void RequestStop(pid_t pid, double grace) = 0;
  virtual void Kill(pid_t pid) = 0;  // SIGKILL now
  // The worker's stop notice, just before its SIGTERM (stop_notice.h).
  virtual void Notify(const LocalWorker& w, double grace, const std::string& reason) = 0;
  // A message to the worker over its channel.
  virtual void Push(const LocalWorker& w, const protocol::Message& m) = 0;
  virtual WorkerEnding TakeEnding(const LocalWorker& w) = 0;
  // `w` ended and was reported; `last`: no worker of its job runs here now.
  virtual void Ended(const LocalWorker& w, bool last) = 0;
};

class AgentCore {
 public:
  // `self`: the agent's identity as it registers (id, host, pool, GPU type,
  // slots, store endpoint, cluster); its workers and exits are the core's.
  AgentCore(protocol::AgentRegister self, double leave_timeout, const Clock& clock, SchedulerLink& scheduler,
            WorkerHost& host);

  // A command of the scheduler this core handles (StartWorkers,
  // NewGeneration, StopWorkers, WorkerCheckpointRequest, WorkerExitAck);
  // false for any other message.
  bool OnCommand(const protocol::Message& msg);
  void OnStart(const protocol::StartWorkers& m);
  // Whether it was taken (not stale).
  bool OnNewGeneration(const protocol::NewGeneration& m);
  void OnStop(const protocol::StopWorkers& m);

  // The worker `ex.pid` ended (an unknown pid is ignored).
  void OnExit(const ExitInfo& ex);
  // The loop's step: the lease, overdue leavers, exits due for resend.
  void Tick();

  protocol::AgentRegister RegisterMessage() const;
  protocol::Heartbeat HeartbeatMessage() const;

  // Pushes `m` to the running workers of `job` (of the job start `key` when
  // not empty; of `only` when not empty).
  void PushToWorkers(protocol::JobId job, std::string_view key, const protocol::Message& m,
                     const std::set<protocol::WorkerId>& only = {});
  // Kept until acknowledged, sent now while registered.
  void ReportExit(const protocol::WorkerExited& m);

  const LocalWorkers& workers() const { return workers_; }
  LocalWorkers& workers() { return workers_; }
  const ExitBook& exits() const { return exits_; }

 private:
  bool Stale(protocol::JobId job, std::int64_t generation, std::string_view what);
  void StopWorker(LocalWorker& w, double grace, const std::string& reason);
  void LeaseTick();

  protocol::AgentRegister self_;
  double leave_timeout_;
  const Clock& clock_;
  SchedulerLink& scheduler_;
  WorkerHost& host_;
  LocalWorkers workers_;
  ExitBook exits_;
  GenerationFence fence_;  // StartWorkers and NewGeneration of an overtaken generation are refused
  // Every worker this process started (or failed to start), by (job,
  // worker): the scheduler never gives two starts one worker id, so a start
  // of one of these is a late or repeated copy of one already taken, and
  // must not run an ended worker again beside its successors. The oldest
  // (the lowest ids) are forgotten past kStartedKept.
  static constexpr std::size_t kStartedKept = 65536;
  std::set<std::pair<protocol::JobId, protocol::WorkerId>> started_;
};

}  // namespace aryl::agent
