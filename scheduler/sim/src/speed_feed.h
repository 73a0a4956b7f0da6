// SpeedFeed: what the simulator measures and the policy learns under
// --speed-knowledge learned (and the daemon's linear model under linear).
//
// Measurement model (documented in docs/simulator.md, "Speed knowledge"):
//   1. Every start or resize of a job begins a segment at one configuration
//      (its worker count, the servers it spans, its slowest GPU type).
//   2. A segment yields one step-time summary once the job has run
//      `window` seconds past its pause (warm-up excluded), at the first event
//      at or after that time: median step time = true step time (the true
//      table) x exp(noise x z), z ~ N(0, 1) drawn from SplitMix64 seeded by
//      (seed, job id, segment), spread = noise x median, count 1. A segment
//      that ends sooner yields none.
//   3. The summary goes to the core's SpeedModels (the same fitting code as
//      the daemon's); with the summary the driver also reports the job's true
//      remaining work (the runtime reports progress with its steps).
// Under hetero_dp only single-type placements are measured.
//
// Thread safety: one per run.
#pragma once

#include <cstdint>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/speed_models.h"
#include "aryl/sched/throughput.h"
#include "aryl/sched/types.h"
#include "aryl/sim/simulator.h"

namespace aryl::sim::internal {

// The catalog a policy sees when it may not read the true table: for every
// model and GPU type of `servers`, throughput = workers at every size the true
// table allows (1.0 per GPU on every type: the live daemon's linear model).
std::shared_ptr<const sched::ThroughputCatalog> LinearCatalog(
    const sched::ThroughputCatalog& truth, const std::vector<sched::ServerSpec>& servers);

class SpeedFeed {
 public:
  SpeedFeed(const SimConfig& config, std::shared_ptr<sched::SpeedModels> models);

  // Whether samples are drawn and fitted (learned), or only progress is reported (linear).
  bool learning() const { return models_ != nullptr; }
  Status Submitted(const sched::JobSpec& spec);
  void Finished(sched::JobId job);
  // A start or resize: a new segment, measured at `measure_at` if still current.
  void Placed(sched::JobId job, double measure_at);
  void Stopped(sched::JobId job);  // a preemption ends the segment unmeasured
  // Jobs whose measurement is due by `t` (each once, in due order).
  std::vector<sched::JobId> Due(double t);
  // The noisy summary of `true_step` seconds per step at this configuration
  // (step 2 above); returns whether the job's fit changed.
  Result<bool> Measure(sched::JobId job, const std::string& gpu_type, int workers, int nodes,
                       double true_step);

 private:
  struct Pending {
    double time = 0;
    sched::JobId job = 0;
    std::uint32_t segment = 0;
    bool operator<(const Pending& o) const { return time != o.time ? time > o.time : job > o.job; }
  };
  const SimConfig& config_;
  std::shared_ptr<sched::SpeedModels> models_;
  std::unordered_map<sched::JobId, std::uint32_t> segment_;
  std::priority_queue<Pending> pending_;
};

}  // namespace aryl::sim::internal
