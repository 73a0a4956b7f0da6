// Reports of simulated runs: the terminal table, the JSON file, the timeline CSV
// and gnuplot PNGs.
//
// JSON schema (docs/simulator.md): {"config": {...}, "runs": [ {policy,
// jobs_completed, avg_jct_s, p50_jct_s, p95_jct_s, p99_jct_s, avg_wait_s,
// p50_wait_s, p95_wait_s, p99_wait_s, avg_queue_s, p50_queue_s, p95_queue_s,
// p99_queue_s, training_usage, overall_usage, loaned_gpu_hours,
// allocated_gpu_hours, useful_gpu_hours, useful_norm_gpu_hours,
// wasted_gpu_hours, preemptions, rescales, reclaims, reclaims_late,
// sim_wall_s}, ... ]}; exactly these keys per run, in this order. Everything but sim_wall_s is a function of the inputs and
// the seed, so two runs give byte-identical files apart from sim_wall_s.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "aryl/sim/metrics.h"
#include "aryl/status.h"

namespace aryl::sim {

// One row per run; then, when a run is named "baseline", each metric's ratio to
// the first such run (for JCT/queue metrics: baseline / run, so > 1 is better;
// for the rest: run / baseline).
std::string FormatTable(const std::vector<RunMetrics>& runs);
// Per policy and queue (aryl-sim --queues): jobs, quota, GPU-hours, borrowed
// and loaned GPU-hours, avg queuing and JCT, quota held; "" without queues.
std::string FormatQueueTable(const std::vector<RunMetrics>& runs);

nlohmann::ordered_json RunToJson(const RunMetrics& m);
Status WriteJson(const std::string& path, const nlohmann::ordered_json& config,
                 const std::vector<RunMetrics>& runs);

// Columns: policy,time_s,queued_jobs,running_jobs,busy_training_gpus,
// busy_loaned_gpus,loaned_servers,demand_servers,held_servers.
Status WriteTimelineCsv(const std::string& path, const std::vector<RunResult>& runs);

// One row per policy and job, in submission order:
// policy,job_id,submit_s,first_start_s,finish_s,waiting_s,preemptions,rescales,
// gpu_types (first_start_s/finish_s -1 when never reached; gpu_types
// '|'-separated in first-use order; job_id quoted when it holds a comma).
Status WriteJobsCsv(const std::string& path, const std::vector<RunResult>& runs);

// Writes timeline-<policy>.dat, jct-<policy>.dat, plots.gp and runs gnuplot to
// make timeline.png and jct_cdf.png in `dir` (created when missing).
// The cluster sizes label the plots and convert servers to GPUs.
Status WritePlots(const std::string& dir, const std::vector<RunResult>& runs, int training_gpus,
                  int inference_servers, int inference_gpus);

}  // namespace aryl::sim
