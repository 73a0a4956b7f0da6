// Teams in the simulator (aryl-sim --queues): which queue and priority class
// each trace job belongs to, and what each queue got (docs/simulator.md,
// "Teams").
//
//   1. Assignment: a job's queue is drawn by a stable hash of its trace id
//      (independent of --seed), weighted by the queues' jobs_share; its
//      priority class by a second hash, weighted by its queue's priority_mix.
//   2. Per queue, over the run (QueueMeter, fed by the executor):
//        gpu_hours           GPU-time its jobs held, training and loaned;
//        borrowed_gpu_hours  GPU-time it held on training servers above its
//                            nominal quota (flexible workers included);
//        loaned_gpu_hours    GPU-time it held on loaned servers;
//        avg_queue_s/avg_jct_s  as RunMetrics, over its jobs;
//        quota_held_fraction of the time its demand (GPUs held + the sizes its
//                            queued jobs wait for: the minimum of an elastic
//                            job under an elastic policy, the requested size
//                            otherwise) was at least its quota, not counting
//                            the first `bound` seconds of each such stretch,
//                            the fraction in which it held (training and
//                            loaned GPUs) at least its quota; 1 when that
//                            time is empty;
//        quota_missed_s      the counted time in which it held less;
//        quota_missed_fitting_s  the part of it in which one of its queued
//                            jobs fit within what is left of its quota on
//                            training servers: what the rules owe it (a
//                            larger job must borrow and takes nothing back).
// Thread safety: values; one meter per run.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/queues.h"
#include "aryl/sched/types.h"
#include "aryl/sim/metrics.h"

namespace aryl::sim {

// Sets JobSpec::queue and JobSpec::priority of every job (1. above).
// InvalidArgument when every jobs_share is 0, or when a job needs more GPUs
// than its queue can ever hold on the `training_gpus` training GPUs of
// `quota_type` (sched::QueueReach): it would never run under a policy that
// does not loan.
Status AssignQueues(std::vector<sched::JobSpec>& jobs, const sched::QueueConfig& queues,
                    const std::string& quota_type, int training_gpus);

class QueueMeter {
 public:
  QueueMeter(const sched::QueueConfig& queues, const std::string& quota_type, double bound,
             double start);
  // Integrates every queue's state from the last call up to t.
  void Advance(double t);
  // Changes of queue q's GPUs held (on training or loaned servers) and of the
  // GPUs its queued jobs wait for.
  void Held(int q, int training, int loaned) {
    training_[q] += training;
    loaned_[q] += loaned;
  }
  // A job of queue q enters (+gpus) or leaves (-gpus) the queue.
  void Waiting(int q, int gpus) {
    waiting_[q] += gpus;
    if (gpus > 0) {
      sizes_[q].insert(gpus);
    } else if (auto it = sizes_[q].find(-gpus); it != sizes_[q].end()) {
      sizes_[q].erase(it);
    }
  }
  // The per-queue table; `jobs` in the order of `queue_of`.
  std::vector<QueueMetrics> Finish(const std::vector<JobOutcome>& jobs,
                                   const std::vector<int>& queue_of) const;

 private:
  const sched::QueueConfig& queues_;
  std::vector<int> quota_;
  double bound_;
  double now_;
  std::vector<int> training_, loaned_, waiting_;
  std::vector<double> stretch_since_;      // when demand last rose to the quota; -1: below it
  std::vector<std::multiset<int>> sizes_;  // the sizes its queued jobs wait for
  std::vector<double> held_s_, borrowed_s_, loaned_s_, owed_s_, kept_s_, missed_fitting_s_;
};

}  // namespace aryl::sim
