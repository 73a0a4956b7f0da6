// Workload: turning trace rows into the scheduler's JobSpecs.
//
//   1. Throughput catalog (LoadCatalog): every table in data/throughput/<TYPE>/,
//      one row of each (CatalogOptions::batch_size): by default the row whose
//      global batch is nearest the model's usual batch (<dir>/usual_batch.csv,
//      from each model's paper; the larger row on a tie; the first row for a
//      model not listed). The traces carry no batch size, so a job trains at
//      its model's usual batch.
//      Tables of one model measured on different GPU types use different global
//      batch sizes (bert: 64 on A100, 384 on T4), so "one iteration" differs. All
//      tables of a model are converted to iterations of the batch of its table on
//      the reference (training) type: thr' = thr x batch / reference_batch, i.e.
//      the same samples/s. A GPU type without a table for a model runs at
//      `relative_speed` x the reference type's table.
//   2. Model: the trace's model column, else one chosen deterministically from the
//      job id (a hash, independent of --seed) among the models whose reference
//      table allows the requested GPU count.
//   3. Work (iterations) = duration x thr(model, reference type, num_gpu): the job
//      needs exactly its traced duration when run at its requested size.
//   4. State size (ModelStateBytes), for the time a checkpoint on notice takes.
//   5. Elasticity: the trace's elastic/min/max columns, else elastic with
//      probability `elastic_fraction` (seeded hash of the job id) with
//      [min, max] = [lo x n, hi x n] rounded inward to powers of two, capped by
//      the largest size the model's table allows. Elastic jobs keep
//      requested_workers = n, the size non-elastic policies run them at.
// Thread safety: free functions on values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/throughput.h"
#include "aryl/sched/types.h"
#include "aryl/sim/trace.h"

namespace aryl::sim {

// CatalogOptions::batch_size: the row nearest the model's usual global batch.
inline constexpr int kUsualBatch = -2;

struct CatalogOptions {
  std::string reference_type = "A100";  // the training GPU type
  double relative_speed = 0.25;         // types without a table: this x reference
  std::vector<std::string> other_types; // GPU types in the cluster (get relative speeds)
  // The row of each table: kUsualBatch (the default) = nearest the model's
  // usual batch, 0 = the first (smallest global batch),
  // ThroughputCsvOptions::kLargestBatch = the largest, N = global batch N.
  int batch_size = kUsualBatch;
};

Result<std::shared_ptr<const sched::ThroughputCatalog>> LoadCatalog(const std::string& dir,
                                                                    const CatalogOptions& options);

struct WorkloadOptions {
  std::string reference_type = "A100";
  double elastic_fraction = 0;  // of jobs without an elastic column
  double elastic_lo = 0.5;      // min = lo x requested
  double elastic_hi = 2.0;      // max = hi x requested
  std::uint64_t seed = 1;
};

// Parses "LO:HI" (0 < LO <= 1 <= HI).
Result<std::pair<double, double>> ParseElasticRange(std::string_view text);

// Bytes a checkpoint of `model` writes: its published parameter count x 4 bytes
// (fp32) x 3 (weights and two optimizer moments, as Adam keeps); 100 M
// parameters for a model not listed. Sets JobSpec::state_bytes.
double ModelStateBytes(const std::string& model);

// JobIds are 1.. in trace order. Errors name the row (file:line) and the field.
Result<std::vector<sched::JobSpec>> BuildJobs(const Trace& trace, const sched::ThroughputCatalog& catalog,
                                              const WorkloadOptions& options);

}  // namespace aryl::sim
