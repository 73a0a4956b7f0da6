// Worker (runtime) ↔ agent messages: hello and generation announcements,
// resize and progress reports, checkpoint requests, leaving and the end of
// the program (messages.h, steps 12-16 and 18).
// Part of messages.h (which includes this file before its message list);
// include messages.h.
#pragma once

#ifndef ARYL_PROTOCOL_MESSAGES_H_PARTS
#error "include aryl/protocol/messages.h, not aryl/protocol/worker_messages.h"
#endif

namespace aryl::protocol {

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

}  // namespace aryl::protocol
