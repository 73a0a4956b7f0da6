// Agent ↔ scheduler messages: registration, heartbeats and the lease, the
// commands that start, resize and stop workers, and what agents report
// (messages.h, steps 1-9 and "Term fencing").
// Part of messages.h (which includes this file before its message list);
// include messages.h.
#pragma once

#ifndef ARYL_PROTOCOL_MESSAGES_H_PARTS
#error "include aryl/protocol/messages.h, not aryl/protocol/agent_messages.h"
#endif

namespace aryl::protocol {

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
  // The newest report of this process that a scheduler acknowledged when this
  // one was sent (start confirmation, messages.h); absent: not kept.
  std::optional<std::uint64_t> acked{};
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
    v("acked", acked);
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
  // As AgentRegister.acked: the newest acknowledged report when this one was sent.
  std::optional<std::uint64_t> acked{};
  template <typename V>
  void Visit(V& v) {
    v("agent_id", agent_id, {.non_empty = true});
    v("seq", seq);
    v("free_slots", free_slots, {.min = 0});
    v("workers", workers);
    v("log_free_bytes", log_free_bytes, {.min = -1});
    v("acked", acked);
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
  // The newest report of the agent's process the scheduler had acknowledged
  // when it sent this start (start confirmation, messages.h); absent or 0:
  // not numbered (a scheduler of an older version), never refused for it.
  std::optional<std::uint64_t> ack_floor{};
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
    v("ack_floor", ack_floor);
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

}  // namespace aryl::protocol
