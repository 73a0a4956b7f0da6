// What one simulated run measured, and how the summary numbers are computed.
//
// Definitions (docs/simulator.md repeats them):
//   JCT          finish - submit, over completed jobs.
//   waiting      all the time a job did not hold GPUs: JCT - time it held
//                workers (waits after preemptions included). The main
//                queuing metric.
//   queuing      time to first start: first start - submit (later waits are not
//                counted; a start on a slow GPU ends it).
//   percentiles  linear interpolation between closest ranks (p in [0,100]).
//   usages       over the measurement span [first submission, last submission]
//                when that span is positive, else [first submission, last finish]:
//                training_usage = GPU-time allocated on training servers /
//                training GPU capacity-time; overall_usage = (GPU-time allocated
//                to training jobs on any server + GPU-time of inference servers
//                serving inference demand) / GPU capacity-time of both clusters.
//                An inference server counts as serving while it is held by
//                inference and the demand needs it: min(demand, held) servers.
//   GPU-hours    over the whole run. allocated: GPU-time held by training jobs
//                (pauses and work later lost included); useful: GPU-time whose
//                progress was kept (allocated - pauses - lost work); useful
//                normalized: the same progress at training-GPU speed (the
//                GPU-time it takes on the training type at the same worker
//                count), so a T4-hour counts for what it achieved; wasted:
//                allocated - useful (pauses and lost work); lost: the GPU-time
//                of work lost to preemptions alone; rescale pause: the
//                GPU-time of the pauses resizes added (part of wasted:
//                workers after the resize x the pause it added).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aryl::sim {

struct JobOutcome {
  double submit = 0;
  double first_start = -1;  // -1: never started
  double finish = -1;       // -1: never finished
  double held = 0;          // seconds it held workers (running or paused)
  std::string name;         // the trace's job id
  int preemptions = 0;
  int rescales = 0;
  std::string gpu_types;    // GPU types it ran on, '|'-separated, in first-use order
  double waiting() const { return finish >= 0 ? finish - submit - held : 0; }
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

// One queue's share of a run (teams.h defines each field).
struct QueueMetrics {
  std::string queue;
  int quota_gpus = 0;
  double weight = 1;
  std::int64_t jobs = 0;
  double gpu_hours = 0;
  double borrowed_gpu_hours = 0;
  double loaned_gpu_hours = 0;
  double avg_queue_s = 0;
  double avg_jct_s = 0;
  double quota_held_fraction = 1;
  double quota_missed_s = 0;
  double quota_missed_fitting_s = 0;
};

struct RunMetrics {
  std::string policy;
  std::int64_t jobs_submitted = 0;
  std::int64_t jobs_completed = 0;
  double avg_jct_s = 0;
  double p50_jct_s = 0;
  double p95_jct_s = 0;
  double p99_jct_s = 0;
  double avg_wait_s = 0;   // waiting (all time not holding GPUs)
  double p50_wait_s = 0;
  double p95_wait_s = 0;
  double p99_wait_s = 0;
  double avg_queue_s = 0;  // time to first start
  double p50_queue_s = 0;
  double p95_queue_s = 0;
  double p99_queue_s = 0;
  double training_usage = 0;
  double overall_usage = 0;
  double loaned_gpu_hours = 0;
  double allocated_gpu_hours = 0;
  double useful_gpu_hours = 0;
  double useful_norm_gpu_hours = 0;
  double wasted_gpu_hours = 0;
  double lost_gpu_hours = 0;
  std::int64_t preemptions = 0;
  std::int64_t rescales = 0;
  double rescale_pause_gpu_hours = 0;
  std::int64_t reclaims = 0;
  std::int64_t reclaims_late = 0;
  double sim_wall_s = 0;
  double end_time_s = 0;  // virtual time when the last job finished
  std::vector<QueueMetrics> queues;  // with queues (aryl-sim --queues); empty otherwise
};

struct RunResult {
  RunMetrics metrics;
  std::vector<double> jcts;             // sorted ascending
  std::vector<JobOutcome> jobs;         // per job, in submission order
  std::vector<TimelineSample> timeline;
};

// p in [0, 100] over sorted values; 0 for an empty vector.
double Percentile(const std::vector<double>& sorted, double p);

// Fills the JCT and queuing fields of `m` (and returns the sorted JCTs).
std::vector<double> SummarizeJobs(const std::vector<JobOutcome>& jobs, RunMetrics& m);

}  // namespace aryl::sim
