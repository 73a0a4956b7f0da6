// Queues (teams): nominal quotas of training GPUs, weights, borrowing and
// lending limits, cohorts and priority classes (docs/scheduler.md, "Teams").
//
// A QueueConfig is a plain value. The core reads it from
// SchedulerConfig::queues; without one (null) there is a single implicit
// queue and every rule below is off: decisions are those of a cluster
// without teams.
//
// The rules, applied by the round every round-based policy shares
// (round.cc, quota.h):
//   1. Quota usage of a queue on a GPU type is the base workers its running
//      jobs hold on training servers of that type. Loaned inference servers
//      belong to no team: GPUs there never count against a quota. Flexible
//      (elastic extra) workers are spare capacity, not quota: any admission
//      displaces them, as without teams.
//   2. Admission, pass 1 (admission order, higher priority class first): a
//      job is started on training servers only while its queue stays within
//      its nominal quota of that type; it may start on loaned servers too.
//   3. Pass 2 (borrowing): the jobs left go by Kueue's fair sharing: the
//      queue with the lowest weighted share (GPUs held above its nominal
//      quota, loaned GPUs included, divided by its weight) admits next. A
//      training placement beyond nominal needs the queue's borrowing limit
//      and the cohort's lendable GPUs: the unused nominal quota of its
//      members (at most each one's lending limit; none of a member that has
//      pending work within its quota), plus the GPUs no quota covers.
//   4. Getting quota back: a queue with a job within its quota that no free
//      or flexible GPU fits preempts (with a checkpoint) jobs that run on
//      borrowed GPUs, lowest priority class, then least checkpoint cost
//      first; a job is borrowed when, ordering its queue's running jobs by
//      (priority desc, start, id), it reaches beyond the queue's nominal
//      quota, wholly or in part (Kueue: a workload whose admission borrowed);
//      jobs wholly on borrowed GPUs go first, so their queues keep their
//      quota, and one that straddles it only when those do not free enough.
//      A job running within its own queue's quota is never preempted, and a
//      queue never preempts its own jobs (so never within a class). A job
//      that started less than SchedulerConfig::quota_min_runtime ago is
//      spared unless the waiting job has waited quota_reclaim_deadline.
//      Bound: a queue under quota with pending work gets its GPUs within
//      quota_reclaim_deadline of its job's queueing.
#pragma once

#include <array>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "aryl/result.h"

namespace aryl::sched {

// Priority classes within a queue; higher admits first.
inline constexpr int kPriorityLow = 0;
inline constexpr int kPriorityNormal = 1;
inline constexpr int kPriorityHigh = 2;
inline constexpr int kPriorityClasses = 3;
const char* PriorityName(int priority);
// "low", "normal" or "high"; InvalidArgument naming the value otherwise.
Result<int> ParsePriority(std::string_view name);

struct QueueSpec {
  std::string name;
  std::map<std::string, int> quota;  // GPU type -> nominal GPUs on training servers
  double weight = 1;                 // > 0: fair share of borrowed and loaned GPUs
  int borrow_limit = -1;             // GPUs above nominal it may hold, per type; -1: no limit
  int lend_limit = -1;               // GPUs of its unused nominal others may borrow; -1: all
  std::string cohort;                // "" only when no queue names a cohort
  // Live: the users (key names) who may submit to it; empty: anyone.
  // Operators may submit to every queue.
  std::vector<std::string> users;
  // Simulator only: the fraction of trace jobs it gets, and the fractions of
  // them in each priority class (low, normal, high).
  double jobs_share = 0;
  std::array<double, kPriorityClasses> priority_mix = {0, 1, 0};
  bool MayUse(std::string_view user) const;
  int Nominal(const std::string& type) const {
    auto it = quota.find(type);
    return it == quota.end() ? 0 : it->second;
  }
};

struct QueueConfig {
  std::vector<QueueSpec> queues;  // a queue's index is its place here
  // Where a job that names no queue goes: the queue named "default", else
  // the first one.
  int default_queue = 0;
  // The queue's index; the default queue for ""; -1 when unknown.
  int Find(std::string_view name) const;
  // Builds the name index and default_queue (the parser calls it).
  void Index();

 private:
  std::unordered_map<std::string, int> index_;
};

// Weighted max-min fair shares of `capacity` among demands (water-filling):
// a demand at most its weight's share of what is left gets all of it, the
// others split the rest by weight (whole GPUs; remainders to the largest
// fractions, then the lowest index). Never more than a demand; all of
// `capacity` is given while demand remains.
std::vector<int> WeightedShares(const std::vector<double>& weights, const std::vector<int>& demands,
                                int capacity);

// The training cluster a queues file is checked against: GPUs per type, and
// the type a quota without a gpu_type column is in.
struct QueueCluster {
  std::map<std::string, int> training_gpus;
  std::string default_type;
  // The live scheduler's file: agents register after it is read, so GPU types
  // and sizes are not known yet. Every row names its gpu_type, any type is
  // accepted and quotas are not checked against a size; jobs_share may be
  // left out.
  bool open = false;
};

// The most GPUs of `type` queue q can ever hold on training servers: its
// nominal quota plus what it may borrow (its borrowing limit, its cohort's
// lendable quota and the `training_gpus` of the type no quota covers).
// A job larger than this never starts on training servers.
int QueueReach(const QueueConfig& queues, int q, const std::string& type, int training_gpus);

// Parses a queues CSV (docs/simulator.md, "Teams"): a header naming at least
// queue,quota_gpus,weight,jobs_share (jobs_share not with QueueCluster::open),
// in any order, plus optional gpu_type, borrow_limit, lend_limit, cohort,
// priority_mix (LOW:NORMAL:HIGH fractions) and users (names separated by ';',
// '*' or empty for anyone); '#' lines and blank lines are skipped. Errors are
// InvalidArgument "FILE:LINE: field 'F': value 'V': why" for a bad number, an
// unknown GPU type, a duplicate queue, a quota above the cluster (one queue's
// or the sum per type), a queue in no cohort when others name one, jobs
// shares that do not sum to 1 (within 1e-6; all 0 is allowed: no simulator
// assignment), or no queue at all.
Result<QueueConfig> ParseQueuesCsv(std::string_view text, const std::string& file,
                                   const QueueCluster& cluster);
// Reads and parses FILE; NotFound when it cannot be read.
Result<QueueConfig> ReadQueuesFile(const std::string& file, const QueueCluster& cluster);

}  // namespace aryl::sched
