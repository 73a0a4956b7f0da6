// FitSpeed: Pollux's step-time model fitted on log step time with Eigen's
// Levenberg-Marquardt (MINPACK lmder, analytic Jacobian). See
// speed_model.h for the model, the residuals and the bounds.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <unsupported/Eigen/NonLinearOptimization>

#include "aryl/sched/speed_model.h"

namespace aryl::sched {
namespace {

constexpr int kTimes = 6;       // alpha_c, beta_c, alpha_r, beta_r, alpha_n, beta_n
constexpr int kCoreParams = 7;  // the times, then gamma
constexpr int kFirstType = kCoreParams;
// The prior holds the times' shape (each time's log distance from the prior
// less their mean distance, prior.sigma) and only weakly their common scale
// (the mean distance, kScaleSigma): with few samples a job differs from its
// prior mostly by size (a bigger model computes and communicates longer alike).
constexpr double kScaleSigma = 10;
// Intra- and inter-node sync are tied loosely (log-space std of their ratio):
// without samples on one server, its sync is taken to cost like the one
// across servers, within a factor of about 4, not to be free. Otherwise a
// job measured at 1 worker and then at 2 across servers, as slow there,
// fits as "sync across servers" and is predicted to scale on one server
// with nothing to show it (docs/scheduler.md, "Measured speed").
constexpr double kLinkSigma = 1.5;

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }
double Logit(double s) {
  s = std::clamp(s, 1e-9, 1 - 1e-9);
  return std::log(s / (1 - s));
}

// One bounded parameter: p = exp(L + (H - L) sigmoid(z)) for log-bounded ones
// (times, type speeds), p = L + (H - L) sigmoid(z) for gamma.
struct Bound {
  Bound(double lo_, double hi_, bool log_scale_)
      : lo(lo_),
        hi(hi_),
        log_scale(log_scale_),
        log_lo(std::log(lo_)),
        log_span(std::log(hi_) - std::log(lo_)) {}
  double lo = 0, hi = 1;
  bool log_scale = true;
  double log_lo = 0, log_span = 0;
  double LogFromZ(double z) const {
    return log_scale ? log_lo + log_span * Sigmoid(z) : std::log(lo + (hi - lo) * Sigmoid(z));
  }
  double FromZ(double z) const {
    return log_scale ? std::exp(LogFromZ(z)) : lo + (hi - lo) * Sigmoid(z);
  }
  // Starts strictly inside, where the sigmoid still has a slope.
  double ToZ(double p) const {
    p = std::clamp(p, lo, hi);
    const double s = log_scale ? (std::log(p) - std::log(lo)) / (std::log(hi) - std::log(lo))
                               : (p - lo) / (hi - lo);
    return Logit(std::clamp(s, 0.01, 0.99));
  }
};

struct Problem {
  const std::vector<StepSample>* samples = nullptr;
  std::vector<double> sample_weight;  // 1 / sigma per sample
  std::vector<double> sample_log;     // log of each sample's step time
  std::vector<double> fixed_speed;    // type speed of samples whose type is not fitted
  std::vector<std::string> types;     // fitted type speeds, sorted
  std::vector<int> sample_type;       // index into types, -1 = reference/other
  std::vector<Bound> bounds;          // per parameter
  std::vector<double> prior_log;      // log of the prior's value per parameter
  std::vector<double> prior_weight;   // 1 / sigma per parameter
  const SpeedParams* prior = nullptr;

  int inputs() const { return static_cast<int>(bounds.size()); }
  int values() const { return static_cast<int>(samples->size()) + inputs() + 3; }

  // The parameters at z.
  SpeedParams Params(const Eigen::VectorXd& z) const {
    auto time = [&](int k) { return bounds[k].FromZ(z[k]); };
    SpeedParams p;
    p.alpha_c = time(0);
    p.beta_c = time(1);
    p.alpha_r = time(2);
    p.beta_r = time(3);
    p.alpha_n = time(4);
    p.beta_n = time(5);
    p.gamma = bounds[6].FromZ(z[6]);
    p.type_speed = prior->type_speed;
    for (std::size_t i = 0; i < types.size(); ++i) {
      p.type_speed[types[i]] = bounds[kFirstType + i].FromZ(z[kFirstType + static_cast<int>(i)]);
    }
    return p;
  }

  void Residuals(const Eigen::VectorXd& z, Eigen::VectorXd& r) const {
    const int n = inputs();
    double logp[64];
    double p[64];
    for (int k = 0; k < n; ++k) {
      logp[k] = bounds[k].LogFromZ(z[k]);
      p[k] = std::exp(logp[k]);
    }
    const double gamma = p[6];
    const auto& s = *samples;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const int t = sample_type[i];
      const double speed = t >= 0 ? p[kFirstType + t] : fixed_speed[i];
      const double tg = (p[0] + p[1] * s[i].local_batch) / speed;
      double step = tg;
      if (s[i].workers > 1) {
        const double ts =
            s[i].nodes <= 1 ? p[2] + p[3] * (s[i].workers - 2) : p[4] + p[5] * (s[i].workers - 2);
        step =
            gamma <= 1 ? tg + ts : std::pow(std::pow(tg, gamma) + std::pow(ts, gamma), 1.0 / gamma);
      }
      r[static_cast<int>(i)] = (std::log(step) - sample_log[i]) * sample_weight[i];
    }
    const int base = static_cast<int>(s.size());
    double mean = 0;
    for (int k = 0; k < kTimes; ++k) mean += logp[k] - prior_log[k];
    mean /= kTimes;
    for (int k = 0; k < n; ++k) {
      const double d = logp[k] - prior_log[k];
      r[base + k] = (k < kTimes ? d - mean : d) * prior_weight[k];
    }
    r[base + n] = mean / kScaleSigma;
    r[base + n + 1] = (logp[4] - logp[2]) / kLinkSigma;  // alpha_n vs alpha_r
    r[base + n + 2] = (logp[5] - logp[3]) / kLinkSigma;  // beta_n vs beta_r
  }

  // d residual / d z, analytically (the same expressions as Residuals).
  void Jacobian(const Eigen::VectorXd& z, Eigen::MatrixXd& J) const {
    const int n = inputs();
    double p[64];
    double dlog[64];  // d log p_k / d z_k
    for (int k = 0; k < n; ++k) {
      const double sg = Sigmoid(z[k]);
      const double ds = sg * (1 - sg);
      p[k] = bounds[k].FromZ(z[k]);
      dlog[k] =
          bounds[k].log_scale ? bounds[k].log_span * ds : (bounds[k].hi - bounds[k].lo) * ds / p[k];
    }
    J.setZero();
    const double g = p[6];
    const auto& s = *samples;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const int row = static_cast<int>(i);
      const int t = sample_type[i];
      const double v = t >= 0 ? p[kFirstType + t] : fixed_speed[i];
      const double m = s[i].local_batch;
      const double tg = (p[0] + p[1] * m) / v;
      // d log step / d tg, d ts, d gamma.
      double dtg = 1 / tg, dts = 0, dg = 0;
      int a = 2, b = 3;
      double extra = 0;
      if (s[i].workers > 1) {
        if (s[i].nodes > 1) a = 4, b = 5;
        extra = s[i].workers - 2;
        const double ts = p[a] + p[b] * extra;
        if (g <= 1) {
          dtg = dts = 1 / (tg + ts);
        } else {
          const double tgg = std::pow(tg, g), tsg = std::pow(ts, g), sum = tgg + tsg;
          dtg = tgg / (tg * sum);
          dts = tsg / (ts * sum);
          dg = -std::log(sum) / (g * g) + (tgg * std::log(tg) + tsg * std::log(ts)) / (g * sum);
        }
      }
      const double w = sample_weight[i];
      // Through log p: d/dz_k = (d log step / d p_k) p_k dlog_k.
      J(row, 0) = w * dtg / v * p[0] * dlog[0];
      J(row, 1) = w * dtg * m / v * p[1] * dlog[1];
      if (s[i].workers > 1) {
        J(row, a) = w * dts * p[a] * dlog[a];
        J(row, b) = w * dts * extra * p[b] * dlog[b];
        J(row, 6) = w * dg * p[6] * dlog[6];
      }
      if (t >= 0) J(row, kFirstType + t) = w * dtg * (-tg / v) * v * dlog[kFirstType + t];
    }
    const int base = static_cast<int>(s.size());
    for (int k = 0; k < n; ++k) {
      for (int j = 0; j < n; ++j) {
        const double shape = (k == j ? 1.0 : 0.0) - (k < kTimes && j < kTimes ? 1.0 / kTimes : 0.0);
        if (shape != 0) J(base + k, j) = prior_weight[k] * shape * dlog[j];
      }
    }
    for (int j = 0; j < kTimes; ++j) J(base + n, j) = dlog[j] / kTimes / kScaleSigma;
    J(base + n + 1, 2) = -dlog[2] / kLinkSigma;
    J(base + n + 1, 4) = dlog[4] / kLinkSigma;
    J(base + n + 2, 3) = -dlog[3] / kLinkSigma;
    J(base + n + 2, 5) = dlog[5] / kLinkSigma;
  }
};

// The functor shape Eigen's NumericalDiff and LevenbergMarquardt expect.
struct Functor {
  using Scalar = double;
  enum { InputsAtCompileTime = Eigen::Dynamic, ValuesAtCompileTime = Eigen::Dynamic };
  using InputType = Eigen::VectorXd;
  using ValueType = Eigen::VectorXd;
  using JacobianType = Eigen::MatrixXd;

  const Problem* problem = nullptr;
  int inputs() const { return problem->inputs(); }
  int values() const { return problem->values(); }
  int operator()(const Eigen::VectorXd& z, Eigen::VectorXd& r) const {
    problem->Residuals(z, r);
    return 0;
  }
  int df(const Eigen::VectorXd& z, Eigen::MatrixXd& J) const {
    problem->Jacobian(z, J);
    return 0;
  }
};

bool OneConfiguration(const std::vector<StepSample>& samples) {
  const StepSample& a = samples.front();
  for (const auto& b : samples) {
    if (b.gpu_type != a.gpu_type || b.workers != a.workers || b.nodes != a.nodes ||
        b.local_batch != a.local_batch) {
      return false;
    }
  }
  return true;
}

// Samples at one configuration say one thing: how much slower or faster than
// the prior the job is there. The fit is then the prior with every time scaled
// by the weighted mean ratio (step time is homogeneous of degree 1 in the
// times, so the shape residuals stay 0 and the data residuals vanish; the
// scale's own residual, log(scale) / 10, is all the solver could still trade
// off against the data, and it weighs 1/100 of a sample's at 10% noise).
SpeedFit ScaledPrior(const std::vector<StepSample>& samples, const SpeedPrior& prior,
                     const SpeedBounds& bounds) {
  double num = 0, den = 0;
  for (const auto& s : samples) {
    const double sigma =
        std::max(kMinSampleSigma, s.spread / s.step_time / std::sqrt(static_cast<double>(s.count)));
    const double w = 1 / (sigma * sigma);
    num += w * (std::log(s.step_time) -
                std::log(prior.params.StepTime(s.gpu_type, s.workers, s.nodes, s.local_batch)));
    den += w;
  }
  const double c = std::exp(num / den);
  SpeedFit fit;
  SpeedParams& p = fit.params;
  p = prior.params;
  for (double* t : {&p.alpha_c, &p.beta_c, &p.alpha_r, &p.beta_r, &p.alpha_n, &p.beta_n}) {
    *t = std::clamp(*t * c, bounds.time_lo, bounds.time_hi);
  }
  p.gamma = std::clamp(p.gamma, bounds.gamma_lo, bounds.gamma_hi);
  double sum = 0;
  for (const auto& s : samples) {
    const double e =
        std::log(p.StepTime(s.gpu_type, s.workers, s.nodes, s.local_batch)) - std::log(s.step_time);
    sum += e * e;
  }
  fit.rms_log_error = std::sqrt(sum / static_cast<double>(samples.size()));
  return fit;
}

}  // namespace

Status ValidateStepSample(const StepSample& s, const std::string& what) {
  const std::string who = what + ": ";
  if (s.gpu_type.empty()) return Status::InvalidArgument(who + "empty gpu_type");
  if (s.workers < 1)
    return Status::InvalidArgument(who + "workers must be >= 1, got " + std::to_string(s.workers));
  if (s.nodes < 1 || s.nodes > s.workers) {
    return Status::InvalidArgument(who + "nodes must be in [1, workers=" +
                                   std::to_string(s.workers) + "], got " + std::to_string(s.nodes));
  }
  if (!(s.local_batch > 0) || !std::isfinite(s.local_batch)) {
    return Status::InvalidArgument(who + "local_batch must be > 0, got " +
                                   std::to_string(s.local_batch));
  }
  if (!(s.step_time > 0) || !std::isfinite(s.step_time)) {
    return Status::InvalidArgument(who + "step_time must be > 0, got " +
                                   std::to_string(s.step_time));
  }
  if (!(s.spread >= 0) || !std::isfinite(s.spread)) {
    return Status::InvalidArgument(who + "spread must be >= 0, got " + std::to_string(s.spread));
  }
  if (s.count < 1)
    return Status::InvalidArgument(who + "count must be >= 1, got " + std::to_string(s.count));
  return Status::Ok();
}

double SpeedParams::TypeSpeed(const std::string& gpu_type) const {
  auto it = type_speed.find(gpu_type);
  return it == type_speed.end() ? 1.0 : it->second;
}

double SpeedParams::StepTime(const std::string& gpu_type, int workers, int nodes,
                             double local_batch) const {
  const double tg = (alpha_c + beta_c * local_batch) / TypeSpeed(gpu_type);
  if (workers <= 1) return tg;
  const double ts =
      nodes <= 1 ? alpha_r + beta_r * (workers - 2) : alpha_n + beta_n * (workers - 2);
  if (gamma <= 1) return tg + ts;
  return std::pow(std::pow(tg, gamma) + std::pow(ts, gamma), 1.0 / gamma);
}

SpeedParams OptimisticParams() {
  SpeedParams p;
  p.alpha_c = 1e-6;
  p.beta_c = 1.0;
  p.alpha_r = p.alpha_n = 1e-6;
  p.beta_r = p.beta_n = 1e-7;
  p.gamma = 1.0;
  return p;
}

Result<SpeedFit> FitSpeed(const std::vector<StepSample>& samples, const SpeedPrior& prior,
                          const std::string& reference_type, const SpeedBounds& bounds,
                          const SpeedParams* warm) {
  if (!(prior.sigma > 0) || !(prior.type_sigma > 0)) {
    return Status::InvalidArgument("speed prior: sigma and type_sigma must be > 0");
  }
  for (std::size_t i = 0; i < samples.size(); ++i)
    ARYL_RETURN_IF_ERROR(ValidateStepSample(samples[i], "speed sample " + std::to_string(i)));
  SpeedFit fit;
  fit.params = prior.params;
  if (samples.empty()) return fit;
  if (OneConfiguration(samples)) return ScaledPrior(samples, prior, bounds);

  Problem pb;
  pb.samples = &samples;
  pb.prior = &prior.params;
  std::set<std::string> types;
  for (const auto& s : samples) {
    if (s.gpu_type != reference_type) types.insert(s.gpu_type);
    const double rel = s.spread / s.step_time / std::sqrt(static_cast<double>(s.count));
    pb.sample_weight.push_back(1.0 / std::max(kMinSampleSigma, rel));
  }
  pb.types.assign(types.begin(), types.end());
  if (pb.types.size() > 64 - kFirstType)
    return Status::InvalidArgument("speed samples: too many GPU types");
  for (const auto& s : samples) {
    auto it = std::find(pb.types.begin(), pb.types.end(), s.gpu_type);
    pb.sample_type.push_back(it == pb.types.end() ? -1 : static_cast<int>(it - pb.types.begin()));
    pb.sample_log.push_back(std::log(s.step_time));
    pb.fixed_speed.push_back(prior.params.TypeSpeed(s.gpu_type));
  }
  const Bound time{bounds.time_lo, bounds.time_hi, true};
  const Bound gamma{bounds.gamma_lo, bounds.gamma_hi, false};
  const Bound type{bounds.type_lo, bounds.type_hi, true};
  pb.bounds.assign(6, time);
  pb.bounds.push_back(gamma);
  pb.bounds.insert(pb.bounds.end(), pb.types.size(), type);
  const SpeedParams& q = prior.params;
  std::vector<double> start = {q.alpha_c, q.beta_c, q.alpha_r, q.beta_r,
                               q.alpha_n, q.beta_n, q.gamma};
  for (const auto& t : pb.types) start.push_back(q.TypeSpeed(t));
  Eigen::VectorXd z(pb.inputs());
  for (int k = 0; k < pb.inputs(); ++k) {
    const double p = std::clamp(start[k], pb.bounds[k].lo, pb.bounds[k].hi);
    z[k] = pb.bounds[k].ToZ(p);
    pb.prior_log.push_back(std::log(p));
    pb.prior_weight.push_back(1.0 / (k < kCoreParams ? prior.sigma : prior.type_sigma));
  }

  // Without a warm start, two starts, the better kept: the prior, and a
  // neutral point scaled to the measurements (at the optimistic prior the
  // sync terms are so small that their gradients vanish and the solver would
  // stop there). With one (the job's last fit over several configurations),
  // that start alone: the new sample moves the optimum, rarely its basin, and
  // the extra starts were half the fitting cost in aryl-sim with no gain in
  // JCT (docs/performance.md, "What learning speed costs").
  double log_step = 0, log_batch = 0;
  for (const auto& s : samples) {
    log_step += std::log(s.step_time);
    log_batch += std::log(s.local_batch);
  }
  const double t = std::exp(log_step / static_cast<double>(samples.size()));
  const double m = std::exp(log_batch / static_cast<double>(samples.size()));
  Eigen::VectorXd neutral = z;
  const double neutral_start[kCoreParams] = {0.2 * t, 0.8 * t / m, 0.1 * t, 0.01 * t,
                                             0.2 * t, 0.02 * t,    2.0};
  for (int k = 0; k < kCoreParams; ++k) neutral[k] = pb.bounds[k].ToZ(neutral_start[k]);

  Functor f;
  f.problem = &pb;
  double best = std::numeric_limits<double>::infinity();
  Eigen::VectorXd best_z = z;
  Eigen::VectorXd r(pb.values());
  // One configuration only: the prior's shape is all there is to go on.
  bool sizes = false;
  for (const auto& s : samples) sizes = sizes || s.workers != samples.front().workers;
  std::vector<Eigen::VectorXd> starts;
  if (warm != nullptr) {
    // The last fit, with the prior's start for fitted types it lacks.
    Eigen::VectorXd w = z;
    const double ws[kCoreParams] = {warm->alpha_c, warm->beta_c, warm->alpha_r, warm->beta_r,
                                    warm->alpha_n, warm->beta_n, warm->gamma};
    for (int k = 0; k < kCoreParams; ++k) w[k] = pb.bounds[k].ToZ(ws[k]);
    for (std::size_t i = 0; i < pb.types.size(); ++i) {
      auto it = warm->type_speed.find(pb.types[i]);
      if (it != warm->type_speed.end())
        w[kFirstType + static_cast<int>(i)] = pb.bounds[kFirstType + i].ToZ(it->second);
    }
    starts.push_back(w);
  } else {
    // No earlier fit of this shape: the prior and the neutral point.
    starts.push_back(z);
    if (sizes) starts.push_back(neutral);
  }
  for (Eigen::VectorXd x : starts) {
    // A start that fits the samples to within their noise: done.
    if (best < std::numeric_limits<double>::infinity()) {
      double sum = 0;
      for (std::size_t i = 0; i < samples.size(); ++i)
        sum += r[static_cast<int>(i)] * r[static_cast<int>(i)];
      if (sum <= 4.0 * static_cast<double>(samples.size())) break;
    }
    Eigen::LevenbergMarquardt<Functor, double> lm(f);
    lm.parameters.maxfev = 200 * (pb.inputs() + 1);
    // Samples are good to a few percent: 1e-4 relative is plenty.
    lm.parameters.xtol = 1e-4;
    lm.parameters.ftol = 1e-4;
    lm.minimize(x);
    fit.evaluations += static_cast<int>(lm.nfev + lm.njev);
    pb.Residuals(x, r);
    if (r.squaredNorm() < best) {
      best = r.squaredNorm();
      best_z = x;
    }
  }
  z = best_z;
  fit.params = pb.Params(z);
  double sum = 0;
  for (const auto& s : samples) {
    const double e = std::log(fit.params.StepTime(s.gpu_type, s.workers, s.nodes, s.local_batch)) -
                     std::log(s.step_time);
    sum += e * e;
  }
  fit.rms_log_error = std::sqrt(sum / static_cast<double>(samples.size()));
  return fit;
}

}  // namespace aryl::sched
