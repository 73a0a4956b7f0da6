// JobSpeedModel (one job's samples and fit) and SpeedModels (all jobs by id,
// the priors and the cluster's knowledge); the JSON form is in
// speed_models_json.cc.
#include "aryl/sched/speed_models.h"

#include <algorithm>
#include <cmath>

#include "aryl/sched/throughput.h"

namespace aryl::sched {
namespace {

constexpr int kCore = 7;

std::vector<double> CoreLog(const SpeedParams& p) {
  return {std::log(p.alpha_c), std::log(p.beta_c), std::log(p.alpha_r), std::log(p.beta_r),
          std::log(p.alpha_n), std::log(p.beta_n), std::log(p.gamma)};
}

bool SameConfig(const StepSample& a, const StepSample& b) {
  return a.gpu_type == b.gpu_type && a.workers == b.workers && a.nodes == b.nodes &&
         std::fabs(a.local_batch - b.local_batch) <= 1e-9 * std::max(a.local_batch, b.local_batch);
}

int Nodes(int workers, int gpus_per_node) {
  return gpus_per_node > 0 ? std::max(1, (workers + gpus_per_node - 1) / gpus_per_node) : 1;
}

constexpr double kRefitSigmas = 2.0;  // a sample this far off the fit (in its sigmas) refits it

}  // namespace

const char* PriorSourceName(PriorSource s) {
  switch (s) {
    case PriorSource::kCatalog:
      return "catalog";
    case PriorSource::kSameModel:
      return "same-model";
    case PriorSource::kCluster:
      return "cluster";
    case PriorSource::kOptimistic:
      return "optimistic";
  }
  return "?";
}

// --- JobSpeedModel -----------------------------------------------------------------

JobSpeedModel::JobSpeedModel(std::string model, double global_batch, SpeedPrior prior,
                             PriorSource source)
    : model_(std::move(model)),
      global_batch_(global_batch > 0 ? global_batch : 1),
      prior_(std::move(prior)),
      source_(source),
      params_(prior_.params) {}

// Off the current fit by more than twice the sample's noise: a fit that
// already predicts a measurement to within its noise has nothing to learn
// from it worth a refit (the sample is kept for the next one). Two sigmas,
// not one: at one, a third of the samples a right fit predicts would refit
// on their noise alone (|N(0,1)| > 1 has p = 0.32; > 2, p = 0.05).
bool JobSpeedModel::Off(const StepSample& s) const {
  const double predicted = params_.StepTime(s.gpu_type, s.workers, s.nodes, s.local_batch);
  const double sigma = std::max(
      kMinSampleSigma, s.spread / s.step_time / std::sqrt(static_cast<double>(s.count)));
  return std::fabs(std::log(predicted / s.step_time)) > kRefitSigmas * sigma;
}

Result<std::optional<FitRequest>> JobSpeedModel::RecordSample(const StepSample& sample,
                                                              const std::string& reference_type,
                                                              const SpeedBounds& bounds) {
  ARYL_RETURN_IF_ERROR(ValidateStepSample(sample));
  auto it = std::find_if(samples_.begin(), samples_.end(),
                         [&](const StepSample& s) { return SameConfig(s, sample); });
  bool due = false;
  if (it == samples_.end()) {
    samples_.push_back(sample);
    fitted_count_.push_back(0);
    // A new configuration: refit unless the fit (not the bare prior) already
    // predicts it.
    due = fits_ == 0 || Off(sample);
  } else {
    // Count-weighted means of log step time and of relative spread.
    const double n0 = it->count, n1 = sample.count, n = n0 + n1;
    const double rel =
        (n0 * it->spread / it->step_time + n1 * sample.spread / sample.step_time) / n;
    it->step_time = std::exp((n0 * std::log(it->step_time) + n1 * std::log(sample.step_time)) / n);
    it->spread = rel * it->step_time;
    it->count += sample.count;
    const auto i = static_cast<std::size_t>(it - samples_.begin());
    // Doubled since the last fit, and the fit no longer matches it to within
    // its noise (a repeat that agrees with the fit changes nothing worth a refit).
    due = it->count >= 2 * fitted_count_[i] && Off(*it);
  }
  if (!due) return std::optional<FitRequest>();
  return std::optional<FitRequest>(Request(reference_type, bounds));
}

FitRequest JobSpeedModel::Request(const std::string& reference_type,
                                  const SpeedBounds& bounds) const {
  FitRequest r;
  r.samples = samples_;
  r.prior = prior_;
  r.reference_type = reference_type;
  r.bounds = bounds;
  // The last fit was over several configurations (not the closed form of
  // one): it is a warm start for the next.
  const bool warm = fits_ > 0 && std::count_if(fitted_count_.begin(), fitted_count_.end(),
                                                [](int c) { return c > 0; }) >= 2;
  if (warm) r.warm = params_;
  return r;
}

bool JobSpeedModel::FitDue() const {
  for (std::size_t i = 0; i < samples_.size(); ++i) {
    const StepSample& s = samples_[i];
    if (s.count != fitted_count_[i] && s.count >= 2 * fitted_count_[i] && (fits_ == 0 || Off(s)))
      return true;
  }
  return false;
}

Status JobSpeedModel::ApplyFit(const FitResult& fit) {
  if (fit.fitted_count.size() > samples_.size()) {
    return Status::FailedPrecondition("a fit of " + std::to_string(fit.fitted_count.size()) +
                                      " samples for a model of " +
                                      std::to_string(samples_.size()));
  }
  params_ = fit.params;
  for (std::size_t i = 0; i < fit.fitted_count.size(); ++i) fitted_count_[i] = fit.fitted_count[i];
  ++fits_;
  return Status::Ok();
}

double JobSpeedModel::Throughput(const std::string& gpu_type, int workers,
                                 int gpus_per_node) const {
  if (workers < 1) return 0;
  const double step =
      params_.StepTime(gpu_type, workers, Nodes(workers, gpus_per_node), global_batch_ / workers);
  return step > 0 && std::isfinite(step) ? 1.0 / step : 0;
}

// --- SpeedModels -------------------------------------------------------------------

SpeedModels::SpeedModels(SpeedModelOptions options) : options_(std::move(options)) {}

void SpeedModels::AddToPool(Pool& pool, const SpeedParams& p) {
  const std::vector<double> l = CoreLog(p);
  if (pool.log_sum.empty()) pool.log_sum.assign(kCore, 0.0);
  for (int k = 0; k < kCore; ++k) pool.log_sum[k] += l[k];
  ++pool.n;
  for (const auto& [type, speed] : p.type_speed) {
    auto& [n, sum] = pool.type_log[type];
    ++n;
    sum += std::log(speed);
  }
}

SpeedParams SpeedModels::PoolMean(const Pool& pool) {
  std::vector<double> m(kCore);
  for (int k = 0; k < kCore; ++k) m[k] = std::exp(pool.log_sum[k] / pool.n);
  SpeedParams p;
  p.alpha_c = m[0];
  p.beta_c = m[1];
  p.alpha_r = m[2];
  p.beta_r = m[3];
  p.alpha_n = m[4];
  p.beta_n = m[5];
  p.gamma = m[6];
  for (const auto& [type, ns] : pool.type_log) p.type_speed[type] = std::exp(ns.second / ns.first);
  return p;
}

Result<SpeedPrior> SpeedModels::CatalogPrior(const std::string& model) {
  if (auto it = catalog_priors_.find(model); it != catalog_priors_.end()) return it->second;
  // The table's curve as samples at the powers of two it allows, fitted from
  // the optimistic prior with the weakest pull towards it.
  std::vector<StepSample> samples;
  for (const std::string& type : options_.catalog->TypesWithTable(model)) {
    for (int w = 1; w <= options_.catalog_max_workers; w *= 2) {
      const double thr = options_.catalog->Throughput(model, type, w);
      if (!(thr > 0) || !std::isfinite(thr)) continue;
      StepSample s;
      s.gpu_type = type;
      s.workers = w;
      s.nodes = Nodes(w, options_.catalog_gpus_per_node);
      s.local_batch = 1.0 / w;
      s.step_time = 1.0 / thr;
      s.count = 1000;
      samples.push_back(s);
    }
  }
  SpeedPrior loose{OptimisticParams(), 10.0, 10.0};
  ARYL_ASSIGN_OR_RETURN(SpeedFit fit,
                        FitSpeed(samples, loose, options_.reference_type, options_.bounds));
  SpeedPrior prior{std::move(fit.params), options_.catalog_prior_sigma,
                   options_.catalog_prior_sigma};
  catalog_priors_.emplace(model, prior);
  return prior;
}

Status SpeedModels::AddJob(JobId job, const std::string& model, double global_batch) {
  if (jobs_.count(job))
    return Status::AlreadyExists("speed model of job " + std::to_string(job) + " exists");
  if (!(global_batch >= 0) || !std::isfinite(global_batch)) {
    return Status::InvalidArgument("job " + std::to_string(job) +
                                   ": global_batch must be >= 0, got " +
                                   std::to_string(global_batch));
  }
  SpeedPrior prior{OptimisticParams(), options_.optimistic_prior_sigma,
                   options_.optimistic_prior_sigma};
  PriorSource source = PriorSource::kOptimistic;
  auto same = by_model_.find(model);
  if (options_.catalog && !model.empty() && options_.catalog->HasModel(model)) {
    ARYL_ASSIGN_OR_RETURN(prior, CatalogPrior(model));
    source = PriorSource::kCatalog;
  } else if (!model.empty() && same != by_model_.end() && same->second.n > 0) {
    prior = SpeedPrior{PoolMean(same->second), options_.prior_sigma, options_.prior_sigma};
    source = PriorSource::kSameModel;
  } else if (all_.n > 0) {
    prior = SpeedPrior{PoolMean(all_), options_.prior_sigma, options_.prior_sigma};
    source = PriorSource::kCluster;
  }
  jobs_.emplace(job, JobSpeedModel(model, global_batch, std::move(prior), source));
  return Status::Ok();
}

Result<bool> SpeedModels::AddSample(JobId job, const StepSample& sample) {
  ARYL_ASSIGN_OR_RETURN(std::optional<FitRequest> request, RecordSample(job, sample));
  if (!request) return false;
  ARYL_ASSIGN_OR_RETURN(FitResult fit, RunFit(*request));
  return ApplyFit(job, fit);
}

Result<std::optional<FitRequest>> SpeedModels::RecordSample(JobId job, const StepSample& sample) {
  auto it = jobs_.find(job);
  if (it == jobs_.end())
    return Status::NotFound("speed sample for unknown job " + std::to_string(job));
  ARYL_ASSIGN_OR_RETURN(std::optional<FitRequest> request,
                        it->second.RecordSample(sample, options_.reference_type, options_.bounds));
  if (request) request->job = job;
  return request;
}

Result<FitResult> SpeedModels::RunFit(const FitRequest& request) {
  ARYL_ASSIGN_OR_RETURN(SpeedFit fit,
                        FitSpeed(request.samples, request.prior, request.reference_type,
                                 request.bounds, request.warm ? &*request.warm : nullptr));
  FitResult out;
  out.params = std::move(fit.params);
  out.fitted_count.reserve(request.samples.size());
  for (const StepSample& s : request.samples) out.fitted_count.push_back(s.count);
  return out;
}

Result<bool> SpeedModels::ApplyFit(JobId job, const FitResult& fit) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return false;
  ARYL_RETURN_IF_ERROR(it->second.ApplyFit(fit).WithContext("speed fit of job " + std::to_string(job)));
  return true;
}

std::optional<FitRequest> SpeedModels::DueFit(JobId job) const {
  auto it = jobs_.find(job);
  if (it == jobs_.end() || !it->second.FitDue()) return std::nullopt;
  FitRequest r = it->second.Request(options_.reference_type, options_.bounds);
  r.job = job;
  return r;
}

Status SpeedModels::RemoveJob(JobId job) {
  auto it = jobs_.find(job);
  if (it == jobs_.end())
    return Status::NotFound("speed model of unknown job " + std::to_string(job));
  const JobSpeedModel& m = it->second;
  if (m.measured()) {
    if (!m.model().empty()) AddToPool(by_model_[m.model()], m.params());
    AddToPool(all_, m.params());
  }
  jobs_.erase(it);
  return Status::Ok();
}

const JobSpeedModel* SpeedModels::Find(JobId job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? nullptr : &it->second;
}

double SpeedModels::Throughput(JobId job, const std::string& gpu_type, int workers,
                               int gpus_per_node) const {
  const JobSpeedModel* m = Find(job);
  return m ? m->Throughput(gpu_type, workers, gpus_per_node) : 0;
}

}  // namespace aryl::sched
