// The protocol's shared vocabulary: ids, the field rule and binary value
// types every message's Visit uses, the enumerations carried as strings, and
// the rows several messages share (running workers, exits, placements, job and
// node rows).
// Part of messages.h (which includes this file before its message list);
// include messages.h.
#pragma once

#ifndef ARYL_PROTOCOL_MESSAGES_H_PARTS
#error "include aryl/protocol/messages.h, not aryl/protocol/wire_basics.h"
#endif

namespace aryl::protocol {

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

}  // namespace aryl::protocol
