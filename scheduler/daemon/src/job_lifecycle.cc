#include "daemon_impl.h"

namespace aryl::daemon {

Status Daemon::Impl::EndJob(Job& j, JobState state, int exit_code, const std::string& message) {
  table.ForgetOwner(j);
  Phase(j, j.life.Ended(state == JobState::kFinished ? JobPhase::kCompleted
                        : state == JobState::kFailed ? JobPhase::kFailed
                                                     : JobPhase::kCancelled,
                        WallNow()),
        "end");
  j.rec.state = state;
  j.rec.exit_code = exit_code;
  j.rec.message = message;
  j.rec.end_time = WallNow();
  StopJobWorkers(j, false, message);
  table.ClearWorkers(j);
  ARYL_RETURN_IF_ERROR(Journal(j.rec.id, std::string(JobStateName(state)), message, {{"exit_code", exit_code}}));
  ARYL_RETURN_IF_ERROR(SaveJob(j));
  p::JobState ps = state == JobState::kFinished ? p::JobState::kCompleted
                   : state == JobState::kFailed ? p::JobState::kFailed
                                                : p::JobState::kCancelled;
  // The state names of `aryl jobs` (completed, failed, cancelled).
  metrics.Inc("aryl_jobs_finished_total", "state=\"" + std::string(p::ToString(ps)) + "\"");
  Notify(j, ps, message, true);
  spdlog::info("job {} {}: {}", j.rec.id, JobStateName(state), message);
  return Status::Ok();
}

// How the scheduler reads a worker's end. Only the program can say that it
// finished its work: a worker that links the runtime must report "completed"
// (WorkerDone); an exit 0 after a stop it was sent (a SIGTERM on any rank stops
// every rank cleanly, with a checkpoint) is not the job's end. A program that
// does not link the runtime has only its exit code to speak with.
//
// A worker of a restart job that exits while the whole group is being stopped
// to start again (a SIGTERM it was sent; a torchrun script may exit 0 or 1 or
// die of it) has left: only the runtime's "completed" says more.
ExitKind ClassifyExit(const p::WorkerExited& m, bool planned_stop) {
  bool exit0 = m.exit_code && *m.exit_code == 0;
  if (m.outcome == "left") return ExitKind::kLeft;
  if (planned_stop) return exit0 && m.outcome == "completed" ? ExitKind::kCompleted : ExitKind::kLeft;
  if (m.signal) return ExitKind::kLost;
  if (m.outcome == "interrupted" || m.outcome == "stopped") return ExitKind::kLost;
  if (exit0 && m.outcome == "completed") return ExitKind::kCompleted;
  if (exit0 && m.outcome.empty() && !m.runtime) return ExitKind::kCompleted;
  if (exit0) return ExitKind::kLost;  // a runtime program that exited 0 without its report
  return ExitKind::kFailed;
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::WorkerExited& m) {
  Status st = Transaction("worker exit", [&] { return HandleWorkerExit(m); });
  // Acknowledged once durable (also when stale: nothing to record), so the
  // agent stops re-sending it; without the ack it comes again.
  if (st.ok()) Send(from.peer.identity, p::WorkerExitAck{m.job, m.worker});
  else spdlog::error("job {} worker {} exit not recorded (the agent sends it again): {}", m.job, m.worker, st.ToString());
  return std::nullopt;
}

Status Daemon::Impl::HandleWorkerExit(const p::WorkerExited& m) {
  auto jit = jobs.find(m.job);
  if (jit == jobs.end()) return Status::Ok();  // the job is over: a late or repeated exit
  Job& j = jit->second;
  auto wit = j.workers.find(m.worker);
  if (wit == j.workers.end() || wit->second.agent != m.agent_id) return Status::Ok();  // handled before
  bool leaving = wit->second.leaving;
  int code = m.exit_code ? static_cast<int>(*m.exit_code) : 128 + static_cast<int>(m.signal.value_or(9));
  ExitKind kind = ClassifyExit(m, j.Restarting());
  const p::WorkerEnd end{m.worker, wit->second.rank, m.agent_id, m.exit_code, m.signal, m.error};
  table.EraseWorker(j, m.worker);
  std::string how = (m.exit_code ? "exit " + std::to_string(*m.exit_code) : "signal " + std::to_string(m.signal.value_or(0))) +
                    (m.outcome.empty() ? "" : " (" + m.outcome + ")") + (leaving ? " (asked to leave)" : "") +
                    (m.error.empty() ? "" : ": " + m.error);
  const std::string who = end.Who();
  ARYL_RETURN_IF_ERROR(Journal(j.rec.id, "worker_exit", who + ": " + how,
                               {{"worker", m.worker}, {"rank", end.rank}, {"node", m.agent_id},
                                {"exit_code", m.exit_code ? json(*m.exit_code) : json(nullptr)},
                                {"signal", m.signal ? json(*m.signal) : json(nullptr)},
                                {"outcome", m.outcome}, {"leaving", leaving}, {"error", m.error}},
                               {m.agent_id}));
  if (kind == ExitKind::kCompleted && !j.Completing()) {
    // The program finished its work (even if it was also asked to leave): the
    // job is done once its other workers are gone. The step it ended at comes
    // from its own report where it made one: the scheduler's last progress
    // report may lag its peers' last steps (a peer's report of the common last
    // step must not read as "went on without it"), and it may also be ahead of
    // it, when the peers regrouped and went on before this exit arrived.
    const std::int64_t ended_at = m.step ? *m.step : j.step;
    Phase(j, j.life.WorkerDone(ended_at, WallNow()), "worker done");
    j.completing_since = WallNow();
    j.first_end = end;
  }
  if (j.Completing()) {
    // A peer that fails after one rank ended on its own (a torchrun script's
    // rank that returned early leaves the others' collectives with a closed
    // connection) fails the job; its report names both (FinishJob).
    if (kind == ExitKind::kFailed && j.rec.exit_code == 0) {
      j.rec.exit_code = code;
      j.failure = end;
    }
    if (j.workers.empty()) return FinishJob(j, j.rec.exit_code);
    return SaveJob(j);
  }
  double now = WallNow();
  if (leaving || kind == ExitKind::kLeft) {
    // Asked to go, or not a member of the newest generation: the plan already
    // counts it out. A job whose workers were all stopped this way is either
    // preempted (queued in the core) or restarting; converge decides.
    if (m.signal) j.last_loss_time = now;  // a leaver killed mid-step: its peers' timeouts follow
    pending_converge.insert(j.rec.id);
    return SaveJob(j);
  }
  std::string failure = who + " " + end.How();
  if (j.RestartsToResize() && m.error.empty()) {
    // torchrun's rule: a failed or lost worker restarts the whole group, at
    // most max_restarts times (the survivors' collectives would fail anyway).
    // A program that cannot be started is not retried.
    // Default: a failing program fails the job at once (torchrun's 0); lost
    // workers (killed) restart it up to the scheduler's --max-worker-failures.
    const int limit = static_cast<int>(
        j.spec.max_restarts.value_or(kind == ExitKind::kFailed ? 0 : opt.max_worker_failures));
    if (j.restarts >= limit) {
      j.failure = end;
      return FailJob(j, code, failure + " (" + std::to_string(j.restarts) + " of max " + std::to_string(limit) +
                                  " restarts used)");
    }
    j.restarts++;
    return Restart(j, failure + "; restart " + std::to_string(j.restarts) + " of " + std::to_string(limit),
                   /*planned=*/false);
  }
  if (kind == ExitKind::kFailed) {
    // The program failed on purpose (its exit code, its own report, or it could
    // not start): so does the job, with the reason.
    j.failure = end;
    return FailJob(j, code, failure);
  }
  // Lost: killed by a signal (OOM killer, an operator, a crash), interrupted
  // (a peer or the store failed), or stopped cleanly without being asked: the
  // job resumes without it (shrink and regrow, or a restart from its latest
  // checkpoint), within limits for crashes.
  // One fault is one failure: a worker killed while a generation forms makes
  // its peers' collectives and rendezvous time out, and those "interrupted"
  // exits within kKnockOnSeconds of a loss are its knock-on, not more faults.
  bool crash = m.signal.has_value() || m.outcome == "interrupted" || (m.outcome.empty() && m.runtime);
  bool knock_on = !m.signal && m.outcome == "interrupted" && now - j.last_loss_time < kKnockOnSeconds;
  if (crash && !knock_on) j.failures++;
  if (crash) j.last_loss_time = now;
  if (knock_on) spdlog::info("job {}: {} interrupted within {:.0f} s of a loss: counted with it", j.rec.id, who,
                             kKnockOnSeconds);
  if (j.failures > j.spec.max_restarts.value_or(opt.max_worker_failures)) {
    j.failure = end;
    return FailJob(j, code, who + " " + how + " (" + std::to_string(j.failures) + " workers lost; giving up)");
  }
  spdlog::warn("job {}: {} ended ({}); the job goes on without it", j.rec.id, who, how);
  pending_converge.insert(j.rec.id);
  return SaveJob(j);
}

void Daemon::Impl::Phase(const Job& j, bool ok, std::string_view what) {
  if (!ok)
    spdlog::error("job {}: {} refused in phase {} (no such transition in job_machine.h)", j.rec.id, what,
                  PhaseName(j.life.phase()));
}

void Daemon::Impl::StopUnformed(Job& j, const std::vector<std::int64_t>& joiners) {
  std::map<std::string, std::vector<p::WorkerId>> by_agent;
  for (auto id : joiners) {
    auto& w = j.workers[static_cast<p::WorkerId>(id)];
    w.leaving = true;
    by_agent[w.agent].push_back(w.id);
  }
  const std::int64_t g = j.life.planned();
  spdlog::warn("job {}: generation {} abandoned before it formed; stopping its {} joiner(s)", j.rec.id, g,
               joiners.size());
  (void)Journal(j.rec.id, "generation_abandoned",
                "generation " + std::to_string(g) + " abandoned before it formed; " + std::to_string(joiners.size()) +
                    " joiner(s) stopped",
                {{"generation", g}, {"stopped", joiners}});
  for (const auto& [agent, ids] : by_agent) {
    p::StopWorkers sw;
    sw.job = j.rec.id;
    sw.workers = ids;
    sw.grace_seconds = 0;  // waiting in the generation's rendezvous: nothing to save
    sw.reason = "generation " + std::to_string(g) + " abandoned before it formed";
    Push(agent, sw);
  }
}

// "worker 4 (rank 0) on a exited with 1; the first to end was worker 5 (rank 1)
// on a, which exited with 0 before its peers".
std::string Daemon::Impl::FailureReport(const Job& j, int exit_code) {
  if (!j.failure) return "a worker exited with " + std::to_string(exit_code);  // state of an older version
  std::string s = j.failure->Who() + " " + j.failure->How();
  if (j.first_end && j.first_end->worker != j.failure->worker)
    s += "; the first to end was " + j.first_end->Who() + ", which " + j.first_end->How() + " before its peers";
  return s;
}

Status Daemon::Impl::FinishJob(Job& j, int exit_code) {
  s::JobId id = j.rec.id;
  ARYL_RETURN_IF_ERROR(Feed(s::JobFinished{id}, "job finished"));
  auto it = jobs.find(id);
  if (it == jobs.end()) return Status::Ok();
  ARYL_RETURN_IF_ERROR(EndJob(it->second, exit_code == 0 ? JobState::kFinished : JobState::kFailed, exit_code,
                              exit_code == 0 ? "completed" : FailureReport(it->second, exit_code)));
  table.Erase(id);
  return Status::Ok();
}

Status Daemon::Impl::FailJob(Job& j, int code, const std::string& why) {
  s::JobId id = j.rec.id;
  ARYL_RETURN_IF_ERROR(Feed(s::JobFinished{id}, "job failed"));
  auto it = jobs.find(id);
  if (it == jobs.end()) return Status::Ok();
  ARYL_RETURN_IF_ERROR(EndJob(it->second, JobState::kFailed, code, why));
  table.Erase(id);
  return Status::Ok();
}

Status Daemon::Impl::MarkRuntime(Job& j) {
  j.runtime = true;
  // Durable (workers_json): a scheduler that takes over, or restarts, resizes
  // the job in place too rather than restarting every worker.
  ARYL_RETURN_IF_ERROR(SaveJob(j));
  if (j.spec.elastic) return Status::Ok();  // the submitter said which
  spdlog::info("job {}: the program links the runtime; it resizes in place", j.rec.id);
  return Feed(s::JobRescaleKnown{j.rec.id, s::Rescale::kInPlace}, "the program links the runtime");
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::ResizeReport& m) {
  auto jit = jobs.find(m.job);
  if (jit == jobs.end()) return std::nullopt;
  if (!jit->second.runtime) {
    Status st = Transaction("runtime", [&] { return MarkRuntime(jit->second); });
    if (!st.ok()) spdlog::warn("job {}: {}", m.job, st.ToString());
  }
  // The text numbers the generation as `aryl jobs` does (the scheduler's
  // plan); a fault recovery between plans adds the runtime's own number, the
  // one in the workers' logs. The data keeps the runtime's (describe reads it).
  const std::int64_t plan = PlanOfStore(m.generation);
  (void)Journal(m.job, "resize_report",
                "generation " + std::to_string(plan) + " " + std::to_string(m.from_workers) + "->" +
                    std::to_string(m.to_workers) + " pause " + FormatDuration(m.phases.total) +
                    (m.planned ? "" : " (fault; runtime generation " + std::to_string(m.generation) + ")"),
                {{"generation", m.generation}, {"from_workers", m.from_workers}, {"to_workers", m.to_workers},
                 {"planned", m.planned}, {"phases", p::ToJson(p::Message(m))["phases"]}},
                JobNodes(jit->second));
  metrics.Observe("aryl_resize_pause_seconds", m.phases.total);
  jit->second.last_resize_pause = m.phases.total;
  Phase(jit->second, jit->second.life.Formed(plan, WallNow()), "formed");
  snapshot_dirty = true;
  // The core's resize rule weighs the job's measured pause (aryl/sched/resize_rule.h).
  if (m.planned) {
    Status fed = Feed(s::JobResizeMeasured{m.job, std::max(0.0, m.phases.total)}, "resize pause measured");
    if (!fed.ok()) spdlog::warn("job {}: resize pause not recorded: {}", m.job, fed.ToString());
  }
  return std::nullopt;
}

// The first step of the group a restart started: the restart's pause (stop
// of every worker to that step, in the scheduler's wall time; for programs
// that report steps only by printing step=N, as late as the agent relays it).
void Daemon::Impl::RestartMeasured(Job& j) {
  const double pause = std::max(0.0, WallNow() - j.restart_stopped_at);
  (void)Journal(j.rec.id, "restart_report",
                "generation " + std::to_string(j.restart_generation) + " " + std::to_string(j.restart_from) + "->" +
                    std::to_string(j.restart_to) + " pause " + FormatDuration(pause) + " (restart" +
                    (j.restart_planned ? ")" : " after a failure)"),
                {{"generation", j.restart_generation}, {"from_workers", j.restart_from},
                 {"to_workers", j.restart_to}, {"pause", pause}, {"planned", j.restart_planned}},
                JobNodes(j));
  metrics.Observe("aryl_resize_pause_seconds", pause);
  j.last_resize_pause = pause;
  const bool planned = j.restart_planned;
  j.restart_stopped_at = 0;
  j.restart_generation = j.restart_from = j.restart_to = 0;
  snapshot_dirty = true;
  if (planned) {
    Status fed = Feed(s::JobResizeMeasured{j.rec.id, pause}, "restart pause measured");
    if (!fed.ok()) spdlog::warn("job {}: restart pause not recorded: {}", j.rec.id, fed.ToString());
  }
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::JobProgress& m) {
  auto jit = jobs.find(m.job);
  if (jit == jobs.end()) return std::nullopt;
  Job& j = jit->second;
  if (m.runtime.value_or(false)) {
    if (!j.runtime) {
      Status st = Transaction("runtime", [&] { return MarkRuntime(j); });
      if (!st.ok()) spdlog::warn("job {}: {}", m.job, st.ToString());
    }
    if (m.step == 0 && m.remaining_work == 0) return std::nullopt;  // the hello, no progress yet
  }
  j.step = m.step;
  // Rank 0 steps in its generation: that generation formed.
  if (m.step > 0 && m.generation > 0) Phase(j, j.life.Formed(PlanOfStore(m.generation), WallNow()), "formed");
  if (j.restart_generation > 0 && m.step > 0) RestartMeasured(j);
  // An early clean exit is a leave, not the job's end: one rank said
  // "completed" (SystemExit(0) at step 300, say) and its peers, regrouped, go
  // on training. Once they report steps past the step of that exit, the job is
  // no longer completing: it goes on without that worker and may grow back
  // into its slot. When every rank ends at its last step (or stops early on
  // its own), no step follows, and the job completes as before.
  const std::int64_t completing_step = j.life.completing_step();
  if (j.Completing() && !j.workers.empty() && !j.RestartsToResize() && m.step > completing_step + kLeftEarlySteps) {
    Phase(j, j.life.WentOn(WallNow()), "went on");
    const std::string who = j.first_end ? j.first_end->Who() : "a worker";
    Status st = Transaction("left early", [&]() -> Status {
      ARYL_RETURN_IF_ERROR(Journal(j.rec.id, "left_early",
                                   who + " ended at step " + std::to_string(completing_step) +
                                       " and its peers went on to step " + std::to_string(m.step) +
                                       ": it left; the job goes on and may grow back",
                                   {{"step", completing_step}, {"peers_step", m.step}}));
      return SaveJob(j);
    });
    if (!st.ok()) spdlog::warn("job {}: {}", m.job, st.ToString());
    spdlog::info("job {}: {} ended early (step {}); its peers are at step {}: a leave, not the job's end", m.job, who,
                 completing_step, m.step);
    pending_converge.insert(j.rec.id);
  }
  j.loss = std::isnan(m.loss) ? 0 : m.loss;
  j.rate = m.steps_per_second;
  if (m.stats) {
    Status st = AddStepStats(j, *m.stats);
    if (!st.ok()) spdlog::warn("job {}: step-time summary not used: {}", m.job, st.ToString());
  }
  // Steps left: the program's own count, else the submitted total (--steps).
  if (m.remaining_work == 0 && j.spec.total_work > 0)
    m.remaining_work = std::max(1.0, j.spec.total_work - static_cast<double>(m.step));
  // The core hears about progress at most every 5 s per job (it is journaled).
  if (m.remaining_work > 0 && WallNow() - j.last_progress_event > 5) {
    j.last_progress_event = WallNow();
    Status st = Transaction("progress", [&] { return Feed(s::JobProgress{m.job, m.remaining_work}, "progress"); });
    if (!st.ok()) spdlog::warn("job {}: progress not recorded: {}", m.job, st.ToString());
  }
  return std::nullopt;
}

// Jobs whose workers changed outside a plan converge to the core's placement;
// workers of a completed job that linger are stopped.
void Daemon::Impl::ConvergeTick(double now) {
  for (auto& [jid, j] : jobs) {
    if (j.resize_pending && (j.runtime || WallNow() - j.last_start >= kKindDetectSeconds)) {
      j.resize_pending = false;
      pending_converge.insert(jid);
    }
  }
  auto pending = std::move(pending_converge);
  pending_converge.clear();
  for (auto jid : pending) {
    auto it = jobs.find(jid);
    if (it == jobs.end() || !core) continue;
    Status st = Transaction("converge job " + std::to_string(jid), [&]() -> Status {
      Job& j = it->second;
      if (j.Completing()) return j.workers.empty() ? FinishJob(j, j.rec.exit_code) : Status::Ok();
      const auto* info = core->state().job(jid);
      if (!info || info->status != s::JobStatus::kRunning) return SaveJob(j);
      if (j.resize_pending) return Status::Ok();  // converges once its kind is known
      auto desired = ToNodePlacement(info->placement);
      if (j.RestartsToResize() && !j.Restarting() && !j.workers.empty() && desired != j.LivePlacement()) {
        // A restart only when the new placement fits now: restarting into
        // slots still held would start the group short and restart it again
        // at every tick. Until then the job runs as it is.
        if (!Fits(j, desired)) {
          pending_converge.insert(jid);
          return Status::Ok();
        }
        return Restart(j, "resize to " + PlacementString(desired));
      }
      return Converge(j, desired, j.Restarting() ? "restart of all workers" : "replace lost workers");
    });
    if (!st.ok()) {
      spdlog::error("job {}: converge: {}", jid, st.ToString());
      pending_converge.insert(jid);  // again on a later tick
    }
  }
  // Jobs whose workers said they are done but some linger: stop the rest. An
  // in-place job's peers get kLeftEarlySeconds to show, by their steps, that
  // the worker left early (On(JobProgress)). Asked again every grace while
  // they linger: a stop sent while their agent was away (this scheduler had
  // just restarted, say) reaches nobody.
  for (auto& [jid, j] : jobs) {
    const double grace =
        j.RestartsToResize() ? j.StopGrace(opt.stop_grace) : std::max(j.StopGrace(opt.stop_grace), kLeftEarlySeconds);
    if (j.Completing() && !j.workers.empty() && now - j.completing_since > grace) {
      StopJobWorkers(j, false, "the job completed");
      j.completing_since = now;
    }
  }
}

}  // namespace aryl::daemon
