// Why a queued job waits, as the scheduling core sees it: Slurm's REASON.
//
// WhyPending reads the state the way the policy's next round would: the size
// admission tries for the job (its smallest allowed size under an elastic
// policy, its requested size otherwise), the servers the job may use (in
// service, of its GPU types, loaned ones when the policy loans and the job may
// go there), GPUs held by elastic jobs above their base size counted as free
// when the policy shrinks them, and the policy's own queue order
// (Policy::QueueOrder, counting the jobs ahead that may use one of its GPU
// types). It names the first cause that holds, in this order:
//   1. kNoServer  no server of a GPU type the job may use is in service
//                 (failed, cordoned, held by inference, being reclaimed);
//   2. kMinSize   the size it needs is more than the GPUs in service of any
//                 one GPU type it may use: it waits for servers to come back;
//   3. kQuota     with queues (queues.h): its queue holds its quota of every
//                 type that allows its size and may not borrow that many more
//                 (its borrowing limit, or the cohort has none to lend), and
//                 loaned servers have too few free GPUs for it;
//   4. kGang      enough GPUs are free in all, but not of one GPU type: the
//                 workers of a start go together on one type;
//   5. kCapacity  too few GPUs free for that size;
//   6. kPriority  it fits now: jobs ahead of it in the policy's order go first,
//                 or the next round starts it (a type-aware policy may also
//                 hold it for a faster GPU type).
// A driver words the answer for its users (the daemon speaks of slots and
// nodes) and adds what only it knows (a node's lease, workers starting).
//
// Pure: no clock. Cost per call: O(servers + running elastic jobs + queued
// jobs x log queued jobs), whatever the number of jobs asked about.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/sched/types.h"

namespace aryl::sched {

class ClusterState;  // state.h
class Policy;        // policy.h

enum class PendingCause : std::uint8_t {
  kNone,  // the job is not queued (running, ended or unknown)
  kNoServer,
  kMinSize,
  kGang,
  kCapacity,
  kPriority,
  kQuota,
};

// "None", "NoServer", "MinSize", "Gang", "Capacity", "Priority", "Quota".
std::string_view PendingCauseName(PendingCause cause);

// One GPU type a queued job may use, as its next round would see it.
struct PendingType {
  std::string gpu_type;
  int gpus = 0;            // on every server of the type, in service or not
  int in_service = 0;      // on the servers the job may use now
  int free = 0;            // idle GPUs of those servers
  int flexible = 0;        // GPUs of those servers held by elastic jobs above their base size
  bool fits_size = false;  // the size it needs is allowed on this type (the type has that many
                           // GPUs, the table that size)
};

struct PendingReason {
  PendingCause cause = PendingCause::kNone;
  int need = 0;  // workers a start gives it at once (see the file comment)
  // Queued jobs before it in the policy's order that may use one of its GPU
  // types (those it competes with).
  int ahead = 0;
  std::vector<PendingType> types;  // the types it may use, in the cluster's type order
  // With queues: its queue, and on the type that allows its size where the
  // queue holds the least above its quota, the quota and what the queue holds.
  std::string queue;
  std::string quota_type;
  int quota = 0;
  int quota_used = 0;
};

// One answer per id of `jobs`, in order (kNone for a job that is not queued).
std::vector<PendingReason> WhyPending(const ClusterState& state, const Policy& policy,
                                      const std::vector<JobId>& jobs);

}  // namespace aryl::sched
