// The scheduling core's data model: servers, jobs, events and plans.
//
// This header is the contract between the pure scheduling core (scheduler/core),
// the trace-driven simulator (scheduler/sim) and the live daemon (scheduler/daemon).
// Everything here is a plain value: no sockets, no threads, no clock. Time arrives
// with each event as seconds (virtual time in the simulator, wall time in the
// daemon). Drivers depend on this header, scheduler.h (Handle), state.h (read
// the ClusterState) and throughput.h (build the catalog); see docs/scheduler.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace aryl::sched {

using JobId = std::uint64_t;
using ServerId = std::uint32_t;
using Seconds = double;

// --- Servers -------------------------------------------------------------------

enum class Pool : std::uint8_t { kTraining, kInference };

struct ServerSpec {
  ServerId id = 0;
  std::string name;      // human name ("train-03"); unique
  Pool pool = Pool::kTraining;
  std::string gpu_type;  // "A100", "T4", "cpu", ...
  int gpus = 0;          // > 0
};

// Who may place training workers on a server right now.
enum class ServerState : std::uint8_t {
  kAvailable,  // training server, usable by training
  kHeld,       // inference server held by inference (not usable by training)
  kLoaned,     // inference server loaned to training
  kFailed,     // failed; its workers are gone until it recovers
};

// --- Jobs ----------------------------------------------------------------------

enum class JobKind : std::uint8_t { kInelastic, kElastic };

// How an elastic job changes size, which sets what a rescale costs it
// (SchedulerConfig::RescalePause):
//   kInPlace  the program links the runtime: stayers keep running and the state
//             moves to joiners (rescale_pause);
//   kRestart  torchrun style: every worker is stopped (SIGTERM, grace period) and
//             all are started again at the new size, resuming from the program's
//             own checkpoint (restart_pause).
enum class Rescale : std::uint8_t { kInPlace, kRestart };

// Which worker counts an elastic job may run at, inside [min, max].
struct Granularity {
  enum class Kind : std::uint8_t { kAny, kPowerOfTwo, kMultiple } kind = Kind::kAny;
  int multiple = 1;  // for kMultiple: w % multiple == 0
  bool Allows(int w) const {
    if (w <= 0) return false;
    switch (kind) {
      case Kind::kAny: return true;
      case Kind::kPowerOfTwo: return (w & (w - 1)) == 0;
      case Kind::kMultiple: return multiple > 0 && w % multiple == 0;
    }
    return false;
  }
};

struct JobSpec {
  JobId id = 0;
  std::string name;                    // trace id or user-given name
  Seconds submit_time = 0;
  JobKind kind = JobKind::kInelastic;
  int min_workers = 1;                 // inelastic: min == max == n
  int max_workers = 1;
  // The size the user asked for: what policies without elasticity (baseline,
  // loan-only, tiresias) run an elastic job at. 0 = max_workers. Ignored for
  // inelastic jobs (they always run at min_workers == max_workers).
  int requested_workers = 0;
  Granularity granularity;
  std::vector<std::string> gpu_types;  // allowed GPU types; empty = any
  std::string model;                   // key into the ThroughputCatalog
  double total_work = 0;               // iterations, > 0
  // Bytes a checkpoint of the job writes (weights and optimizer state); sets
  // how long a checkpoint on a reclaim's notice takes (SchedulerConfig::
  // CheckpointSeconds). 0 = unknown: only the fixed part counts.
  double state_bytes = 0;
  Rescale rescale = Rescale::kInPlace;
  // Teams (queues.h): the queue the job is charged to ("" = the default
  // queue) and its priority class there (kPriorityLow/Normal/High). Ignored
  // without SchedulerConfig::queues.
  std::string queue;
  int priority = 1;
};

// GPUs per server a job holds: server -> worker count on it.
using Placement = std::map<ServerId, int>;

// --- Events (inputs) -------------------------------------------------------------

struct JobSubmitted { JobSpec spec; };
// The job completed (the simulator sends it at ClusterState::EstimatedFinishTime).
struct JobFinished { JobId job = 0; };
// The job is withdrawn; the driver stops its workers itself (no action is emitted).
struct JobCancelled { JobId job = 0; };
// Progress report from the driver: the job's remaining work now (iterations).
// Overrides the core's own estimate (see state.h, "Progress").
struct JobProgress { JobId job = 0; double remaining_work = 0; };
// The driver learned how the job rescales (the daemon: a job submitted without
// saying links the runtime once its first report arrives); later rescales cost
// that kind's pause (SchedulerConfig::RescalePause).
struct JobRescaleKnown { JobId job = 0; Rescale rescale = Rescale::kInPlace; };
// The driver measured how long the job's last resize paused it (the daemon:
// the runtime's ResizeReport total, or a restart's stop to its first step).
// Later voluntary resizes of the job weigh this pause instead of
// SchedulerConfig::RescalePause (resize_rule.h); a JobRescaleKnown that
// changes the job's kind forgets it. pause >= 0 and finite.
struct JobResizeMeasured { JobId job = 0; Seconds pause = 0; };
struct ServersLoaned { std::vector<ServerId> servers; };
// The inference side wants servers back: `count` of any loaned servers, or exactly
// the named ones (when `servers` is non-empty), returned by `deadline`.
// The core meets every reclaim by its deadline (never refused, never late): in
// the plan that answers it, or, for a server whose jobs are left to finish
// before the deadline (SchedulerConfig::reclaim_lets_jobs_finish), in the plan
// of the event that empties it or of the Tick at Scheduler::NextWakeup. More
// servers than are loaned (and not already being reclaimed), or a named server
// that is not, is an error and changes nothing.
struct Reclaim { int count = 0; std::vector<ServerId> servers; Seconds deadline = 0; };
// A server out of service (its agent lost, or an operator's drain --now): its
// jobs shrink off it or go back to the queue. `cause` begins those actions'
// reasons ("server failed: preempt", "drained (--now): shrink").
struct ServerFailed { ServerId server = 0; std::string cause = "server failed"; };
struct ServerRecovered { ServerId server = 0; };
// An operator's drain that lets running jobs finish (Slurm's DRAIN, kubectl's
// cordon): while `cordoned`, no new workers go to the server; the jobs there
// keep their placement (they may shrink, not grow or move) until they end.
// `cordoned = false` lifts it. Idempotent.
struct ServerCordoned { ServerId server = 0; bool cordoned = true; };
struct Tick {};

using EventBody = std::variant<JobSubmitted, JobFinished, JobCancelled, JobProgress,
                               ServersLoaned, Reclaim, ServerFailed, ServerRecovered, Tick,
                               JobRescaleKnown, ServerCordoned, JobResizeMeasured>;

struct Event {
  Seconds time = 0;
  EventBody body;
};

// --- Plans (outputs) -------------------------------------------------------------
//
// Ordering contract: within a plan, every action fits the cluster as left by
// the actions before it (shrinks and preemptions come before the starts and
// grows that use the GPUs they free; a kReturnServer comes after the actions
// that empty that server). A driver that executes actions in order therefore
// never double-books a GPU.

enum class ActionType : std::uint8_t {
  kStart,         // start `job` on `placement`
  kResize,        // change `job` to `placement` (a rescale; loses no work; costs
                  // SchedulerConfig::RescalePause: in place, stayers keep running;
                  // a kRestart job is stopped and started again at the new size)
  kPreempt,       // stop `job`; it loses the work since its last checkpoint and goes
                  // back to the queue keeping its place (submit time); the next start
                  // costs SchedulerConfig::restart_pause. With Action::suspend the job
                  // saves a checkpoint as it stops: no work is lost and the next
                  // start costs SchedulerConfig::resume_pause instead
  kReturnServer,  // give `server` back to inference (it must be empty of workers)
};

struct Action {
  ActionType type = ActionType::kStart;
  JobId job = 0;          // kStart, kResize, kPreempt
  Placement placement;    // kStart, kResize
  ServerId server = 0;    // kReturnServer
  bool suspend = false;   // kPreempt: checkpoint on stop, no work lost (see kPreempt)
  std::string reason;     // why, for logs and replay ("sjf admit", "reclaim: shrink", ...)
};

// The answer to one event. The driver executes the actions in order; the core
// has already applied them to its state through ClusterState::Apply.
struct Plan {
  std::vector<Action> actions;
  bool empty() const { return actions.empty(); }
};

}  // namespace aryl::sched
