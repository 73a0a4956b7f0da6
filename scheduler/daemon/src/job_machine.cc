#include "aryl/daemon/job_machine.h"

#include <algorithm>

#include "aryl/transition_table.h"

namespace aryl::daemon {

namespace {
using P = JobPhase;
using E = JobEvent;
}  // namespace

std::string_view PhaseName(JobPhase p) {
  switch (p) {
    case P::kQueued: return "queued";
    case P::kStarting: return "starting";
    case P::kRunning: return "running";
    case P::kResizing: return "resizing";
    case P::kRestarting: return "restarting";
    case P::kLeaseWait: return "lease_wait";
    case P::kCompleting: return "completing";
    case P::kCompleted: return "completed";
    case P::kFailed: return "failed";
    case P::kCancelled: return "cancelled";
  }
  return "?";
}

std::string_view EventName(JobEvent e) {
  switch (e) {
    case E::kStarted: return "started";
    case E::kResized: return "resized";
    case E::kFormed: return "formed";
    case E::kRestartBegun: return "restart";
    case E::kLeaseWait: return "lease wait";
    case E::kWorkerDone: return "worker done";
    case E::kWentOn: return "went on";
    case E::kUnplaced: return "unplaced";
    case E::kEnded: return "ended";
  }
  return "?";
}

std::optional<JobPhase> PhaseFromName(std::string_view name) {
  for (P p : {P::kQueued, P::kStarting, P::kRunning, P::kResizing, P::kRestarting, P::kLeaseWait, P::kCompleting,
              P::kCompleted, P::kFailed, P::kCancelled})
    if (PhaseName(p) == name) return p;
  return std::nullopt;
}

const std::vector<JobMachine::Row>& JobMachine::Table() {
  static const std::vector<Row> table = [] {
    std::vector<Row> t;
    const P live[] = {P::kQueued, P::kStarting, P::kRunning, P::kResizing, P::kRestarting, P::kLeaseWait,
                      P::kCompleting};
    // T1: a fresh group (also after a completing job's peers went away and
    // the core placed it again).
    for (P from : live) t.push_back({from, E::kStarted, P::kStarting});
    // T2: a generation with stayers.
    t.push_back({P::kStarting, E::kResized, P::kStarting});
    t.push_back({P::kRunning, E::kResized, P::kResizing});
    t.push_back({P::kResizing, E::kResized, P::kResizing});
    // T3.
    t.push_back({P::kStarting, E::kFormed, P::kRunning});
    t.push_back({P::kResizing, E::kFormed, P::kRunning});
    t.push_back({P::kRunning, E::kFormed, P::kRunning});
    // T4.
    for (P from : {P::kQueued, P::kStarting, P::kRunning, P::kResizing, P::kLeaseWait})
      t.push_back({from, E::kRestartBegun, P::kRestarting});
    // T5.
    for (P from : {P::kQueued, P::kStarting, P::kRunning, P::kResizing, P::kRestarting})
      t.push_back({from, E::kLeaseWait, P::kLeaseWait});
    // T6.
    for (P from : {P::kStarting, P::kRunning, P::kResizing, P::kRestarting, P::kLeaseWait, P::kQueued})
      t.push_back({from, E::kWorkerDone, P::kCompleting});
    // T7.
    t.push_back({P::kCompleting, E::kWentOn, P::kRunning});
    // T8.
    for (P from : {P::kStarting, P::kRunning, P::kResizing, P::kLeaseWait, P::kRestarting})
      t.push_back({from, E::kUnplaced, P::kQueued});
    // T9.
    for (P from : live)
      for (P end : {P::kCompleted, P::kFailed, P::kCancelled}) t.push_back({from, E::kEnded, end});
    return t;
  }();
  return table;
}

bool JobMachine::Legal(JobPhase from, JobEvent event, JobPhase to) {
  return TableAllows(Table(), from, event, to);
}

bool JobMachine::Move(JobEvent e, JobPhase to, double now) {
  if (!Legal(phase_, e, to)) return false;
  if (log_.size() >= 64) log_.erase(log_.begin());  // bounded when nobody takes them
  log_.push_back({phase_, e, to});
  if (to != phase_) since_ = now;
  phase_ = to;
  return true;
}

bool JobMachine::Started(std::int64_t generation, double now) {
  if (!Move(E::kStarted, P::kStarting, now)) return false;
  planned_ = generation;
  planned_at_ = now;
  completing_step_ = 0;
  return true;
}

bool JobMachine::Resized(std::int64_t generation, double now) {
  if (!Move(E::kResized, phase_ == P::kStarting ? P::kStarting : P::kResizing, now)) return false;
  planned_ = generation;
  planned_at_ = now;
  return true;
}

bool JobMachine::Formed(std::int64_t generation, double now) {
  formed_ = std::max(formed_, generation);
  if (formed_ < planned_) return true;  // an older generation trains; the newest still forms
  if (phase_ != P::kStarting && phase_ != P::kResizing) return true;  // nothing to change
  return Move(E::kFormed, P::kRunning, now);
}

bool JobMachine::RestartBegun(double now) { return Move(E::kRestartBegun, P::kRestarting, now); }
bool JobMachine::LeaseWait(double now) { return Move(E::kLeaseWait, P::kLeaseWait, now); }

bool JobMachine::WorkerDone(std::int64_t step, double now) {
  if (!Move(E::kWorkerDone, P::kCompleting, now)) return false;
  completing_step_ = step;
  return true;
}

bool JobMachine::WentOn(double now) { return Move(E::kWentOn, P::kRunning, now); }
bool JobMachine::Unplaced(double now) { return Move(E::kUnplaced, P::kQueued, now); }

bool JobMachine::Ended(JobPhase end, double now) {
  if (!IsFinal(end)) return false;
  return Move(E::kEnded, end, now);
}

void JobMachine::Restore(JobPhase p, std::int64_t generation, std::int64_t completing_step, double now) {
  phase_ = p;
  since_ = now;
  planned_ = formed_ = generation;  // the runtime's own generation is learnt again from its reports
  planned_at_ = now;
  completing_step_ = completing_step;
}

std::vector<JobMachine::Transition> JobMachine::TakeTransitions() {
  std::vector<Transition> out;
  out.swap(log_);
  return out;
}

FormingDecision WhileForming(const JobMachine& life, bool forced, double now, double forming_timeout) {
  const bool forming = life.planned() > life.formed() &&
                       (life.Is(JobPhase::kStarting) || life.Is(JobPhase::kResizing));
  if (!forming) return FormingDecision::kPlan;
  if (!forced && now - life.planned_at() < forming_timeout) return FormingDecision::kWait;
  return FormingDecision::kAbandonThenPlan;
}

std::vector<std::int64_t> UnformedJoiners(const std::vector<MemberView>& live, std::int64_t formed) {
  std::vector<std::int64_t> out;
  for (const auto& m : live)
    if (!m.leaving && m.joined > formed) out.push_back(m.id);
  return out;
}

}  // namespace aryl::daemon
