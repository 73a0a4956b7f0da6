// Client ↔ scheduler messages: submit, list, status, cancel, nodes, pool
// offers and reclaims, watching a job, the scheduler's status, Ok and Error
// (messages.h, steps 10-11).
// Part of messages.h (which includes this file before its message list);
// include messages.h.
#pragma once

#ifndef ARYL_PROTOCOL_MESSAGES_H_PARTS
#error "include aryl/protocol/messages.h, not aryl/protocol/client_messages.h"
#endif

namespace aryl::protocol {

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

}  // namespace aryl::protocol
