// The worker life cycle: see the numbered states and transitions in worker_phase.h.
#include "worker_phase.h"

#include "aryl/transition_table.h"
namespace aryl {

std::optional<WorkerPhase> Next(WorkerPhase from, WorkerEvent event) {
  return TableNext(worker_phase::kTable, from, event);
}

bool Apply(WorkerPhase& phase, WorkerEvent event) {
  std::optional<WorkerPhase> to = Next(phase, event);
  if (!to) return false;
  phase = *to;
  return true;
}

bool IsTerminal(WorkerPhase phase) {
  return phase == WorkerPhase::kLeft || phase == WorkerPhase::kStopped ||
         phase == WorkerPhase::kFailed;
}

std::string_view PhaseName(WorkerPhase phase) {
  switch (phase) {
    case WorkerPhase::kCreated:
      return "created";
    case WorkerPhase::kStarting:
      return "starting";
    case WorkerPhase::kTraining:
      return "training";
    case WorkerPhase::kReduced:
      return "reduced";
    case WorkerPhase::kAbandoned:
      return "abandoned";
    case WorkerPhase::kSwitching:
      return "switching";
    case WorkerPhase::kRecovering:
      return "recovering";
    case WorkerPhase::kWaitingForWorkers:
      return "waiting_for_workers";
    case WorkerPhase::kStopping:
      return "stopping";
    case WorkerPhase::kLeft:
      return "left";
    case WorkerPhase::kStopped:
      return "stopped";
    case WorkerPhase::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string_view EventName(WorkerEvent event) {
  switch (event) {
    case WorkerEvent::kStart:
      return "start";
    case WorkerEvent::kJoin:
      return "join";
    case WorkerEvent::kReduce:
      return "reduce";
    case WorkerEvent::kAbandon:
      return "abandon";
    case WorkerEvent::kCommit:
      return "commit";
    case WorkerEvent::kResize:
      return "resize";
    case WorkerEvent::kRecover:
      return "recover";
    case WorkerEvent::kWait:
      return "wait";
    case WorkerEvent::kTimeOut:
      return "time_out";
    case WorkerEvent::kLeave:
      return "leave";
    case WorkerEvent::kStop:
      return "stop";
    case WorkerEvent::kStopped:
      return "stopped";
    case WorkerEvent::kFail:
      return "fail";
  }
  return "unknown";
}

}  // namespace aryl
