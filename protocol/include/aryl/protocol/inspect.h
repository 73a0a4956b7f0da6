// Operator inspection: `aryl describe job|node`, `aryl logs`, `aryl events`,
// and the checkpoint reports that `describe job` shows. Part of messages.h
// (which includes this file before its message list); include messages.h.
//
// The protocol (→ request or one-way, ⇠ reply; every request may instead be
// answered with Error{code, message}):
//
//  Client ↔ scheduler (authorized like JobStatus: a user only for their own
//  jobs, operators for every job; node requests need the user role):
//   1. DescribeJob {job} ⇠ JobDescription: the spec (env names only, never the
//      values), the owner, the current placement, and from the event journal
//      the placement history (each start and resize with its time, generation,
//      nodes and reason), the rescales with the pause the runtime measured,
//      preemptions, exec errors and the last checkpoint.
//   2. DescribeNode {node} ⇠ NodeDescription: pool, liveness (live | draining |
//      drained | dead), loan state, GPU type, slots used, the workers on it by
//      job and rank, heartbeat age, and its newest journal events. A user sees
//      the workers of their own jobs; the others count in used_slots only.
//   3. ListEvents {job, node, kind, since, after, limit} ⇠ EventsReply: journal
//      rows with seq > after that match every filter given, oldest first, at
//      most limit of them (0: kDefaultEventsPage); `more` says a next page starts
//      after the last seq. A user sees cluster rows (job 0) and their own jobs'.
//      Job environment values never reach the journal (submit rows are redacted).
//
//  Logs, served by the agent that ran the worker (not a shared file system):
//   4. Client → JobLogs {job, rank | worker, stream, offset, max_bytes}. The
//      scheduler resolves the rank (default 0) to a worker and its agent: the
//      live worker of that rank, else the one of the job's newest journaled
//      generation. It answers at once with Error{Unavailable} when that agent is
//      not connected, NotFound when the job or the rank is unknown.
//   5. Scheduler → agent LogRead {request, job, worker, stream, offset,
//      max_bytes}, pushed by routing id.
//   6. Agent → scheduler LogReadReply {request, agent id, offset, data, size}
//      or {request, agent id, error_code, error}: NotFound when the log file is
//      gone, OutOfRange when offset is past its end. One-way; only the agent the
//      request went to may answer it.
//   7. The scheduler answers the client's JobLogs with LogChunk {job, worker,
//      rank, agent, stream, offset, data, size, running}, or Error{Timeout} when
//      the agent did not answer within kLogRelaySeconds. data is at most
//      max_bytes (<= kMaxLogChunk) raw bytes starting at offset; a client that
//      follows asks again from offset + data.size, and stops once data is empty
//      and running is false. A different worker in a reply (rank 0 moved to
//      another worker in a resize) is a different file: start again at 0.
//
//  Checkpoints (the runtime's rank 0, through its agent):
//   8. Worker → agent CheckpointReport {job, worker, generation, step, path,
//      bytes, seconds} once a checkpoint is durable, one-way; the agent relays
//      it to the scheduler with its agent_id set. The scheduler keeps the newest
//      per job and journals at most one "checkpoint" row per job every
//      kCheckpointJournalSeconds.
#pragma once

#ifndef ARYL_PROTOCOL_MESSAGES_H_PARTS
#error "include aryl/protocol/messages.h, not aryl/protocol/inspect.h"
#endif

namespace aryl::protocol {

// --- Journal rows -------------------------------------------------------------------

// Kinds the daemon writes to its event journal (ListEvents.kind is one of them).
inline constexpr std::string_view kEventKinds[] = {
    "submit",  "start",      "resize",    "resize_report", "preempt", "worker_exit", "checkpoint",
    "finished", "failed",    "cancelled", "register",      "node_failed", "drain",   "resume",
    "remove",  "loan",       "reclaim",   "reclaimed",     "return",  "restart",     "lease_wait",
    "checkpoint_failed", "log_disk_full", "log_disk_ok", "left_early", "restart_report", "generation_abandoned",
    "serving_draining", "serving_stopping", "serving_stopped", "serving_starting", "serving_ready", "serving_failed", "queues"};
bool IsEventKind(std::string_view kind);

// One journal row. `data` holds the row's facts as JSON (generation,
// placement, members, pause, exit, ...; {} for rows written by older versions);
// `detail` says the same for people.
struct EventRow {
  std::int64_t seq = 0;
  double time = 0;  // seconds since the Unix epoch
  JobId job = 0;    // 0: about the cluster, not one job
  std::vector<std::string> nodes{};
  std::string kind{};
  std::string detail{};
  nlohmann::json data = nlohmann::json::object();
  template <typename V>
  void Visit(V& v) {
    v("seq", seq, {.min = 0});
    v("time", time, {.min = 0});
    v("job", job);
    v("nodes", nodes);
    v("kind", kind);
    v("detail", detail);
    v("data", data);
  }
  bool operator==(const EventRow&) const = default;
};

// --- describe job ----------------------------------------------------------------------

struct DescribeJob {
  static constexpr std::string_view kType = "describe_job";
  JobId job = 0;
  template <typename V>
  void Visit(V& v) {
    v("job", job);
  }
  bool operator==(const DescribeJob&) const = default;
};

// A start or resize: the generation the scheduler formed, where, and why.
struct PlacementChange {
  double time = 0;
  std::string kind{};  // "start" | "resize"
  std::int64_t generation = 0;
  std::vector<PlacementRow> placement{};  // empty: the job was stopped
  std::string reason{};
  template <typename V>
  void Visit(V& v) {
    v("time", time, {.min = 0});
    v("kind", kind);
    v("generation", generation, {.min = 0});
    v("placement", placement);
    v("reason", reason);
  }
  bool operator==(const PlacementChange&) const = default;
};

// A resize as the runtime measured it (ResizeReport). generation is the
// scheduler's (the one in the placement history); store_generation the
// runtime's (generation.h: a plan's, or a fault recovery's between plans).
struct Rescale {
  double time = 0;
  std::int64_t generation = 0;
  std::int64_t store_generation = 0;
  std::int64_t from_workers = 0;
  std::int64_t to_workers = 0;
  bool planned = true;
  PhaseTimings phases{};
  // in_place: the runtime's measured phases. restart: every worker stopped
  // and started again; phases.total is the pause from the stop to the new
  // group's first reported step, and the other phases are 0. pause_known
  // false: no step was reported after it (yet).
  std::string kind = "in_place";
  bool pause_known = true;
  template <typename V>
  void Visit(V& v) {
    v("time", time, {.min = 0});
    v("generation", generation, {.min = 0});
    v("store_generation", store_generation, {.min = 0});
    v("from_workers", from_workers, {.min = 0});
    v("to_workers", to_workers, {.min = 0});
    v("planned", planned);
    v("phases", phases);
    v("kind", kind);
    v("pause_known", pause_known);
  }
  bool operator==(const Rescale&) const = default;
};

// A timestamped reason: preemptions, exec errors.
struct JobIncident {
  double time = 0;
  std::string node{};    // empty when not about one node
  std::int64_t worker = -1;  // -1: not about one worker
  std::string message{};
  template <typename V>
  void Visit(V& v) {
    v("time", time, {.min = 0});
    v("node", node);
    v("worker", worker, {.min = -1});
    v("message", message);
  }
  bool operator==(const JobIncident&) const = default;
};

struct CheckpointRow {
  double time = 0;
  std::int64_t generation = 0;  // the scheduler's (see Rescale)
  std::int64_t step = 0;
  std::string path{};
  std::int64_t bytes = 0;
  double seconds = 0;  // how long writing it took
  std::string node{};  // the agent of the worker that wrote it
  template <typename V>
  void Visit(V& v) {
    v("time", time, {.min = 0});
    v("generation", generation, {.min = 0});
    v("step", step, {.min = 0});
    v("path", path);
    v("bytes", bytes, {.min = 0});
    v("seconds", seconds, {.min = 0});
    v("node", node);
  }
  bool operator==(const CheckpointRow&) const = default;
};

// A job's measured speed and the scheduler's fit of it (docs/scheduler.md,
// "Measured speed"): the merged samples, one per configuration, and the
// throughput the model predicts at the sizes the scheduler may give the job.
struct SpeedSampleRow {
  std::string gpu_type{};
  std::int64_t workers = 1;
  std::int64_t nodes = 1;
  std::int64_t count = 1;          // steps summarised
  double step_time = 0;            // s, merged median
  double spread = 0;               // s
  double predicted_step_time = 0;  // s, the fit at this configuration
  template <typename V>
  void Visit(V& v) {
    v("gpu_type", gpu_type);
    v("workers", workers, {.min = 1});
    v("nodes", nodes, {.min = 1});
    v("count", count, {.min = 1});
    v("step_time", step_time, {.min = 0});
    v("spread", spread, {.min = 0});
    v("predicted_step_time", predicted_step_time, {.min = 0});
  }
  bool operator==(const SpeedSampleRow&) const = default;
};

struct SpeedPoint {
  std::int64_t workers = 1;
  double steps_per_second = 0;
  template <typename V>
  void Visit(V& v) {
    v("workers", workers, {.min = 1});
    v("steps_per_second", steps_per_second, {.min = 0});
  }
  bool operator==(const SpeedPoint&) const = default;
};

inline constexpr std::size_t kMaxSpeedRows = 64;
struct JobSpeed {
  std::string prior{};      // catalog | same_model | cluster | optimistic
  std::int64_t fits = 0;    // refits so far
  std::string gpu_type{};   // the type `predicted` is for
  // The fitted parameters (speed_model.h): compute, intra- and inter-node sync, overlap.
  double alpha_c = 0, beta_c = 0, alpha_r = 0, beta_r = 0, alpha_n = 0, beta_n = 0, gamma = 1;
  std::map<std::string, std::string> type_speed{};  // type -> speed ratio, as text
  std::vector<SpeedSampleRow> samples{};            // at most kMaxSpeedRows
  std::vector<SpeedPoint> predicted{};              // min..max workers, at most kMaxSpeedRows
  template <typename V>
  void Visit(V& v) {
    v("prior", prior);
    v("fits", fits, {.min = 0});
    v("gpu_type", gpu_type);
    v("alpha_c", alpha_c, {.min = 0});
    v("beta_c", beta_c, {.min = 0});
    v("alpha_r", alpha_r, {.min = 0});
    v("beta_r", beta_r, {.min = 0});
    v("alpha_n", alpha_n, {.min = 0});
    v("beta_n", beta_n, {.min = 0});
    v("gamma", gamma, {.min = 0});
    v("type_speed", type_speed);
    v("samples", samples);
    v("predicted", predicted);
  }
  bool operator==(const JobSpeed&) const = default;
};

// The placement history, rescales, preemptions and errors are the newest
// kMaxDescribeRows of each; history_truncated says older ones were left out.
inline constexpr std::size_t kMaxDescribeRows = 200;
struct JobDescription {
  static constexpr std::string_view kType = "job_description";
  JobRow row{};
  std::vector<std::string> argv{};
  std::vector<std::string> env_names{};  // names only: the values may be secrets
  std::string cwd{};
  std::string checkpoint_dir{};
  std::string model{};
  double total_work = 0;
  double start_time = 0;  // first start; 0: never started
  double end_time = 0;    // 0: not over
  std::optional<std::int64_t> exit_code{};
  std::string message{};
  std::vector<PlacementRow> placement{};  // now
  std::int64_t rank0_worker = -1;
  std::vector<PlacementChange> history{};
  std::vector<Rescale> rescales{};
  std::vector<JobIncident> preemptions{};
  std::vector<JobIncident> exec_errors{};
  std::optional<CheckpointRow> last_checkpoint{};
  bool history_truncated = false;
  std::optional<JobSpeed> speed{};  // absent: the scheduler keeps no model of it (ended)
  // s from a stop's notice to SIGKILL (the job's, else the scheduler's);
  // absent from schedulers older than the field.
  std::optional<double> stop_grace{};
  template <typename V>
  void Visit(V& v) {
    v("row", row);
    v("argv", argv);
    v("env_names", env_names);
    v("cwd", cwd);
    v("checkpoint_dir", checkpoint_dir);
    v("model", model);
    v("total_work", total_work, {.min = 0});
    v("start_time", start_time, {.min = 0});
    v("end_time", end_time, {.min = 0});
    v("exit_code", exit_code, {.min = 0, .max = 255});
    v("message", message);
    v("placement", placement);
    v("rank0_worker", rank0_worker, {.min = -1});
    v("history", history);
    v("rescales", rescales);
    v("preemptions", preemptions);
    v("exec_errors", exec_errors);
    v("last_checkpoint", last_checkpoint);
    v("stop_grace", stop_grace, {.min = 0});
    v("history_truncated", history_truncated);
    v("speed", speed);
  }
  bool operator==(const JobDescription&) const = default;
};

// --- describe node ---------------------------------------------------------------------

struct DescribeNode {
  static constexpr std::string_view kType = "describe_node";
  std::string node{};
  template <typename V>
  void Visit(V& v) {
    v("node", node, {.non_empty = true});
  }
  bool operator==(const DescribeNode&) const = default;
};

struct NodeWorker {
  JobId job = 0;
  std::string job_name{};
  std::string owner{};
  WorkerId worker = 0;
  std::int64_t rank = 0;
  std::int64_t local_slot = 0;
  std::int64_t generation = 0;
  bool leaving = false;
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("job_name", job_name);
    v("owner", owner);
    v("worker", worker, {.min = 0});
    v("rank", rank, {.min = 0});
    v("local_slot", local_slot, {.min = 0});
    v("generation", generation, {.min = 0});
    v("leaving", leaving);
  }
  bool operator==(const NodeWorker&) const = default;
};

inline constexpr std::size_t kDescribeNodeEvents = 20;
struct NodeDescription {
  static constexpr std::string_view kType = "node_description";
  NodeRow row{};
  std::string liveness{};    // live | draining | drained | dead
  std::string loan_state{};  // available | held | lending | loaned | reclaiming
  double reclaim_deadline = 0;  // unix seconds while reclaiming; 0 otherwise
  std::string store_endpoint{};
  std::vector<NodeWorker> workers{};  // by job, then rank
  std::vector<EventRow> recent_events{};  // newest kDescribeNodeEvents, oldest first
  std::optional<ServingStatus> serving{};  // its serving side (serving.h); absent: none
  template <typename V>
  void Visit(V& v) {
    v("row", row);
    v("liveness", liveness);
    v("loan_state", loan_state);
    v("reclaim_deadline", reclaim_deadline, {.min = 0});
    v("store_endpoint", store_endpoint);
    v("workers", workers);
    v("recent_events", recent_events);
    v("serving", serving);
  }
  bool operator==(const NodeDescription&) const = default;
};

// --- events ------------------------------------------------------------------------------

inline constexpr std::int64_t kDefaultEventsPage = 500;
inline constexpr std::int64_t kMaxEventsPage = 2000;
struct ListEvents {
  static constexpr std::string_view kType = "list_events";
  JobId job = 0;        // 0: every job and the cluster rows
  std::string node{};   // empty: every node
  std::string kind{};   // empty: every kind; else one of kEventKinds
  double since = 0;     // unix seconds; rows at or after it
  std::int64_t after = 0;  // seq
  std::int64_t limit = 0;  // 0: kDefaultEventsPage
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("node", node);
    v("kind", kind);
    v("since", since, {.min = 0});
    v("after", after, {.min = 0});
    v("limit", limit, {.min = 0, .max = double(kMaxEventsPage)});
  }
  Status Validate() const;  // kind empty or a known kind
  bool operator==(const ListEvents&) const = default;
};

struct EventsReply {
  static constexpr std::string_view kType = "events_reply";
  std::vector<EventRow> events{};
  bool more = false;
  std::int64_t next_after = 0;  // the next page: ListEvents.after = next_after
  template <typename V>
  void Visit(V& v) {
    v("events", events);
    v("more", more);
    v("next_after", next_after, {.min = 0});
  }
  bool operator==(const EventsReply&) const = default;
};

// --- logs --------------------------------------------------------------------------------

inline constexpr std::int64_t kMaxLogChunk = 256 * 1024;  // bytes; base64 keeps it far below a frame
inline constexpr std::int64_t kDefaultLogChunk = 64 * 1024;
inline constexpr double kLogRelaySeconds = 2.0;
bool IsLogStream(std::string_view s);  // "stdout" | "stderr"

struct JobLogs {
  static constexpr std::string_view kType = "job_logs";
  JobId job = 0;
  std::int64_t rank = 0;
  std::optional<WorkerId> worker{};  // this worker instead of a rank
  std::string stream = "stdout";
  std::int64_t offset = 0;
  std::int64_t max_bytes = kDefaultLogChunk;
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("rank", rank, {.min = 0});
    v("worker", worker, {.min = 0});
    v("stream", stream);
    v("offset", offset, {.min = 0});
    v("max_bytes", max_bytes, {.min = 1, .max = double(kMaxLogChunk)});
  }
  Status Validate() const;  // stream is stdout or stderr
  bool operator==(const JobLogs&) const = default;
};

struct LogRead {
  static constexpr std::string_view kType = "log_read";
  std::uint64_t request = 0;
  JobId job = 0;
  WorkerId worker = 0;
  std::string stream = "stdout";
  std::int64_t offset = 0;
  std::int64_t max_bytes = kDefaultLogChunk;
  template <typename V>
  void Visit(V& v) {
    v("request", request);
    v("job", job);
    v("worker", worker, {.min = 0});
    v("stream", stream);
    v("offset", offset, {.min = 0});
    v("max_bytes", max_bytes, {.min = 1, .max = double(kMaxLogChunk)});
  }
  Status Validate() const;  // stream is stdout or stderr
  bool operator==(const LogRead&) const = default;
};

struct LogReadReply {
  static constexpr std::string_view kType = "log_read_reply";
  std::uint64_t request = 0;
  std::string agent_id{};
  std::int64_t offset = 0;
  Bytes data{};
  std::int64_t size = 0;  // the file's size when read
  std::optional<Status::Code> error_code{};  // set: the read failed, `error` says why
  std::string error{};
  template <typename V>
  void Visit(V& v) {
    v("request", request);
    v("agent_id", agent_id, {.non_empty = true});
    v("offset", offset, {.min = 0});
    v("data", data);
    v("size", size, {.min = 0});
    v("error_code", error_code);
    v("error", error);
  }
  bool operator==(const LogReadReply&) const = default;
};

struct LogChunk {
  static constexpr std::string_view kType = "log_chunk";
  JobId job = 0;
  WorkerId worker = 0;
  std::int64_t rank = 0;
  std::string agent_id{};
  std::string stream = "stdout";
  std::int64_t offset = 0;
  Bytes data{};
  std::int64_t size = 0;
  bool running = false;  // the worker still runs: its log may grow
  template <typename V>
  void Visit(V& v) {
    v("job", job);
    v("worker", worker, {.min = 0});
    v("rank", rank, {.min = 0});
    v("agent_id", agent_id, {.non_empty = true});
    v("stream", stream);
    v("offset", offset, {.min = 0});
    v("data", data);
    v("size", size, {.min = 0});
    v("running", running);
  }
  bool operator==(const LogChunk&) const = default;
};

// --- checkpoints ---------------------------------------------------------------------------

inline constexpr double kCheckpointJournalSeconds = 30;
struct CheckpointReport {
  static constexpr std::string_view kType = "checkpoint_report";
  std::string agent_id{};  // empty from a worker; the agent fills it in
  JobId job = 0;
  WorkerId worker = 0;
  std::int64_t generation = 0;
  std::int64_t step = 0;
  std::string path{};
  std::int64_t bytes = 0;
  double seconds = 0;
  // Non-empty: the checkpoint at `step` failed (a full disk, an I/O error) and
  // the job keeps its last good one; the scheduler records an event.
  std::string error{};
  template <typename V>
  void Visit(V& v) {
    v("agent_id", agent_id);
    v("job", job);
    v("worker", worker, {.min = 0});
    v("generation", generation, {.min = 0});
    v("step", step, {.min = 0});
    v("path", path);
    v("bytes", bytes, {.min = 0});
    v("seconds", seconds, {.min = 0});
    v("error", error);
  }
  bool operator==(const CheckpointReport&) const = default;
};

}  // namespace aryl::protocol

// clang-format off
#define ARYL_PROTOCOL_INSPECT_MESSAGES(X)                                                  \
  X(DescribeJob) X(JobDescription) X(DescribeNode) X(NodeDescription) X(ListEvents)        \
  X(EventsReply) X(JobLogs) X(LogRead) X(LogReadReply) X(LogChunk) X(CheckpointReport)
// clang-format on
