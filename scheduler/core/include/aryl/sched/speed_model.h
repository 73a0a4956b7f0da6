// Per-job speed models fitted online from measured step times.
//
// The model (Pollux's form, Qiao et al., OSDI'21, with a per-GPU-type speed):
//   step(w, n, m, t) = (Tg^g + Ts^g)^(1/g)                         seconds per step
//   Tg = (alpha_c + beta_c * m) / r_t                                compute, m = local batch
//   Ts = 0                          when w == 1                      gradient sync
//        alpha_r + beta_r * (w - 2) when n == 1 (one server: intra-node)
//        alpha_n + beta_n * (w - 2) when n >  1 (inter-node)
// w workers on n servers of GPU type t; g in [1, 10] is the p-norm overlap of
// compute and communication (1: none, large: full overlap); r_t is the type's
// compute speed relative to the reference type (r = 1 there). Throughput
// (iterations/s) = 1 / step. With a fixed global batch B, m = B / w.
//
// Fitting (FitSpeed): maximum a posteriori on log step time. Each sample's
// residual is (log model - log measured) / sigma, sigma the sample's relative
// spread over sqrt(count), at least kMinSampleSigma; each parameter's residual
// is prior.sigma-scaled: for the six times, their log distance from the
// prior's less the mean distance (the shape), and the mean distance itself
// over 10 (the scale, nearly free); for gamma and type speeds, the log
// distance. So with one sample the curve is the prior's shape scaled to the
// measurement (a bigger model computes and communicates longer alike), and
// as samples at new sizes and types arrive the
// data outweighs the prior. Bounds by construction: every parameter is a
// sigmoid of an unconstrained variable between its bounds (SpeedBounds), so the
// solver (Eigen's Levenberg-Marquardt, MINPACK's lmder) never leaves them.
//
// Pure and deterministic: no clock, no threads, no randomness; the same
// samples and prior give the same fit bit for bit.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl::sched {

// One robust summary of a job's steps at one configuration, as the runtime
// reports it (warm-up steps after a resize excluded).
struct StepSample {
  std::string gpu_type;    // the slowest GPU type of the placement
  int workers = 1;         // world size, >= 1
  int nodes = 1;           // servers the workers span, 1..workers
  double local_batch = 1;  // samples per worker per step, > 0 (any consistent unit)
  double step_time = 0;    // median seconds per step, > 0
  double spread = 0;       // robust spread of the step times (seconds, >= 0; 0 = unknown)
  int count = 1;           // steps summarised, >= 1
};

struct SpeedParams {
  double alpha_c = 0, beta_c = 1;  // compute (s, s per sample) on the reference type
  double alpha_r = 0, beta_r = 0;  // intra-node sync (s, s per extra worker)
  double alpha_n = 0, beta_n = 0;  // inter-node sync
  double gamma = 1;                // overlap p-norm, [1, 10]
  // Per GPU type: compute speed relative to the reference type (absent = 1).
  std::map<std::string, double> type_speed;

  double TypeSpeed(const std::string& gpu_type) const;
  // Seconds per step; > 0 for valid parameters.
  double StepTime(const std::string& gpu_type, int workers, int nodes, double local_batch) const;
};

struct SpeedBounds {
  double time_lo = 1e-7, time_hi = 1e4;  // every alpha and beta (s)
  double gamma_lo = 1, gamma_hi = 10;
  double type_lo = 1e-3, type_hi = 1e3;  // type speed ratios
};

inline constexpr double kMinSampleSigma = 0.02;  // relative; no sample is trusted more

// What the fit shrinks towards.
struct SpeedPrior {
  SpeedParams params;
  double sigma = 1.0;       // log-space std of every parameter (small = strong prior)
  double type_sigma = 1.0;  // log-space std of each type speed ratio
};

struct SpeedFit {
  SpeedParams params;
  double rms_log_error = 0;  // over the samples (unweighted)
  int evaluations = 0;       // model evaluations the solver used
};

// InvalidArgument naming the bad field (and `what`, e.g. "speed sample 3").
Status ValidateStepSample(const StepSample& sample, const std::string& what = "speed sample");

// Fits `samples` (validated: InvalidArgument names the bad field) starting
// from and shrinking towards `prior`. Type speeds are fitted for every type
// in the samples other than `reference_type`; other types keep the prior's.
// No samples: the prior itself. Samples at one configuration only: the prior
// with every time scaled so that it matches them (closed form: the MAP
// optimum but for the weak scale residual). Otherwise the solver starts from `warm` (the job's last
// fit, when given), then the prior, then a neutral point scaled to the
// samples, and stops at the first start that fits the samples to within
// their noise (sum of squared weighted residuals <= 4 per sample); otherwise
// it keeps the best. The same inputs give the same fit.
Result<SpeedFit> FitSpeed(const std::vector<StepSample>& samples, const SpeedPrior& prior,
                          const std::string& reference_type, const SpeedBounds& bounds = {},
                          const SpeedParams* warm = nullptr);

// The documented optimistic prior (Pollux's: a job scales perfectly until it
// is measured otherwise): 1 s per step of compute at a local batch of 1, no
// fixed compute cost, near-zero sync costs, no overlap, every type as fast as
// the reference. With a fixed global batch it is the linear model
// throughput = workers.
SpeedParams OptimisticParams();

}  // namespace aryl::sched
