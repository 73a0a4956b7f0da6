// What one simulated run measured, and how the summary numbers are computed.
//
// Definitions (docs/simulator.md repeats them):
//   JCT          finish - submit, over completed jobs.
//   queuing      first start - submit (a preempted job's later waits are not
//                counted again: "submit -> first start").
//   percentiles  linear interpolation between closest ranks (p in [0,100]).
//   usages       over the measurement span [first submission, last submission]
//                when that span is positive, else [first submission, last finish]:
//                training_usage = GPU-time allocated on training servers /
//                training GPU capacity-time; overall_usage = (GPU-time allocated
//                to training jobs on any server + GPU-time of inference servers
//                serving inference demand) / GPU capacity-time of both clusters.
//                An inference server counts as serving while it is held by
//                inference and the demand needs it: min(demand, held) servers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aryl::sim {

struct JobOutcome {
  double submit = 0;
  double first_start = -1;  // -1: never started
  double finish = -1;       // -1: never finished
};

struct TimelineSample {
  double time = 0;
  int queued_jobs = 0;
  int running_jobs = 0;
  int busy_training_gpus = 0;   // GPUs allocated on training servers
  int busy_loaned_gpus = 0;     // GPUs allocated on loaned inference servers
  int loaned_servers = 0;
  int demand_servers = 0;       // inference demand
  int held_servers = 0;         // inference servers held by inference
};

struct RunMetrics {
  std::string policy;
  std::int64_t jobs_submitted = 0;
  std::int64_t jobs_completed = 0;
  double avg_jct_s = 0;
  double p50_jct_s = 0;
  double p95_jct_s = 0;
  double p99_jct_s = 0;
  double avg_queue_s = 0;
  double p99_queue_s = 0;
  double training_usage = 0;
  double overall_usage = 0;
  double loaned_gpu_hours = 0;
  std::int64_t preemptions = 0;
  std::int64_t rescales = 0;
  std::int64_t reclaims = 0;
  std::int64_t reclaims_late = 0;
  double sim_wall_s = 0;
  double end_time_s = 0;  // virtual time when the last job finished
};

struct RunResult {
  RunMetrics metrics;
  std::vector<double> jcts;             // sorted ascending
  std::vector<TimelineSample> timeline;
};

// p in [0, 100] over sorted values; 0 for an empty vector.
double Percentile(const std::vector<double>& sorted, double p);

// Fills the JCT and queuing fields of `m` (and returns the sorted JCTs).
std::vector<double> SummarizeJobs(const std::vector<JobOutcome>& jobs, RunMetrics& m);

}  // namespace aryl::sim
