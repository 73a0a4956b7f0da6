// The Aryl wire protocol: every message the scheduler, agents, workers, the
// rendezvous store and the command-line clients exchange.
//
// Who sends what to whom (→ request or push, ⇠ reply):
//
//  Agent ↔ scheduler (agent DEALER, routing id = agent id → scheduler ROUTER):
//   1. Agent → AgentRegister {agent id, host, pool, gpu type, slots, the workers it
//      already runs}. Sent on start and again after any reconnect, so a restarted
//      scheduler reconciles from what agents report. ⇠ AgentRegistered (or Error).
//      Registrations and heartbeats are the agent's reports of what it runs,
//      numbered from one counter per agent process (AgentRegister.seq,
//      Heartbeat.seq): the scheduler reads none older than one it has read
//      from the same process (`instance`), so a registration that a later
//      report overtook cannot undo it (a stale list would have workers that
//      run read as gone). A stale registration is answered Error{FailedPrecondition}.
//   2. Agent → Heartbeat {seq, free slots, running workers} every
//      AgentRegistered.heartbeat_interval_seconds, one-way. A scheduler that does
//      not know the agent (it restarted) pushes Error{FailedPrecondition}; the
//      agent then registers again (step 1) without touching its workers. A
//      scheduler that knows it pushes HeartbeatAck {seq, lease}: the agent's
//      lease runs until the send time of the newest acknowledged heartbeat plus
//      `lease_seconds`. An agent whose lease ran out stops its workers
//      (checkpoint first) and registers again; the scheduler starts a job whose
//      rendezvous store was on a lost agent elsewhere only once that agent's
//      lease has surely expired (docs/architecture.md, "Leases and fencing").
//   3. Scheduler → StartWorkers {job, generation, workers to start here, members,
//      argv, env, checkpoint dir, store endpoint}, pushed by routing id. The agent
//      forks the workers and answers with nothing; failures come as WorkerExited.
//   4. Scheduler → NewGeneration {job, generation, full member list, local leavers}
//      to every agent that hosts stayers or leavers of the job. Joiners of the same
//      generation arrive as StartWorkers. The agent relays it (step 12).
//   5. Scheduler → StopWorkers {job, workers (empty = all here), grace, checkpoint
//      first}. The agent sends WorkerCheckpointRequest first when asked, then
//      SIGTERM, then SIGKILL after the grace period.
//   6. Scheduler → WorkerCheckpointRequest {job, reason, deadline}: a preemption
//      notice; the agent relays it to the job's local workers (step 15).
//   7. Agent → WorkerExited {job, worker, exit code or signal, the runtime's
//      outcome (step 18), exec error}, one-way. The agent keeps each exit and
//      sends it again (every few seconds, and in AgentRegister.exited) until the
//      scheduler answers WorkerExitAck, which it sends once the exit is durable:
//      an exit is never lost to a scheduler restart or a full state disk, and
//      handling one twice changes nothing.
//   8. Agent → ResizeReport {job, generation, per-phase timings}, one-way, once
//      per resize (from the rank-0 worker's WorkerResizeReport).
//   9. Agent → JobProgress {job, step, loss, steps/s, remaining work}, one-way,
//      from the rank-0 worker's WorkerProgress, at most a few times per second.
//  Term fencing (steps 1-6). Every scheduler → agent message that grants the
//  lease or changes workers (AgentRegistered, HeartbeatAck, StartWorkers,
//  NewGeneration, StopWorkers, WorkerCheckpointRequest) carries `term`, the
//  sending scheduler's fencing token: the create revision of the etcd leader
//  key it holds (high availability), or a counter in the state file bumped at
//  every start (SQLite). A later leader's term is higher than every earlier
//  one's, so a deposed leader that has not yet noticed is told apart:
//   a. An agent remembers the highest term it has seen, from AgentRegistered
//      and from every command.
//   b. It refuses any of these messages with a lower term, logging a warning
//      that names both terms: a deposed leader can neither start, stop, resize
//      or checkpoint workers, nor renew the agent's lease, nor register it.
//   c. Term 0 means "no term" (a scheduler that stamps none); it is accepted
//      only while the agent has seen no term.
//  A scheduler whose state file was restored from an older copy starts with a
//  lower term than its agents have seen: they refuse it until they restart.
//
//  Client (aryl, aryl-run, an inference cluster manager) ↔ scheduler (DEALER → ROUTER):
//  10. SubmitJob ⇠ SubmitReply{job}; ListJobs ⇠ JobsReply (a page); JobStatus ⇠
//      JobStatusReply; CancelJob ⇠ Ok; ListNodes ⇠ NodesReply; PoolOffer ⇠ Ok;
//      PoolReclaim ⇠ Ok; NodeCommand ⇠ Ok; StatusRequest ⇠ StatusReply; ListQueues ⇠
//      QueuesReply (queues.h, Q1-Q2). Any request may instead be
//      answered with Error{code, message}.
//  11. WatchJob ⇠ Ok, then the scheduler pushes JobEvent {state, size, rank-0
//      output lines} to that client until a JobEvent with final = true. A client
//      re-sends WatchJob after a reconnect.
//
//  Worker (runtime) ↔ agent or a test coordinator (worker DEALER → ROUTER on ipc://):
//  12. Worker → WorkerHello {job, worker, pid, generation} once at start ⇠ the
//      current GenerationAnnounce. The agent pushes every later
//      GenerationAnnounce {job, generation, members in rank order, store endpoint
//      and prefix}; a worker not among the members leaves at the switch step.
//  13. Worker → WorkerResizeReport {phase timings} after each resize, one-way.
//  14. Worker → WorkerProgress {step, loss, rate}, one-way.
//  15. Agent → WorkerCheckpointRequest: checkpoint now (e.g. a preemption notice).
//  16. Worker → WorkerLeave {job, worker, generation, step} when it leaves
//      cleanly (it then exits 0), one-way.
//  18. Worker → WorkerDone {job, worker, generation, step, outcome} just before
//      its program exits ⇠ Ok. Only an outcome of "completed" ends a job as
//      completed; an exit 0 without it (a worker stopped by a signal the runtime
//      turned into a clean stop) is not the end of the job's work.
//
//  Operator inspection (describe job/node, logs through the agents, the event
//  journal, checkpoint reports): see inspect.h, steps 1-8 there.
//
//  Rendezvous store (StoreClient → StoreServer, embedded in an agent, the daemon
//  or a test coordinator; it outlives every worker):
//  17. StoreSet, StoreGet (waits up to timeout_ms for the key), StoreAdd,
//      StoreCompareSet, StoreWait (waits until every key exists), StoreCheck,
//      StoreDeleteKey ⇠ StoreReply, or Error{Timeout | NotFound | ...}.
//
// Encoding: one UTF-8 JSON object per frame, {"v": 1, "type": "<type>", fields...}.
// Decoding is strict and total (see Decode). Unknown fields are rejected, so adding
// a field is a protocol version bump; peers built from one tree always agree.
// Binary values (store values) travel as base64 strings. Non-finite doubles are
// rejected, except fields documented as "NaN allowed", which carry NaN as null.
//
// Thread safety: messages are plain values; Encode and Decode are reentrant.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl::protocol {

inline constexpr int kProtocolVersion = 1;
// Largest frame Decode accepts (and the transport lets through).
inline constexpr std::size_t kMaxFrameBytes = std::size_t{1} << 20;

using JobId = std::uint64_t;    // matches aryl::sched::JobId
using WorkerId = std::int64_t;  // stable across a job's generations; rank is per generation

// Per-field validation rule used by the field lists below. For containers, `non_empty`
// and `max_size` apply to the container and `min`/`max`/`elem_non_empty` to elements.
struct Rule {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool non_empty = false;       // strings, vectors, maps: at least one element/char
  bool elem_non_empty = false;  // vector<string>: every element non-empty
  bool nan_allowed = false;     // double: NaN is legal (carried as JSON null)
};

// Binary data (store values); base64 on the wire.
struct Bytes {
  std::string data{};
  bool operator==(const Bytes&) const = default;
};

// --- Enumerations (strings on the wire) ------------------------------------------

enum class Pool : std::uint8_t { kTraining, kInference };
enum class JobState : std::uint8_t {
  kQueued,
  kStarting,
  kRunning,
  kResizing,
  kCheckpointing,
  kPreempted,
  kCompleted,
  kFailed,
  kCancelled,
};
enum class NodeState : std::uint8_t {
  kAvailable,
  kHeld,
  kLoaned,
  kReclaiming,
  kFailed,
  kDisconnected,
  kDraining,
  kDrained,
};

std::string_view ToString(Pool v);          // "training" | "inference"
std::string_view ToString(JobState v);      // "queued", "running", ...
std::string_view ToString(NodeState v);     // "available", "loaned", ...
std::string_view ToString(Status::Code v);  // Status::CodeName
bool FromString(std::string_view s, Pool* out);
bool FromString(std::string_view s, JobState* out);
bool FromString(std::string_view s, NodeState* out);
bool FromString(std::string_view s, Status::Code* out);
// True for completed, failed and cancelled.
bool IsTerminal(JobState s);

// --- Shared parts ----------------------------------------------------------------

// A worker an agent runs (reconciliation after a scheduler restart, heartbeats).
struct RunningWorker {
  JobId job = 0;
  WorkerId worker = 0;
  std::int64_t generation = 0;
  std::int64_t rank = 0;
  std::int64_t local_slot = 0;
  std::int64_t pid = 1;
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("worker", worker, {.min = 0});
    v("generation", generation, {.min = 0});
    v("rank", rank, {.min = 0});
    v("local_slot", local_slot, {.min = 0});
    v("pid", pid, {.min = 1});
  }
  bool operator==(const RunningWorker&) const = default;
};

// The serving side of an inference server, as its agent manages it
// (serving.h; agent/include/aryl/agent/serving_machine.h): state is one of
// "starting", "ready", "draining", "stopping", "stopped", "failed".
struct ServingStatus {
  std::string state{};
  bool lent = false;          // what the agent was last told (ServingCommand)
  std::string step{};         // failed: the step that failed (start, ready, drain, stop)
  std::string error{};        // failed: why, naming the command or URL
  double warmup_seconds = -1;  // the last start-to-ready time measured here (-1: none yet)
  template <typename V>
  void Visit(V& v) {
    v("state", state, {.non_empty = true});
    v("lent", lent);
    v("step", step);
    v("error", error);
    v("warmup_seconds", warmup_seconds, {.min = -1});
  }
  bool operator==(const ServingStatus&) const = default;
};

// How a worker's program ended, in its own words (WorkerDone, carried on in
// WorkerExited.outcome): "completed" (it finished its work), "stopped" (it
// stopped at a step boundary with a durable checkpoint, e.g. on a stop request
// or SIGTERM, and can resume), "left" (it was not a member of the newest
// generation), "interrupted" (a peer or the store failed; a retry may succeed),
// "failed" (an error a retry will not fix). Empty: no report (a program that
// does not link the runtime, or one that died before it could say).
bool IsWorkerOutcome(std::string_view s);

struct WorkerExited {
  static constexpr std::string_view kType = "worker_exited";
  std::string agent_id{};
  JobId job = 0;
  WorkerId worker = 0;
  std::int64_t generation = 0;
  std::optional<std::int64_t> exit_code{};  // exactly one of exit_code and signal
  std::optional<std::int64_t> signal{};
  std::string outcome{};  // the runtime's WorkerDone outcome; empty: none
  std::optional<std::int64_t> step{};  // the step of that WorkerDone; absent without one
  bool runtime = false;   // the worker spoke the runtime protocol (WorkerHello)
  std::string error{};    // why it could not start (exec error), empty otherwise
  template <typename V>
  void Visit(V& v) {
    v("agent_id", agent_id, {.non_empty = true});
    v("job", job);
    v("worker", worker, {.min = 0});
    v("generation", generation, {.min = 0});
    v("exit_code", exit_code, {.min = 0, .max = 255});
    v("signal", signal, {.min = 1, .max = 128});
    v("outcome", outcome);
    v("step", step, {.min = 0});
    v("runtime", runtime);
    v("error", error);
  }
  Status Validate() const;
  bool operator==(const WorkerExited&) const = default;
};

// One worker to start on an agent.
struct WorkerPlacement {
  WorkerId worker = 0;
  std::int64_t rank = 0;
  std::int64_t local_slot = 0;  // index of the GPU (or CPU slot) on the agent
  template <typename V>
  void Visit(V& v) {
    v("worker", worker, {.min = 0});
    v("rank", rank, {.min = 0});
    v("local_slot", local_slot, {.min = 0});
  }
  bool operator==(const WorkerPlacement&) const = default;
};

// Seconds spent in each phase of one resize (see the runtime's resize protocol).
struct PhaseTimings {
  double detect = 0;
  double agree = 0;
  double rendezvous = 0;
  double communicator = 0;
  double state_transfer = 0;
  double total = 0;  // pause seen by training, first phase start to resume
  template <typename V>
  void Visit(V& v) {
    v("detect", detect, {.min = 0});
    v("agree", agree, {.min = 0});
    v("rendezvous", rendezvous, {.min = 0});
    v("communicator", communicator, {.min = 0});
    v("state_transfer", state_transfer, {.min = 0});
    v("total", total, {.min = 0});
  }
  bool operator==(const PhaseTimings&) const = default;
};

// One row of `aryl jobs`.
struct JobRow {
  JobId job = 0;
  std::string name{};
  JobState state = JobState::kQueued;
  std::int64_t workers = 0;  // current size
  std::int64_t min_workers = 1;
  std::int64_t max_workers = 1;
  std::string gpu_type{};  // empty = any
  std::int64_t generation = 0;
  std::int64_t step = 0;
  double steps_per_second = 0;
  double submit_time = 0;  // seconds since the Unix epoch
  std::int64_t rescales = 0;
  std::string owner{};  // the submitter: its key's name, its login (keyless ipc://), or "local" (--insecure)
  // A queued job without workers: why it waits, as squeue's REASON (a cause
  // word, then the detail: "Capacity: needs 4 workers ..."); empty otherwise.
  std::string pending_reason{};
  std::string queue{};  // with --queues: its queue (queues.h); empty without
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("name", name);
    v("owner", owner);
    v("queue", queue);
    v("pending_reason", pending_reason);
    v("state", state);
    v("workers", workers, {.min = 0});
    v("min_workers", min_workers, {.min = 1});
    v("max_workers", max_workers, {.min = 1});
    v("gpu_type", gpu_type);
    v("generation", generation, {.min = 0});
    v("step", step, {.min = 0});
    v("steps_per_second", steps_per_second, {.min = 0});
    v("submit_time", submit_time, {.min = 0});
    v("rescales", rescales, {.min = 0});
  }
  bool operator==(const JobRow&) const = default;
};

// Where a job's workers run: agent -> worker count.
struct PlacementRow {
  std::string agent_id{};
  std::int64_t workers = 0;
  template <typename V>
  void Visit(V& v) {
    v("agent_id", agent_id, {.non_empty = true});
    v("workers", workers, {.min = 1});
  }
  bool operator==(const PlacementRow&) const = default;
};

// One row of `aryl nodes`.
struct NodeRow {
  std::string agent_id{};
  std::string host{};
  Pool pool = Pool::kTraining;
  NodeState state = NodeState::kAvailable;
  std::string gpu_type{};
  std::int64_t slots = 0;
  std::int64_t used_slots = 0;
  bool connected = false;
  double last_heartbeat_age = 0;  // seconds
  template <typename V>
  void Visit(V& v) {
    v("agent_id", agent_id, {.non_empty = true});
    v("host", host);
    v("pool", pool);
    v("state", state);
    v("gpu_type", gpu_type);
    v("slots", slots, {.min = 0});
    v("used_slots", used_slots, {.min = 0});
    v("connected", connected);
    v("last_heartbeat_age", last_heartbeat_age, {.min = 0});
  }
  bool operator==(const NodeRow&) const = default;
};

// --- Agent ↔ scheduler -------------------------------------------------------------

struct AgentRegister {
  static constexpr std::string_view kType = "agent_register";
  std::string agent_id{};  // also the DEALER routing id
  std::string host{};
  Pool pool = Pool::kTraining;
  std::string gpu_type{};  // "A100", "T4", "cpu", ...
  std::int64_t slots = 1;
  std::vector<RunningWorker> workers{};  // already running (reconciliation)
  std::string store_endpoint{};          // the agent's embedded store; empty = none
  std::vector<WorkerExited> exited{};    // exits the scheduler has not acknowledged yet
  std::string cluster_id{};              // must equal the scheduler's (docs/security.md)
  // Random per agent process: a registration with a new one from an agent the
  // scheduler holds connected means the agent restarted and its workers died.
  std::uint64_t instance = 0;
  // Present when the agent manages its server's serving side (inference
  // agents with --serving-start): its state now (serving.h).
  std::optional<ServingStatus> serving{};
  // The report's number (step 1): from the counter Heartbeat.seq comes from.
  // Absent: unnumbered (an agent of an older version), always read.
  std::optional<std::uint64_t> seq{};
  template <typename V>
  void Visit(V& v) {
    v("agent_id", agent_id, {.non_empty = true});
    v("host", host, {.non_empty = true});
    v("pool", pool);
    v("gpu_type", gpu_type, {.non_empty = true});
    v("slots", slots, {.min = 1, .max = 4096});
    v("workers", workers);
    v("store_endpoint", store_endpoint);
    v("exited", exited);
    v("cluster_id", cluster_id);
    v("instance", instance);
    v("serving", serving);
    v("seq", seq);
  }
  bool operator==(const AgentRegister&) const = default;
};

struct AgentRegistered {
  static constexpr std::string_view kType = "agent_registered";
  std::string agent_id{};
  double heartbeat_interval_seconds = 1.0;
  std::uint64_t scheduler_epoch = 0;  // changes on every scheduler start
  // The cluster's rendezvous-store key (hex): agents sign and check per-job store
  // tokens with it (store.h). Empty: stores are not authenticated.
  std::string store_key{};
  // How long the agent's workers may run without a HeartbeatAck (step 2).
  double lease_seconds = 30;
  std::uint64_t term = 0;  // the sender's fencing token (term fencing, above)
  template <typename V>
  void Visit(V& v) {
    v("agent_id", agent_id, {.non_empty = true});
    v("heartbeat_interval_seconds", heartbeat_interval_seconds, {.min = 0.001, .max = 3600});
    v("scheduler_epoch", scheduler_epoch);
    v("store_key", store_key);
    v("lease_seconds", lease_seconds, {.min = 0.1, .max = 86400});
    v("term", term);
  }
  bool operator==(const AgentRegistered&) const = default;
};

struct Heartbeat {
  static constexpr std::string_view kType = "heartbeat";
  std::string agent_id{};
  std::uint64_t seq = 0;
  std::int64_t free_slots = 0;
  std::vector<RunningWorker> workers{};
  // Bytes free on the file system of the agent's log directory (-1: unknown):
  // workers' output is cut when it fills, so the scheduler says so.
  std::int64_t log_free_bytes = -1;
  template <typename V>
  void Visit(V& v) {
    v("agent_id", agent_id, {.non_empty = true});
    v("seq", seq);
    v("free_slots", free_slots, {.min = 0});
    v("workers", workers);
    v("log_free_bytes", log_free_bytes, {.min = -1});
  }
  bool operator==(const Heartbeat&) const = default;
};

// An agent whose lease ran out asks its workers to checkpoint and stop, and
// SIGKILLs those still running this long after: the scheduler adds it to the
// lease before it starts a lost agent's job elsewhere (step 2).
inline constexpr double kLeaseStopGraceSeconds = 5;

// Scheduler → agent: heartbeat `seq` arrived; the agent's lease is renewed
// from that heartbeat's send time (protocol step 2).
struct HeartbeatAck {
  static constexpr std::string_view kType = "heartbeat_ack";
  std::uint64_t seq = 0;
  double lease_seconds = 30;
  std::uint64_t scheduler_epoch = 0;
  std::uint64_t term = 0;  // the sender's fencing token (term fencing, above)
  template <typename V>
  void Visit(V& v) {
    v("seq", seq);
    v("lease_seconds", lease_seconds, {.min = 0.1, .max = 86400});
    v("scheduler_epoch", scheduler_epoch);
    v("term", term);
  }
  bool operator==(const HeartbeatAck&) const = default;
};

struct StartWorkers {
  static constexpr std::string_view kType = "start_workers";
  JobId job = 0;
  std::int64_t generation = 0;
  std::vector<WorkerPlacement> workers{};  // to start on this agent
  std::vector<WorkerId> members{};         // whole generation, rank order
  std::vector<std::string> argv{};
  std::map<std::string, std::string> env{};
  std::string cwd{};             // empty = the agent's working directory
  std::string checkpoint_dir{};  // empty = no checkpoints
  std::string store_endpoint{};
  std::string store_prefix{};  // keys of this job's rendezvous, e.g. "job/12/"
  // The job's owner (the submitting key's name): an agent running as root
  // with --run-as starts the workers as the local account mapped to it.
  std::optional<std::string> owner{};
  // The owner's uid when the scheduler told local users apart by their uid
  // (keyless ipc://, SO_PEERCRED): a root agent without --run-as starts the
  // workers as that account; an agent that cannot switch accounts refuses
  // another uid's workers.
  std::optional<std::int64_t> owner_uid{};
  // Times the job's worker group was started before this start (torchrun's
  // TORCHELASTIC_RESTART_COUNT); unset = 0.
  std::optional<std::int64_t> restart_count{};
  std::uint64_t term = 0;  // the sender's fencing token (term fencing, above)
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("generation", generation, {.min = 0});
    v("workers", workers, {.non_empty = true});
    v("members", members, {.min = 0, .non_empty = true});
    v("argv", argv, {.non_empty = true});
    v("env", env);
    v("cwd", cwd);
    v("checkpoint_dir", checkpoint_dir);
    v("store_endpoint", store_endpoint, {.non_empty = true});
    v("store_prefix", store_prefix);
    v("owner", owner);
    v("owner_uid", owner_uid, {.min = 0, .max = 4294967295LL});
    v("restart_count", restart_count, {.min = 0});
    v("term", term);
  }
  Status Validate() const;  // argv[0] non-empty, every started worker is a member
  bool operator==(const StartWorkers&) const = default;
};

struct NewGeneration {
  static constexpr std::string_view kType = "new_generation";
  JobId job = 0;
  std::int64_t generation = 1;
  std::vector<WorkerId> members{};  // rank order
  std::vector<WorkerId> leaving{};  // workers on this agent that leave at the switch
  std::string store_endpoint{};
  std::string store_prefix{};
  std::uint64_t term = 0;  // the sender's fencing token (term fencing, above)
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("generation", generation, {.min = 1});
    v("members", members, {.min = 0, .non_empty = true});
    v("leaving", leaving, {.min = 0});
    v("store_endpoint", store_endpoint, {.non_empty = true});
    v("store_prefix", store_prefix);
    v("term", term);
  }
  Status Validate() const;  // no duplicates; leavers are not members
  bool operator==(const NewGeneration&) const = default;
};

struct StopWorkers {
  static constexpr std::string_view kType = "stop_workers";
  JobId job = 0;
  std::vector<WorkerId> workers{};  // empty = every worker of the job on this agent
  double grace_seconds = 10;
  bool checkpoint_first = false;
  std::string reason{};
  std::uint64_t term = 0;  // the sender's fencing token (term fencing, above)
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("workers", workers, {.min = 0});
    v("grace_seconds", grace_seconds, {.min = 0, .max = 86400});
    v("checkpoint_first", checkpoint_first);
    v("reason", reason);
    v("term", term);
  }
  bool operator==(const StopWorkers&) const = default;
};

// Scheduler → agent: the exit of (job, worker) is durable in the scheduler's
// state; the agent stops re-sending it (protocol step 7).
struct WorkerExitAck {
  static constexpr std::string_view kType = "worker_exit_ack";
  JobId job = 0;
  WorkerId worker = 0;
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("worker", worker, {.min = 0});
  }
  bool operator==(const WorkerExitAck&) const = default;
};

struct ResizeReport {
  static constexpr std::string_view kType = "resize_report";
  JobId job = 0;
  std::int64_t generation = 1;
  std::int64_t from_workers = 0;
  std::int64_t to_workers = 1;
  bool planned = true;  // false: a fault (a worker died)
  PhaseTimings phases{};
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("generation", generation, {.min = 1});
    v("from_workers", from_workers, {.min = 0});
    v("to_workers", to_workers, {.min = 1});
    v("planned", planned);
    v("phases", phases);
  }
  bool operator==(const ResizeReport&) const = default;
};

// A robust summary of a job's steps at one size, measured by rank 0's runtime
// (protocol steps 9 and 14). Each summary covers steps not covered by an
// earlier one (`seq` counts them per worker), so the scheduler adds each once.
// Warm-up steps after a start or resize are not in any summary.
struct StepStats {
  std::int64_t seq = 0;          // 1, 2, ... per worker process
  std::int64_t generation = 0;   // the store's generation the steps ran in
  std::int64_t workers = 1;      // world size during these steps
  std::int64_t count = 1;        // steps summarised
  double median_s = 0;           // median wall time of one step (s)
  double spread_s = 0;           // 1.4826 x median absolute deviation (s)
  double sync_median_s = 0;      // median time inside the gradient all-reduce (s); 0 = unknown
  double local_batch = 0;        // samples per worker per step; 0 = unknown
  template <typename V>
  void Visit(V& v) {
    v("seq", seq, {.min = 0});
    v("generation", generation, {.min = 0});
    v("workers", workers, {.min = 1, .max = 65536});
    v("count", count, {.min = 1, .max = 1e9});
    v("median_s", median_s, {.min = 1e-9, .max = 1e6});
    v("spread_s", spread_s, {.min = 0, .max = 1e6});
    v("sync_median_s", sync_median_s, {.min = 0, .max = 1e6});
    v("local_batch", local_batch, {.min = 0, .max = 1e12});
  }
  bool operator==(const StepStats&) const = default;
};

struct JobProgress {
  static constexpr std::string_view kType = "job_progress";
  JobId job = 0;
  std::int64_t generation = 0;
  std::int64_t step = 0;
  double loss = 0;  // NaN allowed (a diverged run)
  double steps_per_second = 0;
  double remaining_work = 0;  // steps left, estimated by the job
  // True when the program links the runtime (its WorkerHello or WorkerProgress
  // reached the agent); the agent sends one as soon as the first hello arrives.
  std::optional<bool> runtime{};
  // Rank 0's newest step summary (StepStats), relayed once; absent for
  // programs that report progress only by printing step=N lines.
  std::optional<StepStats> stats{};
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("generation", generation, {.min = 0});
    v("step", step, {.min = 0});
    v("loss", loss, {.nan_allowed = true});
    v("steps_per_second", steps_per_second, {.min = 0});
    v("remaining_work", remaining_work, {.min = 0});
    v("runtime", runtime);
    v("stats", stats);
  }
  bool operator==(const JobProgress&) const = default;
};

// --- Client ↔ scheduler ------------------------------------------------------------

inline constexpr std::size_t kMaxJobName = 128;  // bytes of SubmitJob.name

struct SubmitJob {
  static constexpr std::string_view kType = "submit_job";
  std::string name{};                         // empty = the scheduler derives one from argv[0]
  std::optional<std::int64_t> workers{};      // fixed size, or
  std::optional<std::int64_t> min_workers{};  // elastic: both min and max
  std::optional<std::int64_t> max_workers{};
  std::string gpu_type{};  // empty = any
  std::vector<std::string> argv{};
  std::map<std::string, std::string> env{};
  std::string checkpoint_dir{};
  std::string cwd{};
  std::string model{};    // throughput catalog key; empty = unknown
  double total_work = 0;  // steps; 0 = unknown
  // Idempotency: a SubmitJob carrying the token of an earlier one is answered with
  // that job instead of creating a second (a client retrying after a timeout).
  std::optional<std::string> client_token{};
  // Set by the scheduler from the submitting key's name; what a client sends is
  // replaced. Optional so that submissions stored before owners existed decode.
  std::optional<std::string> owner{};
  // Set by the scheduler to the submitter's uid when it tells local users apart
  // by uid (keyless ipc://); cleared otherwise. What a client sends is replaced.
  std::optional<std::int64_t> owner_uid{};
  // How the job changes size: "inplace" (it links the runtime) or "restart"
  // (torchrun style: all workers stopped and started again at the new size).
  // Unset: inplace once the runtime's first report arrives, restart until then.
  std::optional<std::string> elastic{};
  // torchrun --max-restarts: how often a failed worker group is started again
  // before the job fails. Unset: 0 for restart jobs; in-place jobs replace up
  // to the scheduler's --max-worker-failures lost workers.
  std::optional<std::int64_t> max_restarts{};
  // Seconds from a stop's notice (SIGTERM and the ARYL_STOP_NOTICE file) to
  // SIGKILL for this job's workers. Unset: the scheduler's --stop-grace; at
  // most its --max-stop-grace. A reclaim's deadline shortens it.
  std::optional<double> stop_grace{};
  // Its queue and priority class there (queues.h, Q1). Absent: the default
  // queue, "normal".
  std::optional<std::string> queue{};
  std::optional<std::string> priority{};
  template <typename V>
  void Visit(V& v) {
    v("name", name);
    v("owner", owner);
    v("owner_uid", owner_uid, {.min = 0, .max = 4294967295LL});
    v("workers", workers, {.min = 1, .max = 65536});
    v("min_workers", min_workers, {.min = 1, .max = 65536});
    v("max_workers", max_workers, {.min = 1, .max = 65536});
    v("gpu_type", gpu_type);
    v("argv", argv, {.non_empty = true});
    v("env", env);
    v("checkpoint_dir", checkpoint_dir);
    v("cwd", cwd);
    v("model", model);
    v("total_work", total_work, {.min = 0});
    v("client_token", client_token);
    v("elastic", elastic);
    v("max_restarts", max_restarts, {.min = 0, .max = 1000000});
    v("stop_grace", stop_grace, {.min = 0, .max = 86400});
    v("queue", queue);
    v("priority", priority);
  }
  // Exactly one of {workers} and {min_workers, max_workers} with min <= max;
  // argv[0] non-empty; env names non-empty without '='; client_token, when
  // present, 1 to 128 characters; name at most kMaxJobName printable characters;
  // elastic, when present, "inplace" or "restart".
  Status Validate() const;
  bool operator==(const SubmitJob&) const = default;
};

struct SubmitReply {
  static constexpr std::string_view kType = "submit_reply";
  JobId job = 0;
  std::string name{};
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("name", name);
  }
  bool operator==(const SubmitReply&) const = default;
};

// Listings come in pages (a reply stays far below kMaxFrameBytes): jobs with
// id > after, at most `limit` of them (0: kDefaultJobsPage); JobsReply.more
// says whether a next page starts after its last job.
inline constexpr std::int64_t kDefaultJobsPage = 500;
inline constexpr std::int64_t kMaxJobsPage = 2000;
struct ListJobs {
  static constexpr std::string_view kType = "list_jobs";
  bool include_finished = false;
  JobId after = 0;
  std::int64_t limit = 0;
  template <typename V>
  void Visit(V& v) {
    v("include_finished", include_finished);
    v("after", after);
    v("limit", limit, {.min = 0, .max = double(kMaxJobsPage)});
  }
  bool operator==(const ListJobs&) const = default;
};

struct JobsReply {
  static constexpr std::string_view kType = "jobs_reply";
  std::vector<JobRow> jobs{};
  bool more = false;  // more jobs after the last one here
  template <typename V>
  void Visit(V& v) {
    v("jobs", jobs);
    v("more", more);
  }
  bool operator==(const JobsReply&) const = default;
};

struct JobStatus {
  static constexpr std::string_view kType = "job_status";
  JobId job = 0;
  template <typename V>
  void Visit(V& v) {
    v("job", job);
  }
  bool operator==(const JobStatus&) const = default;
};

struct JobStatusReply {
  static constexpr std::string_view kType = "job_status_reply";
  JobRow row{};
  std::vector<PlacementRow> placement{};
  std::vector<std::string> argv{};
  std::optional<std::int64_t> exit_code{};  // once terminal
  std::string message{};                    // last state change's reason
  std::int64_t rank0_worker = -1;           // the worker that is rank 0 now; -1: none
  std::vector<std::string> env_names{};     // the job's environment, names only
  // A queued job without workers: why it waits (row.pending_reason, kept
  // here for older readers); empty otherwise.
  std::string pending_reason{};
  template <typename V>
  void Visit(V& v) {
    v("row", row);
    v("placement", placement);
    v("argv", argv);
    v("exit_code", exit_code, {.min = 0, .max = 255});
    v("message", message);
    v("rank0_worker", rank0_worker, {.min = -1});
    v("env_names", env_names);
    v("pending_reason", pending_reason);
  }
  bool operator==(const JobStatusReply&) const = default;
};

struct CancelJob {
  static constexpr std::string_view kType = "cancel_job";
  JobId job = 0;
  template <typename V>
  void Visit(V& v) {
    v("job", job);
  }
  bool operator==(const CancelJob&) const = default;
};

struct ListNodes {
  static constexpr std::string_view kType = "list_nodes";
  template <typename V>
  void Visit(V&) {}
  bool operator==(const ListNodes&) const = default;
};

struct NodesReply {
  static constexpr std::string_view kType = "nodes_reply";
  std::vector<NodeRow> nodes{};
  template <typename V>
  void Visit(V& v) {
    v("nodes", nodes);
  }
  bool operator==(const NodesReply&) const = default;
};

// Operators take a node out of service or back: "drain" (no new workers; the
// jobs on it run to their end), "drain-now" (no new workers, and its workers
// are checkpointed and moved off at once, as on a preemption notice), "resume"
// (schedulable again) or "remove" (forget a node that is not connected: it no
// longer counts toward capacity or shows in listings; it is known again if its
// agent registers) ⇠ Ok.
struct NodeCommand {
  static constexpr std::string_view kType = "node_command";
  std::string node{};
  std::string action{};
  template <typename V>
  void Visit(V& v) {
    v("node", node, {.non_empty = true});
    v("action", action, {.non_empty = true});
  }
  Status Validate() const;
  bool operator==(const NodeCommand&) const = default;
};

// The inference side lends servers (agent ids of inference-pool agents).
struct PoolOffer {
  static constexpr std::string_view kType = "pool_offer";
  std::vector<std::string> servers{};
  template <typename V>
  void Visit(V& v) {
    v("servers", servers, {.non_empty = true, .elem_non_empty = true});
  }
  bool operator==(const PoolOffer&) const = default;
};

// The inference side wants `count` loaned servers (or exactly `servers`) back
// within deadline_seconds.
struct PoolReclaim {
  static constexpr std::string_view kType = "pool_reclaim";
  std::int64_t count = 0;
  std::vector<std::string> servers{};
  double deadline_seconds = 120;
  template <typename V>
  void Visit(V& v) {
    v("count", count, {.min = 0, .max = 1 << 20});
    v("servers", servers, {.elem_non_empty = true});
    v("deadline_seconds", deadline_seconds, {.min = 0, .max = 86400});
  }
  Status Validate() const;  // count >= 1 or servers non-empty, not both
  bool operator==(const PoolReclaim&) const = default;
};

struct WatchJob {
  static constexpr std::string_view kType = "watch_job";
  JobId job = 0;
  bool output = true;  // also stream rank-0 output lines
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("output", output);
  }
  bool operator==(const WatchJob&) const = default;
};

// One worker's end, as a job's failure report names it: which worker, its rank
// in its generation, its node, and how it ended (exit_code, or signal, or the
// error that kept it from starting).
struct WorkerEnd {
  WorkerId worker = 0;
  std::int64_t rank = 0;
  std::string node{};
  std::optional<std::int64_t> exit_code{};
  std::optional<std::int64_t> signal{};
  std::string error{};
  template <typename V>
  void Visit(V& v) {
    v("worker", worker, {.min = 0});
    v("rank", rank, {.min = 0});
    v("node", node);
    v("exit_code", exit_code, {.min = 0, .max = 255});
    v("signal", signal, {.min = 1, .max = 128});
    v("error", error);
  }
  // "worker 4 (rank 1) on gpu-7", and how it ended: "exited with 3",
  // "killed by signal 9", "could not start: <error>".
  std::string Who() const;
  std::string How() const;
  bool operator==(const WorkerEnd&) const = default;
};

struct JobEvent {
  static constexpr std::string_view kType = "job_event";
  JobId job = 0;
  double time = 0;  // seconds since the Unix epoch
  JobState state = JobState::kQueued;
  std::int64_t workers = 0;
  std::vector<std::string> output{};  // new rank-0 output lines, oldest first
  std::string message{};              // why the state changed
  std::optional<std::int64_t> exit_code{};
  bool final = false;  // no more events for this job
  std::int64_t rank0_worker = -1;  // the worker that is rank 0 now (its log is the job's); -1: none
  // Final event of a job that failed because a worker did: that worker (its
  // stderr says why). Empty for any other end.
  std::optional<WorkerEnd> failure{};
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("time", time, {.min = 0});
    v("state", state);
    v("workers", workers, {.min = 0});
    v("output", output);
    v("message", message);
    v("exit_code", exit_code, {.min = 0, .max = 255});
    v("final", final);
    v("rank0_worker", rank0_worker, {.min = -1});
    v("failure", failure);
  }
  bool operator==(const JobEvent&) const = default;
};

struct StatusRequest {
  static constexpr std::string_view kType = "status";
  template <typename V>
  void Visit(V&) {}
  bool operator==(const StatusRequest&) const = default;
};

// Cluster summary (pools, loans, jobs, counters); a JSON object whose shape the
// scheduler daemon documents.
struct StatusReply {
  static constexpr std::string_view kType = "status_reply";
  nlohmann::json summary = nlohmann::json::object();
  template <typename V>
  void Visit(V& v) {
    v("summary", summary);
  }
  bool operator==(const StatusReply&) const = default;
};

struct Ok {
  static constexpr std::string_view kType = "ok";
  std::string message{};
  template <typename V>
  void Visit(V& v) {
    v("message", message);
  }
  bool operator==(const Ok&) const = default;
};

// A failed request. `code` is never kOk.
struct Error {
  static constexpr std::string_view kType = "error";
  Status::Code code = Status::Code::kInternal;
  std::string message{};
  template <typename V>
  void Visit(V& v) {
    v("code", code);
    v("message", message);
  }
  Status Validate() const;
  static Error FromStatus(const Status& s);
  Status ToStatus() const;
  bool operator==(const Error&) const = default;
};

// --- Worker ↔ agent ----------------------------------------------------------------

struct WorkerHello {
  static constexpr std::string_view kType = "worker_hello";
  JobId job = 0;
  WorkerId worker = 0;
  std::int64_t pid = 1;
  std::int64_t generation = 0;  // the generation it was started for
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("worker", worker, {.min = 0});
    v("pid", pid, {.min = 1});
    v("generation", generation, {.min = 0});
  }
  bool operator==(const WorkerHello&) const = default;
};

struct GenerationAnnounce {
  static constexpr std::string_view kType = "generation_announce";
  JobId job = 0;
  std::int64_t generation = 0;
  std::vector<WorkerId> members{};  // rank order: members[r] has rank r
  std::string store_endpoint{};
  std::string store_prefix{};
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("generation", generation, {.min = 0});
    v("members", members, {.min = 0, .non_empty = true});
    v("store_endpoint", store_endpoint, {.non_empty = true});
    v("store_prefix", store_prefix);
  }
  Status Validate() const;  // no duplicate members
  bool operator==(const GenerationAnnounce&) const = default;
};

struct WorkerResizeReport {
  static constexpr std::string_view kType = "worker_resize_report";
  JobId job = 0;
  WorkerId worker = 0;
  std::int64_t generation = 1;
  std::int64_t from_workers = 0;
  std::int64_t to_workers = 1;
  bool planned = true;
  PhaseTimings phases{};
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("worker", worker, {.min = 0});
    v("generation", generation, {.min = 1});
    v("from_workers", from_workers, {.min = 0});
    v("to_workers", to_workers, {.min = 1});
    v("planned", planned);
    v("phases", phases);
  }
  bool operator==(const WorkerResizeReport&) const = default;
};

struct WorkerProgress {
  static constexpr std::string_view kType = "worker_progress";
  JobId job = 0;
  WorkerId worker = 0;
  std::int64_t generation = 0;
  std::int64_t step = 0;
  double loss = 0;  // NaN allowed
  double steps_per_second = 0;
  double remaining_work = 0;  // steps left by the program's own count (0 = unknown)
  std::optional<StepStats> stats{};  // a new summary since the last report
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("worker", worker, {.min = 0});
    v("generation", generation, {.min = 0});
    v("step", step, {.min = 0});
    v("loss", loss, {.nan_allowed = true});
    v("steps_per_second", steps_per_second, {.min = 0});
    v("remaining_work", remaining_work, {.min = 0});
    v("stats", stats);
  }
  bool operator==(const WorkerProgress&) const = default;
};

// Checkpoint now; scheduler → agent (a preemption notice) and agent → worker.
struct WorkerCheckpointRequest {
  static constexpr std::string_view kType = "worker_checkpoint_request";
  JobId job = 0;
  std::string reason{};
  double deadline_seconds = 0;  // 0 = no deadline
  bool stop_after = false;      // exit 0 once the checkpoint is durable
  std::uint64_t term = 0;  // scheduler → agent: the sender's fencing token; the runtime ignores it
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("reason", reason);
    v("deadline_seconds", deadline_seconds, {.min = 0, .max = 86400});
    v("stop_after", stop_after);
    v("term", term);
  }
  bool operator==(const WorkerCheckpointRequest&) const = default;
};

struct WorkerLeave {
  static constexpr std::string_view kType = "worker_leave";
  JobId job = 0;
  WorkerId worker = 0;
  std::int64_t generation = 0;  // the generation it left (it is not a member)
  std::int64_t step = 0;        // the last step it completed
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("worker", worker, {.min = 0});
    v("generation", generation, {.min = 0});
    v("step", step, {.min = 0});
  }
  bool operator==(const WorkerLeave&) const = default;
};

// The runtime's last word before its program exits (protocol step 18): how it
// ended (see WorkerExited.outcome) and the last step it completed. Answered with
// Ok once the agent has recorded it, so the report cannot race the exit.
struct WorkerDone {
  static constexpr std::string_view kType = "worker_done";
  JobId job = 0;
  WorkerId worker = 0;
  std::int64_t generation = 0;
  std::int64_t step = 0;
  std::string outcome{};  // completed | stopped | left | interrupted | failed
  std::string message{};  // the runtime's status text, empty when ok
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("worker", worker, {.min = 0});
    v("generation", generation, {.min = 0});
    v("step", step, {.min = 0});
    v("outcome", outcome, {.non_empty = true});
    v("message", message);
  }
  Status Validate() const;
  bool operator==(const WorkerDone&) const = default;
};

// --- Rendezvous store ----------------------------------------------------------------

struct StoreSet {
  static constexpr std::string_view kType = "store_set";
  std::string key{};
  Bytes value{};
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("key", key, {.non_empty = true});
    v("value", value);
    v("token", token);
  }
  bool operator==(const StoreSet&) const = default;
};

// Waits up to timeout_ms for the key to exist (0 = answer at once: NotFound).
struct StoreGet {
  static constexpr std::string_view kType = "store_get";
  std::string key{};
  std::int64_t timeout_ms = 0;
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("key", key, {.non_empty = true});
    v("timeout_ms", timeout_ms, {.min = 0, .max = 86400000});
    v("token", token);
  }
  bool operator==(const StoreGet&) const = default;
};

// Adds delta to the integer stored at key (missing = 0); replies the new value.
struct StoreAdd {
  static constexpr std::string_view kType = "store_add";
  std::string key{};
  std::int64_t delta = 0;
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("key", key, {.non_empty = true});
    v("delta", delta);
    v("token", token);
  }
  bool operator==(const StoreAdd&) const = default;
};

// Sets key to desired when its value equals expected (or it is missing and expected
// is empty); replies the value now stored.
struct StoreCompareSet {
  static constexpr std::string_view kType = "store_compare_set";
  std::string key{};
  Bytes expected{};
  Bytes desired{};
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("key", key, {.non_empty = true});
    v("expected", expected);
    v("desired", desired);
    v("token", token);
  }
  bool operator==(const StoreCompareSet&) const = default;
};

// Waits until every key exists; Error{Timeout} after timeout_ms.
struct StoreWait {
  static constexpr std::string_view kType = "store_wait";
  std::vector<std::string> keys{};
  std::int64_t timeout_ms = 0;
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("keys", keys, {.non_empty = true, .elem_non_empty = true});
    v("timeout_ms", timeout_ms, {.min = 0, .max = 86400000});
    v("token", token);
  }
  bool operator==(const StoreWait&) const = default;
};

// Replies flag = whether every key exists, without waiting.
struct StoreCheck {
  static constexpr std::string_view kType = "store_check";
  std::vector<std::string> keys{};
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("keys", keys, {.non_empty = true, .elem_non_empty = true});
    v("token", token);
  }
  bool operator==(const StoreCheck&) const = default;
};

// Replies flag = whether the key existed.
struct StoreDeleteKey {
  static constexpr std::string_view kType = "store_delete_key";
  std::string key{};
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("key", key, {.non_empty = true});
    v("token", token);
  }
  bool operator==(const StoreDeleteKey&) const = default;
};

// The answer to every store request: `value` for get/compare_set, `number` for add,
// `flag` for check/delete_key; set and wait leave all three empty.
struct StoreReply {
  static constexpr std::string_view kType = "store_reply";
  std::optional<Bytes> value{};
  std::optional<std::int64_t> number{};
  std::optional<bool> flag{};
  template <typename V>
  void Visit(V& v) {
    v("value", value);
    v("number", number);
    v("flag", flag);
  }
  bool operator==(const StoreReply&) const = default;
};

// --- Operator inspection (describe, logs, events, checkpoints) --------------------
}  // namespace aryl::protocol
#define ARYL_PROTOCOL_MESSAGES_H_PARTS
#include "aryl/protocol/inspect.h"
#include "aryl/protocol/serving.h"
#include "aryl/protocol/queues.h"
#undef ARYL_PROTOCOL_MESSAGES_H_PARTS
namespace aryl::protocol {

// --- The message sum type --------------------------------------------------------

// X(Type) for every message, in a fixed order (the variant's index order).
// clang-format off
#define ARYL_PROTOCOL_MESSAGES(X)                                                          \
  X(AgentRegister) X(AgentRegistered) X(Heartbeat) X(StartWorkers) X(NewGeneration)        \
  X(StopWorkers) X(WorkerExited) X(WorkerExitAck) X(ResizeReport) X(JobProgress)           \
  X(HeartbeatAck)                                                                          \
  X(SubmitJob) X(SubmitReply) X(ListJobs) X(JobsReply) X(JobStatus) X(JobStatusReply)      \
  X(CancelJob) X(ListNodes) X(NodesReply) X(NodeCommand) X(PoolOffer) X(PoolReclaim)       \
  X(WatchJob)                                                                              \
  X(JobEvent) X(StatusRequest) X(StatusReply) X(Ok) X(Error)                               \
  X(WorkerHello) X(GenerationAnnounce) X(WorkerResizeReport) X(WorkerProgress)             \
  X(WorkerCheckpointRequest) X(WorkerLeave) X(WorkerDone)                                  \
  X(StoreSet) X(StoreGet) X(StoreAdd) X(StoreCompareSet) X(StoreWait) X(StoreCheck)        \
  X(StoreDeleteKey) X(StoreReply)                                                         \
  ARYL_PROTOCOL_INSPECT_MESSAGES(X)                                                        \
  ARYL_PROTOCOL_SERVING_MESSAGES(X)                                                        \
  ARYL_PROTOCOL_QUEUES_MESSAGES(X)
// clang-format on

#define ARYL_PROTOCOL_COMMA_TYPE_(T) , T
namespace internal {
template <typename... Ts>
struct TypeList {};
template <typename L>
struct VariantOfTail;
template <typename F, typename... Ts>
struct VariantOfTail<TypeList<F, Ts...>> {
  using type = std::variant<Ts...>;
};
}  // namespace internal
#define ARYL_PROTOCOL_COMMA_TYPE_(T) , T
// Every message type; the index order is the list's order.
using Message = internal::VariantOfTail<
    internal::TypeList<void ARYL_PROTOCOL_MESSAGES(ARYL_PROTOCOL_COMMA_TYPE_)>>::type;
#undef ARYL_PROTOCOL_COMMA_TYPE_

// --- Encode / Decode ------------------------------------------------------------------

// One JSON frame. Never throws; invalid UTF-8 in strings is replaced by U+FFFD.
#define ARYL_PROTOCOL_DECLARE_ENCODE_(T) std::string Encode(const T& msg);
ARYL_PROTOCOL_MESSAGES(ARYL_PROTOCOL_DECLARE_ENCODE_)
#undef ARYL_PROTOCOL_DECLARE_ENCODE_
std::string Encode(const Message& msg);

// The frame's JSON object (e.g. for `aryl ... --json`).
nlohmann::json ToJson(const Message& msg);

// Strict, total decoding. Fails with InvalidArgument naming the problem and the field
// ("start_workers: field 'workers[1].rank': expected integer >= 0, got -3") for: an
// empty frame, a frame over kMaxFrameBytes, invalid JSON, a non-object, a missing or
// unsupported "v", a missing or unknown "type", a missing field, a field of the wrong
// type, a value out of range, an unknown field, a message-level inconsistency.
// Never throws.
Result<Message> Decode(std::string_view frame);

// The message's "type" string ("agent_register", ...).
std::string_view TypeName(const Message& msg);
// Every message type string, in variant order.
std::vector<std::string_view> AllTypeNames();

// Decode that also requires a given type; an Error message decodes to its Status, so
// `DecodeAs<StoreReply>(reply)` turns a remote failure into the caller's error.
template <typename T>
Result<T> DecodeAs(std::string_view frame);
template <typename T>
Result<T> As(Message msg);

template <typename T>
Result<T> As(Message msg) {
  if (auto* v = std::get_if<T>(&msg)) return std::move(*v);
  if constexpr (!std::is_same_v<T, Error>) {
    if (auto* e = std::get_if<Error>(&msg)) return e->ToStatus();
  }
  return Status::InvalidArgument("expected a '" + std::string(T::kType) + "' message, got '" +
                                 std::string(TypeName(msg)) + "'");
}

template <typename T>
Result<T> DecodeAs(std::string_view frame) {
  ARYL_ASSIGN_OR_RETURN(Message msg, Decode(frame));
  return As<T>(std::move(msg));
}

}  // namespace aryl::protocol
