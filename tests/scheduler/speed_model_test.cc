// The per-job speed model: fits of synthetic noisy samples, priors, bounds,
// the journal form, and the core reading the fitted curves.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "aryl/sched/speed_models.h"
#include "test_util.h"

namespace aryl::sched {
namespace {

// Deterministic N(0, 1) draws (SplitMix64 + Box-Muller).
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : state_(seed) {}
  double Next() {
    const double u1 = (static_cast<double>(Bits() >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = (static_cast<double>(Bits() >> 11) + 0.5) / 9007199254740992.0;
    return std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t Bits() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

SpeedParams Truth() {
  SpeedParams p;
  p.alpha_c = 0.02;
  p.beta_c = 0.004;  // per sample: 256 samples at 1 worker = 1.02 s
  p.alpha_r = 0.05;
  p.beta_r = 0.004;
  p.alpha_n = 0.15;
  p.beta_n = 0.01;
  p.gamma = 2.0;
  p.type_speed["T4"] = 0.3;
  return p;
}

constexpr double kBatch = 256;

SpeedModelOptions Options() {
  SpeedModelOptions o;
  o.reference_type = "A100";
  return o;
}

int NodesOf(int w) { return (w + 7) / 8; }

StepSample Measure(const SpeedParams& p, const std::string& type, int w, double noise, Normal& z) {
  StepSample s;
  s.gpu_type = type;
  s.workers = w;
  s.nodes = NodesOf(w);
  s.local_batch = kBatch / w;
  s.step_time = p.StepTime(type, w, s.nodes, s.local_batch) * std::exp(noise * z.Next());
  s.spread = noise * s.step_time;
  s.count = 1;
  return s;
}

TEST(SpeedModelTest, RecoversKnownParametersFromNoisySamples) {
  // Samples with 3% noise at 1..64 A100s and 1..4 T4s: the fit predicts every
  // size within 5%, 24 A100s (never measured) too, and the T4 speed within 10%.
  const SpeedParams truth = Truth();
  Normal z(7);
  std::vector<StepSample> samples;
  for (int rep = 0; rep < 3; ++rep) {
    for (int w : {1, 2, 4, 8, 16, 32, 64}) samples.push_back(Measure(truth, "A100", w, 0.03, z));
    for (int w : {1, 2, 4}) samples.push_back(Measure(truth, "T4", w, 0.03, z));
  }
  SpeedPrior prior{OptimisticParams(), 10.0, 10.0};  // SpeedModels' optimistic prior
  Result<SpeedFit> fit = FitSpeed(samples, prior, "A100");
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  for (int w : {1, 2, 4, 8, 16, 24, 32, 64}) {
    const double want = truth.StepTime("A100", w, NodesOf(w), kBatch / w);
    const double got = fit->params.StepTime("A100", w, NodesOf(w), kBatch / w);
    EXPECT_NEAR(got / want, 1.0, 0.05) << w << " workers";
  }
  EXPECT_NEAR(fit->params.TypeSpeed("T4") / 0.3, 1.0, 0.1);
  EXPECT_LT(fit->rms_log_error, 0.05);
}

TEST(SpeedModelTest, OneSampleScalesThePriorsShape) {
  // A job seen only at 4 workers: its curve is the prior's, scaled so that
  // 4 workers match the measurement; neither blindly linear nor flat.
  SpeedParams shape = Truth();
  SpeedPrior prior{shape, 1.0, 1.0};
  StepSample s;
  s.gpu_type = "A100";
  s.workers = 4;
  s.local_batch = kBatch / 4;
  s.step_time = 2 * shape.StepTime("A100", 4, 1, kBatch / 4);
  s.count = 100;
  Result<SpeedFit> fit = FitSpeed({s}, prior, "A100");
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->params.StepTime("A100", 4, 1, kBatch / 4) / s.step_time, 1.0, 0.03);
  for (int w : {1, 8, 32}) {
    const double prior_ratio = shape.StepTime("A100", w, NodesOf(w), kBatch / w) /
                               shape.StepTime("A100", 4, 1, kBatch / 4);
    const double fit_ratio = fit->params.StepTime("A100", w, NodesOf(w), kBatch / w) /
                             fit->params.StepTime("A100", 4, 1, kBatch / 4);
    EXPECT_NEAR(fit_ratio / prior_ratio, 1.0, 0.25) << w << " workers";
  }
}

TEST(SpeedModelTest, SlowAcrossServersIsNotFastOnOne) {
  // A job measured at 1 worker and at 2 on two servers, as slow at both (a
  // fixed cost per step), as the live scheduler saw it on loopback. Whether
  // the 2-worker time is compute or sync across servers, nothing shows that
  // 2 workers on one server would be faster: the fit must not predict it.
  SpeedModels models(Options());
  ASSERT_TRUE(models.AddJob(1, "").ok());
  StepSample one{"cpu", 1, 1, 1.0, 0.0609, 0.00018, 37};
  StepSample two{"cpu", 2, 2, 0.5, 0.0619, 0.0010, 920};
  ASSERT_TRUE(models.AddSample(1, one).ok());
  ASSERT_TRUE(models.AddSample(1, two).ok());
  const double at1 = models.Throughput(1, "cpu", 1, 2);
  const double at2_one_server = models.Throughput(1, "cpu", 2, 2);
  EXPECT_NEAR(at1, 1 / 0.0609, 0.03 / 0.0609);
  EXPECT_LT(at2_one_server / at1, 1.2) << "predicted to scale on one server with nothing to show it";
  // A job that does scale across servers still fits as scaling.
  ASSERT_TRUE(models.AddJob(2, "").ok());
  ASSERT_TRUE(models.AddSample(2, StepSample{"cpu", 1, 1, 1.0, 0.097, 0.0003, 21}).ok());
  ASSERT_TRUE(models.AddSample(2, StepSample{"cpu", 2, 2, 0.5, 0.050, 0.0011, 1141}).ok());
  EXPECT_GT(models.Throughput(2, "cpu", 3, 2) / models.Throughput(2, "cpu", 1, 2), 2.5);
}

TEST(SpeedModelTest, OptimisticPriorIsTheLinearModel) {
  // No samples, no knowledge: throughput = workers at a unit global batch.
  SpeedModels models(Options());
  ASSERT_TRUE(models.AddJob(1, "").ok());
  for (int w : {1, 2, 8, 64}) EXPECT_NEAR(models.Throughput(1, "A100", w, 8) / w, 1.0, 0.01) << w;
  EXPECT_EQ(models.Find(1)->prior_source(), PriorSource::kOptimistic);
}

TEST(SpeedModelTest, ParametersStayInsideTheirBounds) {
  // Absurd measurements (1 ns and 1 day per step) pull the fit to its bounds, never past.
  SpeedBounds b;
  for (double step : {1e-9, 86400.0}) {
    std::vector<StepSample> samples;
    for (int w : {1, 2, 16}) {
      StepSample s;
      s.gpu_type = w == 2 ? "T4" : "A100";
      s.workers = w;
      s.nodes = NodesOf(w);
      s.local_batch = 1.0 / w;
      s.step_time = step * (w == 16 ? 1e3 : 1);
      samples.push_back(s);
    }
    Result<SpeedFit> fit = FitSpeed(samples, SpeedPrior{OptimisticParams()}, "A100", b);
    ASSERT_TRUE(fit.ok()) << fit.status().ToString();
    const SpeedParams& p = fit->params;
    for (double v : {p.alpha_c, p.beta_c, p.alpha_r, p.beta_r, p.alpha_n, p.beta_n}) {
      EXPECT_GE(v, b.time_lo * (1 - 1e-9));
      EXPECT_LE(v, b.time_hi * (1 + 1e-9));
    }
    EXPECT_GE(p.gamma, b.gamma_lo);
    EXPECT_LE(p.gamma, b.gamma_hi);
    EXPECT_GE(p.TypeSpeed("T4"), b.type_lo * (1 - 1e-9));
    EXPECT_LE(p.TypeSpeed("T4"), b.type_hi * (1 + 1e-9));
  }
}

TEST(SpeedModelTest, BadSamplesAreErrorsNamingTheField) {
  // A sample with 0 workers or a negative step time is refused, naming it.
  SpeedModels models(Options());
  ASSERT_TRUE(models.AddJob(1, "m").ok());
  StepSample s;
  s.gpu_type = "A100";
  s.step_time = -1;
  Result<bool> r = models.AddSample(1, s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("step_time"), std::string::npos);
  s.step_time = 1;
  s.nodes = 2;
  EXPECT_NE(models.AddSample(1, s).status().ToString().find("nodes"), std::string::npos);
  EXPECT_TRUE(models.AddSample(2, s).status().IsNotFound());
  EXPECT_FALSE(models.AddJob(1, "m").ok());
}

TEST(SpeedModelTest, FinishedJobsBecomeThePriorOfLaterOnes) {
  // Job 1 (model "m") is measured at 1..16 workers and ends; job 2 of "m"
  // starts from its shape (same-model), job 3 of another model from the
  // cluster's, and with a catalog a named model starts from its table.
  const SpeedParams truth = Truth();
  SpeedModels models(Options());
  ASSERT_TRUE(models.AddJob(1, "m", kBatch).ok());
  Normal z(3);
  for (int w : {1, 2, 4, 8, 16})
    ASSERT_TRUE(models.AddSample(1, Measure(truth, "A100", w, 0.02, z)).ok());
  const double thr16 = models.Throughput(1, "A100", 16, 8);
  ASSERT_TRUE(models.RemoveJob(1).ok());
  ASSERT_TRUE(models.AddJob(2, "m", kBatch).ok());
  ASSERT_TRUE(models.AddJob(3, "other", kBatch).ok());
  EXPECT_EQ(models.Find(2)->prior_source(), PriorSource::kSameModel);
  EXPECT_EQ(models.Find(3)->prior_source(), PriorSource::kCluster);
  EXPECT_NEAR(models.Throughput(2, "A100", 16, 8) / thr16, 1.0, 1e-9);

  SpeedModelOptions with_catalog = Options();
  with_catalog.catalog = testing::Catalog();
  SpeedModels named(with_catalog);
  ASSERT_TRUE(named.AddJob(1, "sublinear").ok());
  EXPECT_EQ(named.Find(1)->prior_source(), PriorSource::kCatalog);
  for (int w : {1, 4, 16, 64}) {
    EXPECT_NEAR(named.Throughput(1, "A100", w, 8) /
                    with_catalog.catalog->Throughput("sublinear", "A100", w),
                1.0, 0.12)
        << w;
  }
}

TEST(SpeedModelTest, RepeatedSamplesRefitOnlyWhenTheyDisagree) {
  // The same configuration again: merged, and refitted only once its steps
  // have doubled and the fit no longer matches it (a slowdown to 1.5 s).
  SpeedModels models(Options());
  ASSERT_TRUE(models.AddJob(1, "").ok());
  StepSample s;
  s.gpu_type = "A100";
  s.step_time = 0.5;
  s.count = 10;
  int refits = 0;
  for (int i = 0; i < 8; ++i) refits += *models.AddSample(1, s) ? 1 : 0;
  EXPECT_EQ(refits, 1);  // the first: the others agree with it
  EXPECT_EQ(models.Find(1)->samples().size(), 1u);
  EXPECT_EQ(models.Find(1)->samples()[0].count, 80);
  s.step_time = 1.5;
  s.count = 80;
  EXPECT_TRUE(*models.AddSample(1, s));
  EXPECT_NEAR(1 / models.Throughput(1, "A100", 1, 8), std::sqrt(0.5 * 1.5), 1e-3);
}

TEST(SpeedModelTest, NewConfigurationRefitsOnlyWhenTheFitMissesIt) {
  // A job that scales as the optimistic prior says: its second size is
  // predicted to within its noise, kept and not refitted; a size where it
  // stops scaling is.
  SpeedModels models(Options());
  ASSERT_TRUE(models.AddJob(1, "").ok());
  auto at = [](int workers, double step) {
    StepSample s;
    s.gpu_type = "A100";
    s.workers = workers;
    s.local_batch = 1.0 / workers;
    s.step_time = step;
    s.spread = 0.05 * step;
    s.count = 10;
    return s;
  };
  EXPECT_TRUE(*models.AddSample(1, at(1, 1.0)));  // the first always fits
  EXPECT_FALSE(*models.AddSample(1, at(2, 0.5)));
  EXPECT_EQ(models.Find(1)->samples().size(), 2u);
  EXPECT_EQ(models.Find(1)->fits(), 1);
  EXPECT_TRUE(*models.AddSample(1, at(4, 0.5)));  // predicted 0.25
  EXPECT_EQ(models.Find(1)->fits(), 2);
  EXPECT_NEAR(1 / models.Throughput(1, "A100", 4, 8), 0.5, 0.05);
}

TEST(SpeedModelTest, JsonRoundTripAnswersTheSame) {
  // The journal form restores samples, fits and the cluster's knowledge exactly.
  const SpeedParams truth = Truth();
  SpeedModels models(Options());
  Normal z(5);
  for (JobId id : {1, 2}) {
    ASSERT_TRUE(models.AddJob(id, "m", kBatch).ok());
    for (int w : {1, 4, 32})
      ASSERT_TRUE(models.AddSample(id, Measure(truth, w == 4 ? "T4" : "A100", w, 0.03, z)).ok());
  }
  ASSERT_TRUE(models.RemoveJob(1).ok());
  Result<SpeedModels> back = SpeedModels::FromJson(models.ToJson(), Options());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), models.ToJson());
  for (int w : {1, 3, 8, 64})
    EXPECT_EQ(back->Throughput(2, "T4", w, 8), models.Throughput(2, "T4", w, 8));
  ASSERT_TRUE(back->AddJob(3, "m", kBatch).ok());
  EXPECT_EQ(back->Find(3)->prior_source(), PriorSource::kSameModel);
  EXPECT_TRUE(SpeedModels::FromJson("{\"version\": 1}", Options()).status().IsCorruption());
}

TEST(SpeedModelTest, RecordRunApplyIsAddSample) {
  // A random sequence of samples of three jobs (sizes, types, repeats, counts)
  // into two models: AddSample, and RecordSample + RunFit + ApplyFit run back
  // to back. They answer alike after every sample and save the same text.
  const SpeedParams truth = Truth();
  SpeedModels inline_models(Options()), split(Options());
  for (JobId id : {1, 2, 3}) {
    ASSERT_TRUE(inline_models.AddJob(id, "m", kBatch).ok());
    ASSERT_TRUE(split.AddJob(id, "m", kBatch).ok());
  }
  Normal z(11), pick(12);
  auto draw = [&](int n) {  // 0..n-1
    return std::min(n - 1, static_cast<int>(std::fabs(pick.Next()) * n / 2.5));
  };
  int fits = 0;
  for (int k = 0; k < 200; ++k) {
    const JobId id = 1 + draw(3);
    const int w = 1 << draw(5);
    StepSample s = Measure(truth, draw(3) == 2 ? "T4" : "A100", w, 0.05, z);
    s.count = 1 + draw(40);
    Result<bool> a = inline_models.AddSample(id, s);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    Result<std::optional<FitRequest>> request = split.RecordSample(id, s);
    ASSERT_TRUE(request.ok()) << request.status().ToString();
    ASSERT_EQ(*a, request->has_value()) << "sample " << k;
    if (!*request) continue;
    ++fits;
    EXPECT_EQ((*request)->job, id);
    Result<FitResult> fit = SpeedModels::RunFit(**request);
    ASSERT_TRUE(fit.ok()) << fit.status().ToString();
    Result<bool> applied = split.ApplyFit(id, *fit);
    ASSERT_TRUE(applied.ok() && *applied) << applied.status().ToString();
    EXPECT_EQ(split.Throughput(id, "T4", w, 8), inline_models.Throughput(id, "T4", w, 8));
    EXPECT_FALSE(split.DueFit(id).has_value());  // nothing recorded since
  }
  EXPECT_GT(fits, 5);
  EXPECT_EQ(split.ToJson(), inline_models.ToJson());
}

TEST(SpeedModelTest, AFitAppliedLateCoversOnlyWhatItSaw) {
  // A fit runs while a new size is recorded: applied, it covers the first
  // size only; the new one, off the fit, is due against it (DueFit).
  SpeedModels models(Options());
  ASSERT_TRUE(models.AddJob(1, "").ok());
  StepSample one{"A100", 1, 1, 1.0, 1.0, 0.05, 10};
  StepSample four{"A100", 4, 1, 0.25, 0.5, 0.025, 10};  // predicted 0.25 from `one`
  Result<std::optional<FitRequest>> first = models.RecordSample(1, one);
  ASSERT_TRUE(first.ok() && first->has_value());
  Result<std::optional<FitRequest>> again = models.RecordSample(1, four);
  ASSERT_TRUE(again.ok() && again->has_value());  // due, but one is running
  Result<FitResult> fit = SpeedModels::RunFit(**first);
  ASSERT_TRUE(fit.ok());
  ASSERT_TRUE(*models.ApplyFit(1, *fit));
  EXPECT_EQ(models.Find(1)->fits(), 1);
  EXPECT_NEAR(1 / models.Throughput(1, "A100", 1, 8), 1.0, 0.01);
  std::optional<FitRequest> due = models.DueFit(1);
  ASSERT_TRUE(due.has_value());
  EXPECT_EQ(due->samples.size(), 2u);
  fit = SpeedModels::RunFit(*due);
  ASSERT_TRUE(fit.ok());
  ASSERT_TRUE(*models.ApplyFit(1, *fit));
  EXPECT_FALSE(models.DueFit(1).has_value());
  EXPECT_NEAR(1 / models.Throughput(1, "A100", 4, 8), 0.5, 0.05);
  // A result covering samples the model does not hold is refused.
  fit->fitted_count.push_back(1);
  EXPECT_EQ(models.ApplyFit(1, *fit).status().code(), Status::Code::kFailedPrecondition);
}

TEST(SpeedModelTest, ReplayOfRecordsAndFitsRebuildsTheModels) {
  // The daemon's journal: samples recorded, fits applied when they finish
  // (later samples meanwhile), and a snapshot taken while a fit runs. The
  // snapshot, then the records and fits after it, give the same models, bit
  // for bit, without fitting.
  const SpeedParams truth = Truth();
  SpeedModels live(Options());
  ASSERT_TRUE(live.AddJob(1, "m", kBatch).ok());
  Normal z(21);
  struct Row {
    std::optional<StepSample> sample;
    std::optional<FitResult> fit;
  };
  std::vector<Row> rows;
  std::optional<FitRequest> running;
  std::string snapshot;
  std::size_t snapshot_rows = 0;
  int k = 0;
  for (int w : {1, 2, 4, 4, 8, 2, 16, 16, 32, 8}) {
    StepSample s = Measure(truth, w == 16 ? "T4" : "A100", w, 0.03, z);
    s.count = 20;
    Result<std::optional<FitRequest>> due = live.RecordSample(1, s);
    ASSERT_TRUE(due.ok());
    rows.push_back({s, std::nullopt});
    if (*due && !running) running = std::move(**due);
    if (k++ % 2 == 1 && running) {  // it finishes a sample later
      Result<FitResult> fit = SpeedModels::RunFit(*running);
      ASSERT_TRUE(fit.ok());
      ASSERT_TRUE(*live.ApplyFit(1, *fit));
      rows.push_back({std::nullopt, *fit});
      running = live.DueFit(1);
    }
    if (k == 5) {
      EXPECT_TRUE(running.has_value()) << "the snapshot is taken while a fit runs";
      snapshot = live.ToJson();
      snapshot_rows = rows.size();
    }
  }
  ASSERT_GE(live.Find(1)->fits(), 3);
  Result<SpeedModels> replay = SpeedModels::FromJson(snapshot, Options());
  ASSERT_TRUE(replay.ok());
  for (std::size_t i = snapshot_rows; i < rows.size(); ++i) {
    if (rows[i].sample) ASSERT_TRUE(replay->RecordSample(1, *rows[i].sample).ok());
    if (rows[i].fit) ASSERT_TRUE(*replay->ApplyFit(1, *rows[i].fit));
  }
  EXPECT_EQ(replay->ToJson(), live.ToJson());
  EXPECT_EQ(replay->DueFit(1).has_value(), live.DueFit(1).has_value());
}

TEST(SpeedModelTest, AFitForARemovedJobIsIgnored) {
  // The job ends while its fit runs: the result changes nothing, the job's
  // unfitted model already joined the cluster's knowledge.
  SpeedModels models(Options());
  ASSERT_TRUE(models.AddJob(1, "m").ok());
  Result<std::optional<FitRequest>> request =
      models.RecordSample(1, StepSample{"A100", 2, 1, 0.5, 0.3, 0.01, 50});
  ASSERT_TRUE(request.ok() && request->has_value());
  ASSERT_TRUE(models.RemoveJob(1).ok());
  const std::string before = models.ToJson();
  Result<FitResult> fit = SpeedModels::RunFit(**request);
  ASSERT_TRUE(fit.ok());
  Result<bool> applied = models.ApplyFit(1, *fit);
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_FALSE(*applied);
  EXPECT_EQ(models.ToJson(), before);
  EXPECT_EQ(models.size(), 0u);
  EXPECT_FALSE(models.DueFit(1).has_value());
}

TEST(SpeedModelTest, TheCoreDecidesWithTheFittedCurve) {
  // The catalog says "linear"; the job's measurements say it is twice as slow
  // at 8 workers: after RefreshSpeed the core's throughput and finish estimate
  // follow the measurement, and allowed sizes stay the catalog's.
  auto models = std::make_shared<SpeedModels>(Options());
  SchedulerConfig config;
  config.speed = models;
  auto sched = Scheduler::Create("aryl", testing::Servers(1, 0), testing::Catalog(), config);
  ASSERT_TRUE(sched.ok()) << sched.status().ToString();
  ASSERT_TRUE(models->AddJob(1, "holes").ok());
  ASSERT_TRUE((*sched)->Handle({0, JobSubmitted{testing::Inelastic(1, 8, 8000, "holes")}}).ok());
  const JobInfo* job = (*sched)->state().job(1);
  ASSERT_NE(job, nullptr);
  EXPECT_NEAR(job->throughput, 8.0, 0.1);  // the optimistic prior: linear
  EXPECT_EQ(job->Thr(0, 16), 0);           // a 0 cell stays not allowed
  StepSample s;
  s.gpu_type = "A100";
  s.workers = 8;
  s.local_batch = 1.0 / 8;
  s.step_time = 0.25;  // 4 iterations/s
  s.count = 100;
  ASSERT_TRUE(*models->AddSample(1, s));
  Status refreshed = (*sched)->RefreshSpeed(100, 1);
  ASSERT_TRUE(refreshed.ok()) << refreshed.ToString();
  job = (*sched)->state().job(1);
  EXPECT_NEAR(job->throughput, 4.0, 0.1);
  EXPECT_NEAR((*sched)->state().EstimatedFinishTime(1), 100 + (8000 - 8.0 * 100) / 4.0, 30);
  EXPECT_FALSE((*sched)->RefreshSpeed(50, 1).ok());
  EXPECT_TRUE((*sched)->RefreshSpeed(100, 99).IsNotFound());
}

}  // namespace
}  // namespace aryl::sched
