// JobSpeedModel and SpeedModels: every job's fitted speed, kept by job id, as
// the core reads it in place of the ThroughputCatalog (speed_model.h has the
// model and the fit).
//
// How a driver (the live daemon, aryl-sim --speed-knowledge learned) uses it:
//   1. SpeedModels models(options); config.speed = a shared_ptr to it (the core
//      holds it as a const JobSpeedSource); Scheduler::Create(..., config).
//   2. Before a job's JobSubmitted: models.AddJob(id, model, global_batch). The
//      job's prior is chosen then (PriorSource, in this order): the catalog's
//      table for its model when options.catalog has one; else the geometric
//      mean of the fits of finished jobs of the same model; else of all
//      finished jobs; else OptimisticParams().
//   3. Each measured summary: models.AddSample(id, sample). It merges the
//      sample with earlier ones at the same configuration and refits when the
//      fit is off the sample's (merged) median by more than its noise: at a
//      configuration new to the job at once, at a known one once its step
//      count has doubled since the last fit (the first sample always fits);
//      it returns true when the fit changed. Then
//      Scheduler::RefreshSpeed(time, id) makes the core read the new curve
//      (knapsack values, reclaim costs, finish estimates, migration checks).
//      AddSample is three steps, which a driver may run apart (the daemon
//      fits on a worker thread):
//        a. RecordSample merges the sample and, when a fit is due, returns a
//           FitRequest: a copy of all that fit reads;
//        b. RunFit(request) fits (pure: on any thread, any time later);
//        c. ApplyFit(id, result) installs the fit and the step counts it
//           covered; samples recorded meanwhile stay, and DueFit(id) says
//           whether they call for another fit against the new one.
//      Run back to back, they are AddSample, bit for bit.
//   4. When the job ends: models.RemoveJob(id); a measured job's fit joins the
//      cluster's knowledge (priors of later jobs, step 2).
//   5. Journal: ToJson() / FromJson() keep the samples, fits, priors and the
//      cluster's knowledge; FromJson gives an object that answers exactly as
//      the one saved (fits are stored, not recomputed).
// A size's allowedness stays the catalog's (its 0 cells, granularity): the
// speed source only changes the values of allowed sizes.
//
// Thread safety: not thread-safe; the core reads it during Handle, so a driver
// mutates it only between calls into the Scheduler. RunFit touches no object:
// it runs on any thread.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/speed_model.h"
#include "aryl/sched/types.h"
#include "aryl/status.h"

namespace aryl::sched {

class ThroughputCatalog;

// What the core consults, per job, before its catalog (SchedulerConfig::speed).
class JobSpeedSource {
 public:
  virtual ~JobSpeedSource() = default;
  // Iterations/s of `job` on `workers` GPUs of `gpu_type` whose servers hold
  // `gpus_per_node` GPUs each; <= 0: no opinion (the catalog's value is used).
  virtual double Throughput(JobId job, const std::string& gpu_type, int workers,
                            int gpus_per_node) const = 0;
};

// A fit due for one job: everything FitSpeed reads, copied, so that it runs
// off the thread that owns the models while they change.
struct FitRequest {
  JobId job = 0;
  std::vector<StepSample> samples;  // the job's merged samples when it was due
  SpeedPrior prior;
  std::string reference_type;
  SpeedBounds bounds;
  std::optional<SpeedParams> warm;  // the start of the solver (the last fit), if any
};

// What a fit installs: the parameters and, per sample (FitRequest::samples'
// order), the step count it covered.
struct FitResult {
  SpeedParams params;
  std::vector<int> fitted_count;
};

enum class PriorSource : std::uint8_t { kCatalog, kSameModel, kCluster, kOptimistic };
const char* PriorSourceName(PriorSource s);

class JobSpeedModel {
 public:
  JobSpeedModel(std::string model, double global_batch, SpeedPrior prior, PriorSource source);

  // Validates and merges; a request (job 0) when a fit is due (see
  // SpeedModels::AddSample for when).
  Result<std::optional<FitRequest>> RecordSample(const StepSample& sample,
                                                 const std::string& reference_type,
                                                 const SpeedBounds& bounds);
  // The fit of the samples as they are now (due or not).
  FitRequest Request(const std::string& reference_type, const SpeedBounds& bounds) const;
  // Whether a sample changed since the fit that covered it calls for a refit
  // against the current fit (the rule of RecordSample, for every sample).
  bool FitDue() const;
  // FailedPrecondition when the result covers more samples than recorded.
  Status ApplyFit(const FitResult& fit);
  // 1 / step time at m = global_batch / workers on ceil(workers / gpus_per_node) servers.
  double Throughput(const std::string& gpu_type, int workers, int gpus_per_node) const;

  const std::string& model() const { return model_; }
  double global_batch() const { return global_batch_; }
  const SpeedPrior& prior() const { return prior_; }
  PriorSource prior_source() const { return source_; }
  const SpeedParams& params() const { return params_; }
  // One merged sample per configuration (type, workers, nodes, local batch).
  const std::vector<StepSample>& samples() const { return samples_; }
  bool measured() const { return !samples_.empty(); }
  int fits() const { return fits_; }

 private:
  friend class SpeedModels;  // FromJson
  // Off the current fit by more than kRefitSigmas of the sample's noise.
  bool Off(const StepSample& s) const;
  std::string model_;
  double global_batch_ = 1;
  SpeedPrior prior_;
  PriorSource source_ = PriorSource::kOptimistic;
  SpeedParams params_;
  std::vector<StepSample> samples_;
  std::vector<int> fitted_count_;  // per sample: its count at the last fit
  int fits_ = 0;
};

struct SpeedModelOptions {
  std::string reference_type;  // the type type speeds are relative to (the training type)
  SpeedBounds bounds;
  double prior_sigma = 1.0;              // cluster priors (log-space std of each parameter's shape)
  double optimistic_prior_sigma = 10.0;  // the optimistic prior is weak: the first samples win
  double catalog_prior_sigma = 0.3;      // a catalog table is a firmer prior
  // Tables to use as priors for jobs naming their model; null = none.
  std::shared_ptr<const ThroughputCatalog> catalog;
  int catalog_max_workers = 64;  // sizes of a catalog table the prior is fitted on
  int catalog_gpus_per_node = 8;
};

// One set of parameters as the journal writes it (a JSON object; doubles
// print shortest-exact, so the text gives back the very values), and back
// (Corruption naming the field).
std::string SpeedParamsToJson(const SpeedParams& p);
Result<SpeedParams> SpeedParamsFromJson(const std::string& text);

class SpeedModels : public JobSpeedSource {
 public:
  explicit SpeedModels(SpeedModelOptions options);

  // Errors: AlreadyExists for a known id; InvalidArgument for global_batch < 0.
  // global_batch 0 = unknown: 1 (samples then give local_batch = 1 / workers).
  Status AddJob(JobId job, const std::string& model, double global_batch = 0);
  // NotFound for an unknown job, InvalidArgument for a bad sample (the field).
  // = RecordSample, then RunFit and ApplyFit when a fit is due; true when the
  // fit changed.
  Result<bool> AddSample(JobId job, const StepSample& sample);
  // Step 3a: the sample merged; the fit that is now due, if one is. Errors as
  // AddSample.
  Result<std::optional<FitRequest>> RecordSample(JobId job, const StepSample& sample);
  // Step 3b: FitSpeed on the request's copy. Pure, thread-safe.
  static Result<FitResult> RunFit(const FitRequest& request);
  // Step 3c: installs a fit of RunFit (or a journaled one). false, changing
  // nothing, for a job no longer here (removed while its fit ran).
  Result<bool> ApplyFit(JobId job, const FitResult& fit);
  // After a fit was applied or the models restored: the fit that samples
  // recorded since call for, if any (nullopt for an unknown job).
  std::optional<FitRequest> DueFit(JobId job) const;
  Status RemoveJob(JobId job);
  const JobSpeedModel* Find(JobId job) const;
  std::size_t size() const { return jobs_.size(); }

  double Throughput(JobId job, const std::string& gpu_type, int workers,
                    int gpus_per_node) const override;

  std::string ToJson() const;
  // Corruption naming the field on a bad document.
  static Result<SpeedModels> FromJson(const std::string& text, SpeedModelOptions options);

 private:
  // Geometric means of finished jobs' fits.
  struct Pool {
    int n = 0;
    std::vector<double> log_sum;                             // the 7 core parameters
    std::map<std::string, std::pair<int, double>> type_log;  // type -> (n, sum log speed)
  };
  static void AddToPool(Pool& pool, const SpeedParams& p);
  static SpeedParams PoolMean(const Pool& pool);
  Result<SpeedPrior> CatalogPrior(const std::string& model);

  SpeedModelOptions options_;
  // Found on every sample and every curve refresh: hashed (ToJson sorts).
  std::unordered_map<JobId, JobSpeedModel> jobs_;
  std::map<std::string, Pool> by_model_;
  Pool all_;
  std::map<std::string, SpeedPrior> catalog_priors_;  // cache per model
};

}  // namespace aryl::sched
