#include "daemon_impl.h"

namespace aryl::daemon {

Status Daemon::Impl::EndJob(Job& j, JobState state, int exit_code, const std::string& message) {
  j.rec.state = state;
  j.rec.exit_code = exit_code;
  j.rec.message = message;
  j.rec.end_time = WallNow();
  StopJobWorkers(j, false, message);
  j.workers.clear();
  ARYL_RETURN_IF_ERROR(store->AppendEvent(WallNow(), j.rec.id, std::string(JobStateName(state)), message));
  ARYL_RETURN_IF_ERROR(SaveJob(j));
  metrics.Inc("aryl_jobs_finished_total", "state=\"" + std::string(JobStateName(state)) + "\"");
  p::JobState ps = state == JobState::kFinished ? p::JobState::kCompleted
                   : state == JobState::kFailed ? p::JobState::kFailed
                                                : p::JobState::kCancelled;
  Notify(j, ps, message, true);
  spdlog::info("job {} {}: {}", j.rec.id, JobStateName(state), message);
  return Status::Ok();
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::WorkerExited& m) {
  auto jit = jobs.find(m.job);
  if (jit == jobs.end()) return std::nullopt;
  Job& j = jit->second;
  auto wit = j.workers.find(m.worker);
  if (wit == j.workers.end() || wit->second.agent != m.agent_id) return std::nullopt;
  bool leaving = wit->second.leaving;
  int code = m.exit_code ? static_cast<int>(*m.exit_code) : 128 + static_cast<int>(m.signal.value_or(9));
  j.workers.erase(wit);
  (void)store->AppendEvent(WallNow(), j.rec.id, "worker_exit",
                           "worker " + std::to_string(m.worker) + " on " + m.agent_id + ": " +
                               (m.exit_code ? "exit " + std::to_string(*m.exit_code)
                                            : "signal " + std::to_string(m.signal.value_or(0))) +
                               (leaving ? " (asked to leave)" : ""));
  if (leaving) {
    if (j.completing && j.workers.empty()) FinishJob(j, j.rec.exit_code);
    else (void)SaveJob(j);
    return std::nullopt;
  }
  if (code == 0 || j.completing) {
    if (!j.completing) {
      j.completing = true;
      j.completing_since = WallNow();
    }
    if (code != 0 && j.rec.exit_code == 0) j.rec.exit_code = code;
    if (j.workers.empty()) FinishJob(j, j.rec.exit_code);
    else (void)SaveJob(j);
    return std::nullopt;
  }
  if (m.exit_code) {
    // A worker that exits with an error code failed on purpose: so does the job.
    FailJob(j, code, "worker " + std::to_string(m.worker) + " on " + m.agent_id + " exited with " +
                         std::to_string(code));
    return std::nullopt;
  }
  // Killed by a signal (OOM killer, an operator, a crash): replace it, within limits.
  j.failures++;
  if (j.failures > opt.max_worker_failures) {
    FailJob(j, code, "worker " + std::to_string(m.worker) + " on " + m.agent_id + " was killed by signal " +
                         std::to_string(m.signal.value_or(0)) + " (" + std::to_string(j.failures) +
                         " workers lost; giving up)");
    return std::nullopt;
  }
  spdlog::warn("job {}: worker {} on {} died ({}); replacing it", j.rec.id, m.worker, m.agent_id, code);
  pending_converge.insert(j.rec.id);
  (void)SaveJob(j);
  return std::nullopt;
}

void Daemon::Impl::FinishJob(Job& j, int exit_code) {
  s::JobId id = j.rec.id;
  Status st = Feed(s::JobFinished{id}, "job finished");
  if (!st.ok()) spdlog::error("job {} finished: {}", id, st.ToString());
  auto it = jobs.find(id);
  if (it == jobs.end()) return;
  (void)EndJob(it->second, exit_code == 0 ? JobState::kFinished : JobState::kFailed, exit_code,
               exit_code == 0 ? "completed" : "a worker exited with " + std::to_string(exit_code));
  jobs.erase(id);
}

void Daemon::Impl::FailJob(Job& j, int code, const std::string& why) {
  s::JobId id = j.rec.id;
  Status st = Feed(s::JobFinished{id}, "job failed");
  if (!st.ok()) spdlog::error("job {} failed: {}", id, st.ToString());
  auto it = jobs.find(id);
  if (it == jobs.end()) return;
  (void)EndJob(it->second, JobState::kFailed, code, why);
  jobs.erase(id);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::ResizeReport& m) {
  auto jit = jobs.find(m.job);
  if (jit == jobs.end()) return std::nullopt;
  (void)store->AppendEvent(WallNow(), m.job, "resize_report",
                           "generation " + std::to_string(m.generation) + " " + std::to_string(m.from_workers) +
                               "->" + std::to_string(m.to_workers) + " pause " +
                               std::to_string(m.phases.total) + " s" + (m.planned ? "" : " (fault)"));
  metrics.Observe("aryl_resize_pause_seconds", m.phases.total);
  return std::nullopt;
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::JobProgress& m) {
  auto jit = jobs.find(m.job);
  if (jit == jobs.end()) return std::nullopt;
  Job& j = jit->second;
  j.step = m.step;
  j.loss = std::isnan(m.loss) ? 0 : m.loss;
  j.rate = m.steps_per_second;
  // The core hears about progress at most every 5 s per job (it is journaled).
  if (m.remaining_work > 0 && WallNow() - j.last_progress_event > 5) {
    j.last_progress_event = WallNow();
    (void)Feed(s::JobProgress{m.job, m.remaining_work}, "progress");
  }
  return std::nullopt;
}

// Jobs whose workers changed outside a plan converge to the core's placement;
// workers of a completed job that linger are stopped.
void Daemon::Impl::ConvergeTick(double now) {
  auto pending = std::move(pending_converge);
  pending_converge.clear();
  for (auto jid : pending) {
    auto it = jobs.find(jid);
    if (it == jobs.end() || !core) continue;
    Job& j = it->second;
    if (j.completing) {
      if (j.workers.empty()) FinishJob(j, j.rec.exit_code);
      continue;
    }
    const auto* info = core->state().job(jid);
    if (!info || info->status != s::JobStatus::kRunning) {
      (void)SaveJob(j);
      continue;
    }
    (void)store->Batch([&] { return Converge(j, ToNodePlacement(info->placement), "replace lost workers"); });
  }
  // Jobs whose workers said they are done but some linger: stop the rest.
  for (auto& [jid, j] : jobs) {
    if (j.completing && now - j.completing_since > opt.stop_grace) {
      StopJobWorkers(j, false, "the job completed");
      j.completing_since = now + 3600;  // once
    }
  }
}

}  // namespace aryl::daemon
