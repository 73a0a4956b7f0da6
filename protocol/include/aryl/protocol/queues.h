// Teams on one cluster: queues with quotas (docs/operations.md, "Teams").
// Part of messages.h (which includes this file before its message list);
// include messages.h. The rules are the scheduling core's
// (scheduler/core/include/aryl/sched/queues.h); the scheduler reads the
// queues from its --queues file.
//
// The protocol (client ↔ scheduler, after step 10 of messages.h):
//
//  Q1. SubmitJob.queue names the job's queue ("" or absent: the default
//      queue) and SubmitJob.priority its class there (low, normal, high;
//      absent: normal). A scheduler without --queues refuses a submission
//      that names a queue other than "default" or a priority other than
//      normal. With --queues: an unknown queue or priority is an Error
//      (InvalidArgument) naming it and the known ones; a user key submitting
//      to a queue whose `users` do not name it is an Error (PermissionDenied).
//      Operators may submit to any queue.
//  Q2. ListQueues ⇠ QueuesReply: one QueueRow per queue, in the file's order,
//      as the quota rules count it now. Anyone may list (the numbers are the
//      cluster's, not a job's); an empty reply says the scheduler runs
//      without queues.
//  Q3. ReloadQueues ⇠ QueuesReply (operators only): the scheduler reads its
//      --queues file again. A file that does not parse is an Error naming the
//      file, line and field, and the queues in force stay as they were. A good
//      one takes effect at once, journaled (kind "queues"): running jobs keep
//      running, and a queue now over its quota gives GPUs back by the rules
//      (suspending borrowed jobs after their minimum runtime), never by
//      killing at once; jobs of a queue no longer in the file are charged to
//      the default queue.
//  Q4. UsageRequest {since, until, by} ⇠ UsageReply: GPU-hours on training
//      and on loaned servers, jobs submitted and preemptions in [since,
//      until] (unix seconds; until 0: now), one row per queue (by "queue") or
//      owner (by "user"), from the event journal (as far back as it keeps
//      rows). Users and operators may ask.
#pragma once

#ifndef ARYL_PROTOCOL_MESSAGES_H_PARTS
#error "include aryl/protocol/messages.h, not aryl/protocol/queues.h"
#endif

namespace aryl::protocol {

// GPUs of one type (a quota, or what a queue holds of it).
struct TypeCount {
  std::string gpu_type{};
  std::int64_t gpus = 0;
  template <typename V>
  void Visit(V& v) {
    v("gpu_type", gpu_type, {.non_empty = true});
    v("gpus", gpus, {.min = 0});
  }
  bool operator==(const TypeCount&) const = default;
};

// One row of `aryl queues`.
struct QueueRow {
  std::string queue{};
  std::string cohort{};
  double weight = 1;
  std::int64_t borrow_limit = -1;  // -1: no limit
  std::int64_t lend_limit = -1;    // -1: all of its unused quota
  std::vector<std::string> users{};  // empty: anyone
  std::vector<TypeCount> quota{};     // nominal GPUs on training servers
  std::vector<TypeCount> used{};      // quota workers on training servers
  std::vector<TypeCount> borrowed{};  // of used, above the quota
  std::vector<TypeCount> lent{};      // of its unused quota, borrowed by its cohort
  std::int64_t loaned = 0;    // workers on loaned inference servers
  std::int64_t flexible = 0;  // elastic workers above base size (spare capacity)
  std::int64_t running = 0;
  std::int64_t pending = 0;
  double share = 0;  // weighted share: (borrowed + loaned) / weight
  template <typename V>
  void Visit(V& v) {
    v("queue", queue, {.non_empty = true});
    v("cohort", cohort);
    v("weight", weight, {.min = 0});
    v("borrow_limit", borrow_limit, {.min = -1});
    v("lend_limit", lend_limit, {.min = -1});
    v("users", users);
    v("quota", quota);
    v("used", used);
    v("borrowed", borrowed);
    v("lent", lent);
    v("loaned", loaned, {.min = 0});
    v("flexible", flexible, {.min = 0});
    v("running", running, {.min = 0});
    v("pending", pending, {.min = 0});
    v("share", share, {.min = 0});
  }
  bool operator==(const QueueRow&) const = default;
};

// Q2.
struct ListQueues {
  static constexpr std::string_view kType = "list_queues";
  template <typename V>
  void Visit(V&) {}
  bool operator==(const ListQueues&) const = default;
};

// Q3.
struct ReloadQueues {
  static constexpr std::string_view kType = "reload_queues";
  template <typename V>
  void Visit(V&) {}
  bool operator==(const ReloadQueues&) const = default;
};

struct QueuesReply {
  static constexpr std::string_view kType = "queues_reply";
  std::vector<QueueRow> queues{};
  template <typename V>
  void Visit(V& v) {
    v("queues", queues);
  }
  bool operator==(const QueuesReply&) const = default;
};

// Q4.
struct UsageRequest {
  static constexpr std::string_view kType = "usage_request";
  double since = 0;
  double until = 0;          // 0: now
  std::string by = "queue";  // "queue" or "user"
  template <typename V>
  void Visit(V& v) {
    v("since", since, {.min = 0});
    v("until", until, {.min = 0});
    v("by", by, {.non_empty = true});
  }
  Status Validate() const {
    if (by != "queue" && by != "user") return Status::InvalidArgument("by: expected \"queue\" or \"user\", got \"" + by + "\"");
    if (until > 0 && until < since) return Status::InvalidArgument("until is before since");
    return Status::Ok();
  }
  bool operator==(const UsageRequest&) const = default;
};

struct UsageRow {
  std::string key{};  // the queue, or the user
  double training_gpu_hours = 0;
  double loaned_gpu_hours = 0;
  std::int64_t jobs = 0;
  std::int64_t preemptions = 0;
  template <typename V>
  void Visit(V& v) {
    v("key", key);
    v("training_gpu_hours", training_gpu_hours, {.min = 0});
    v("loaned_gpu_hours", loaned_gpu_hours, {.min = 0});
    v("jobs", jobs, {.min = 0});
    v("preemptions", preemptions, {.min = 0});
  }
  bool operator==(const UsageRow&) const = default;
};

struct UsageReply {
  static constexpr std::string_view kType = "usage_reply";
  double since = 0;
  double until = 0;
  std::string by{};
  std::vector<UsageRow> rows{};
  template <typename V>
  void Visit(V& v) {
    v("since", since, {.min = 0});
    v("until", until, {.min = 0});
    v("by", by);
    v("rows", rows);
  }
  bool operator==(const UsageReply&) const = default;
};

}  // namespace aryl::protocol

// clang-format off
#define ARYL_PROTOCOL_QUEUES_MESSAGES(X) X(ListQueues) X(QueuesReply) X(ReloadQueues) X(UsageRequest) X(UsageReply)
// clang-format on
