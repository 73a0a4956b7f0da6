// Measured speed: every job's throughput model, fitted online from rank 0's
// step-time summaries (protocol StepStats) with the core's fitting code
// (aryl/sched/speed_models.h), so the live scheduler decides on what it
// measures, as aryl-sim --speed-knowledge learned does. The simulator fits
// at once (SpeedModels::AddSample); the daemon fits on a thread of its own
// (SpeedFitter), so no request and no round waits for a fit.
//
// The path of one summary:
//  1. rank 0's runtime summarises the steps since its last summary (median,
//     spread, count; warm-up after a start or resize excluded) and sends it
//     with its progress (WorkerProgress.stats); its agent relays it once
//     (JobProgress.stats).
//  2. AddStepStats checks that the job ran at the summary's size throughout
//     (no change pending) and makes it a StepSample at the job's live
//     configuration: workers, servers they span, the slowest GPU type.
//  3. The sample is a core-journal row marked deferred, then
//     SpeedModels::RecordSample merges it. When a fit is due and none of the
//     job's is queued or running, its request (a copy of the samples, prior,
//     bounds and warm start) goes to the fitting thread; else it waits for
//     step 5.
//  4. The fitting thread runs SpeedModels::RunFit (pure, on the copy).
//  5. SpeedFitTick, on the serving thread every tick, takes the finished
//     fits. Each is a core-journal row (the parameters and the step counts
//     it covered), then SpeedModels::ApplyFit, Scheduler::RefreshSpeed and a
//     round due (knapsack, reclaim costs, finish estimates see the new
//     curve); aryl_speed_fits_total. Samples recorded while it ran are
//     checked against the new fit (SpeedModels::DueFit) and may start the
//     next. A fit of a job that ended meanwhile is dropped.
// Replay applies the same rows in the same order: a deferred sample is only
// recorded and a fit row installs the journaled parameters without fitting
// (ApplySpeedFit), so the models after a restart are the ones before it, bit
// for bit. Sample rows of older journals (not deferred) fit inline as they
// did then (ApplySpeedSample). The journal's snapshot holds the models (in
// its text after the core's, core_journal.h; snapshots saved before: meta
// "speed_models"). A fit not journaled yet at a stop, or of models that a
// reload replaced, is not lost for good: after a rebuild every job's due fit
// starts again (SubmitDueFits).
#include <cmath>
#include <limits>

#include "core_journal.h"
#include "daemon_impl.h"

namespace aryl::daemon {

namespace {
constexpr const char* kSpeedModelsKey = "speed_models";
constexpr const char* kSpeedReferenceKey = "speed_reference";
// A changed curve reaches the core's decisions (knapsack, reclaim costs,
// finish estimates) for a job it still schedules.
Status RefreshSpeedIfLive(double t, s::JobId job, s::Scheduler& into) {
  const auto* info = into.state().job(job);
  if (!info || info->status == s::JobStatus::kFinished) return Status::Ok();
  return into.RefreshSpeed(t, job);
}
}  // namespace

s::SpeedModelOptions Daemon::Impl::SpeedOptions(const std::string& reference) const {
  s::SpeedModelOptions o;
  o.reference_type = reference;
  o.catalog = measured;  // the operator's tables are priors for jobs naming their model
  int slots = 0;
  for (const auto& [id, n] : nodes) slots = std::max(slots, n.slots);
  if (slots > 0) o.catalog_gpus_per_node = slots;
  return o;
}

Status Daemon::Impl::ResetSpeed(bool from_snapshot, std::optional<std::string_view> in_snapshot) {
  if (opt.speed == "linear") return Status::Ok();  // no models: the core reads its catalog
  // The reference type is chosen once (the training pool's first type by
  // name) and kept: fits are relative to it.
  ARYL_ASSIGN_OR_RETURN(auto reference, store->GetMeta(kSpeedReferenceKey));
  if (!reference) {
    std::string pick;
    for (int pass = 0; pass < 2 && pick.empty(); ++pass)
      for (const auto& [id, n] : nodes)
        if ((pass == 1 || n.pool == p::Pool::kTraining) && (pick.empty() || n.gpu_type < pick)) pick = n.gpu_type;
    ARYL_RETURN_IF_ERROR(store->SetMeta(kSpeedReferenceKey, pick));
    reference = pick;
  }
  speed_reference = *reference;
  // Fits of the models being replaced are of no use to the new ones.
  if (fitter) fitter->Discard();
  else fitter = std::make_unique<SpeedFitter>();
  s::SpeedModelOptions options = SpeedOptions(*reference);
  if (from_snapshot) {
    // The snapshot's own models; a snapshot saved before they went in its
    // text: the copy in meta (empty: emptied by a newer snapshot's commit).
    std::optional<std::string> text;
    std::string where = "the core snapshot's speed models";
    if (in_snapshot) {
      text.emplace(*in_snapshot);
    } else {
      ARYL_ASSIGN_OR_RETURN(text, store->GetMeta(kSpeedModelsKey));
      if (text && text->empty()) text.reset();
      where = "table meta, key '" + std::string(kSpeedModelsKey) + "'";
    }
    if (text) {
      auto models = s::SpeedModels::FromJson(*text, options);
      if (!models.ok()) return Status::Corruption("state file: " + where + ": " + models.status().message());
      speed = std::make_shared<s::SpeedModels>(std::move(*models));
      return Status::Ok();
    }
  }
  speed = std::make_shared<s::SpeedModels>(std::move(options));
  return Status::Ok();
}

void Daemon::Impl::SpeedBefore(const s::EventBody& body) {
  const auto* sub = std::get_if<s::JobSubmitted>(&body);
  if (!sub || !speed || speed->Find(sub->spec.id)) return;
  // A job without a table of its own runs on the "linear" placeholder: no
  // model name, so its prior is the cluster's (or the optimistic one).
  const std::string model = sub->spec.model == kLinearModel ? "" : sub->spec.model;
  Status st = speed->AddJob(sub->spec.id, model);
  if (!st.ok()) spdlog::warn("job {}: speed model: {}", sub->spec.id, st.ToString());
}

void Daemon::Impl::SpeedAfter(const s::EventBody& body) {
  if (!speed) return;
  s::JobId id = 0;
  if (const auto* f = std::get_if<s::JobFinished>(&body)) id = f->job;
  if (const auto* c = std::get_if<s::JobCancelled>(&body)) id = c->job;
  if (id && speed->Find(id)) (void)speed->RemoveJob(id);
}

Status Daemon::Impl::ApplySpeedSample(double t, s::JobId job, const s::StepSample& sample, s::Scheduler& into) {
  if (!speed) return Status::FailedPrecondition("no speed models");
  ARYL_ASSIGN_OR_RETURN(bool changed, speed->AddSample(job, sample));
  return changed ? RefreshSpeedIfLive(t, job, into) : Status::Ok();
}

Status Daemon::Impl::RecordSpeedSample(s::JobId job, const s::StepSample& sample) {
  if (!speed) return Status::FailedPrecondition("no speed models");
  return speed->RecordSample(job, sample).status();
}

Status Daemon::Impl::ApplySpeedFit(double t, s::JobId job, const s::FitResult& fit, s::Scheduler& into) {
  if (!speed) return Status::FailedPrecondition("no speed models");
  ARYL_ASSIGN_OR_RETURN(bool applied, speed->ApplyFit(job, fit));
  return applied ? RefreshSpeedIfLive(t, job, into) : Status::Ok();
}

void Daemon::Impl::SubmitDueFit(s::JobId job) {
  if (!speed || !fitter || fitter->InFlight(job)) return;
  if (auto request = speed->DueFit(job)) fitter->Submit(std::move(*request));
}

void Daemon::Impl::SubmitDueFits() {
  for (const auto& [id, j] : jobs) SubmitDueFit(id);
}

void Daemon::Impl::SpeedFitTick() {
  if (!fitter) return;
  for (SpeedFitter::Done& done : fitter->Poll()) {
    if (!done.result.ok()) {
      // Not retried at once (it would fail alike): the job's next due sample fits again.
      spdlog::warn("job {}: speed fit: {}", done.job, done.result.status().ToString());
      continue;
    }
    metrics.Observe("aryl_speed_fit_seconds", done.seconds);
    if (!speed || !core || !speed->Find(done.job)) continue;  // the job ended while it ran
    Status st = Transaction("speed fit", [&]() -> Status {
      double t = CoreNow();
      ARYL_RETURN_IF_ERROR(AppendCoreRow(t, SpeedFitToJson({done.job, *done.result})));
      ARYL_RETURN_IF_ERROR(ApplySpeedFit(t, done.job, *done.result, *core));
      last_core_time = t;
      return Status::Ok();
    });
    if (!st.ok()) {
      // The state was reloaded: the other fits are of the models it replaced,
      // and the rebuild started the due ones again.
      spdlog::error("job {}: speed fit: {}", done.job, st.ToString());
      return;
    }
    spdlog::debug("job {}: speed fit {} installed ({:.3f} ms on the fitting thread)", done.job,
                  speed->Find(done.job)->fits(), 1e3 * done.seconds);
    round_due = true;  // the next round decides on the new curve
    metrics.Inc("aryl_speed_fits_total");
    SubmitDueFit(done.job);  // samples that came while it ran
  }
}

std::pair<std::string, int> Daemon::Impl::SpeedTypeFor(const Job& j) const {
  const s::JobSpeedModel* model = speed ? speed->Find(j.rec.id) : nullptr;
  std::string type;
  int slots = 0;
  double slowest = std::numeric_limits<double>::infinity();
  for (const auto& [agent, count] : j.LivePlacement()) {
    auto n = nodes.find(agent);
    if (n == nodes.end()) continue;
    double r = model ? model->params().TypeSpeed(n->second.gpu_type) : 1.0;
    if (r < slowest || (r == slowest && n->second.gpu_type < type)) {
      slowest = r;
      type = n->second.gpu_type;
    }
    slots = std::max(slots, n->second.slots);
  }
  if (type.empty()) type = !j.spec.gpu_type.empty() ? j.spec.gpu_type : speed_reference;
  if (slots == 0) slots = SpeedOptions(speed_reference).catalog_gpus_per_node;
  return {type, slots};
}

double Daemon::Impl::PredictedRate(const Job& j) const {
  if (!speed || !speed->Find(j.rec.id)) return 0;
  int workers = 0;
  for (const auto& [id, w] : j.workers) workers += !w.leaving;
  if (workers == 0) return 0;
  auto [type, slots] = SpeedTypeFor(j);
  return speed->Throughput(j.rec.id, type, workers, slots);
}

Status Daemon::Impl::AddStepStats(Job& j, const p::StepStats& st) {
  const s::JobSpeedModel* model = speed && core ? speed->Find(j.rec.id) : nullptr;
  if (!model) return Status::Ok();
  j.measured_rate = 1.0 / st.median_s;
  // Only a steady configuration is a sample: the size the job runs at now,
  // nothing leaving or restarting (the summary may straddle the change).
  int workers = 0;
  for (const auto& [id, w] : j.workers) {
    if (w.leaving) return Status::Ok();
    ++workers;
  }
  if (j.Restarting() || workers != st.workers) return Status::Ok();
  s::StepSample sample;
  std::tie(sample.gpu_type, std::ignore) = SpeedTypeFor(j);
  sample.workers = workers;
  sample.nodes = static_cast<int>(j.LivePlacement().size());
  // The core's curve is per step at a fixed global batch (SpeedModels::AddJob
  // with global batch 1): the local batch is its share.
  sample.local_batch = 1.0 / workers;
  sample.step_time = st.median_s;
  sample.spread = st.spread_s;
  sample.count = static_cast<int>(std::min<std::int64_t>(st.count, 1 << 30));
  if (Status v = s::ValidateStepSample(sample); !v.ok()) return v;
  std::optional<s::FitRequest> due;
  ARYL_RETURN_IF_ERROR(Transaction("speed sample", [&]() -> Status {
    double t = CoreNow();
    ARYL_RETURN_IF_ERROR(AppendCoreRow(t, SpeedSampleToJson({j.rec.id, sample, /*deferred=*/true})));
    ARYL_ASSIGN_OR_RETURN(due, speed->RecordSample(j.rec.id, sample));
    last_core_time = t;
    return Status::Ok();
  }));
  // While one of the job's fits runs, this one waits: SpeedFitTick checks
  // again against its result.
  if (due && fitter) fitter->Submit(std::move(*due));
  return Status::Ok();
}

std::optional<p::JobSpeed> Daemon::Impl::DescribeSpeed(const Job& j) const {
  const s::JobSpeedModel* m = speed ? speed->Find(j.rec.id) : nullptr;
  if (!m) return std::nullopt;
  p::JobSpeed out;
  out.prior = s::PriorSourceName(m->prior_source());
  out.fits = m->fits();
  const s::SpeedParams& q = m->params();
  out.alpha_c = q.alpha_c;
  out.beta_c = q.beta_c;
  out.alpha_r = q.alpha_r;
  out.beta_r = q.beta_r;
  out.alpha_n = q.alpha_n;
  out.beta_n = q.beta_n;
  out.gamma = q.gamma;
  for (const auto& [type, r] : q.type_speed) out.type_speed[type] = fmt::format("{:.4g}", r);
  for (const auto& x : m->samples()) {
    if (out.samples.size() >= p::kMaxSpeedRows) break;
    out.samples.push_back({x.gpu_type, x.workers, x.nodes, x.count, x.step_time, x.spread,
                           q.StepTime(x.gpu_type, x.workers, x.nodes, x.local_batch)});
  }
  auto [type, slots] = SpeedTypeFor(j);
  out.gpu_type = type;
  const auto size = j.spec.workers.value_or(1);
  const int lo = std::max<int>(1, static_cast<int>(j.spec.min_workers.value_or(size)));
  const int hi = std::max<int>(lo, static_cast<int>(j.spec.max_workers.value_or(size)));
  for (int w = lo; w <= hi && out.predicted.size() < p::kMaxSpeedRows; ++w)
    out.predicted.push_back({w, m->Throughput(type, w, slots)});
  return out;
}

}  // namespace aryl::daemon
