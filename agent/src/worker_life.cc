// One worker's life as its agent sees it (worker_life.h).
#include "aryl/agent/worker_life.h"

#include <algorithm>

#include "aryl/transition_table.h"
namespace aryl::agent {

std::optional<WorkerLife::State> WorkerLife::Next(State from, Event event) {
  return TableNext(kTable, from, event);
}

std::string_view WorkerLife::Name(State s) {
  switch (s) {
    case State::kRunning: return "running";
    case State::kLeaving: return "leaving";
    case State::kStopping: return "stopping";
    case State::kKilled: return "killed";
    case State::kExited: return "exited";
  }
  return "?";
}

std::string_view WorkerLife::Name(Event e) {
  switch (e) {
    case Event::kLeave: return "leave";
    case Event::kStop: return "stop";
    case Event::kOverdue: return "overdue";
    case Event::kKill: return "kill";
    case Event::kExit: return "exit";
  }
  return "?";
}

bool WorkerLife::Move(Event e) {
  auto to = Next(state_, e);
  if (!to) return false;
  state_ = *to;
  return true;
}

bool WorkerLife::Leave(double deadline) {
  const bool first = state_ == State::kRunning;
  if (!Move(Event::kLeave)) return false;
  if (first) leave_by_ = deadline;
  return true;
}

bool WorkerLife::Stop(double now, double grace) {
  const bool first = state_ != State::kStopping;
  if (!Move(Event::kStop)) return false;
  const double at = now + std::max(0.0, grace);
  kill_at_ = first ? at : std::min(kill_at_, at);
  return first;
}

bool WorkerLife::Overdue(double now) {
  if (state_ != State::kLeaving || now <= leave_by_) return false;
  Move(Event::kOverdue);
  kill_at_ = now + kOverdueGrace;
  return true;
}

bool WorkerLife::Kill() { return Move(Event::kKill); }

bool WorkerLife::Exit() { return Move(Event::kExit); }

}  // namespace aryl::agent
