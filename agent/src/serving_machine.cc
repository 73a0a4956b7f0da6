#include "aryl/agent/serving_machine.h"

#include <cstdio>
#include <cstdlib>

#include "aryl/transition_table.h"
namespace aryl::agent {

bool ServingMachine::Legal(State from, Event event, State to) {
  return TableAllows(kTable, from, event, to);
}

std::string_view ServingMachine::Name(State s) {
  switch (s) {
    case State::kIdle: return "idle";
    case State::kStarting: return "starting";
    case State::kReady: return "ready";
    case State::kDraining: return "draining";
    case State::kStopping: return "stopping";
    case State::kStopped: return "stopped";
    case State::kFailed: return "failed";
  }
  return "?";
}

std::string_view ServingMachine::Name(Event e) {
  switch (e) {
    case Event::kServe: return "serve";
    case Event::kReady: return "ready";
    case Event::kLend: return "lend";
    case Event::kDrained: return "drained";
    case Event::kStopped: return "stopped";
    case Event::kFailed: return "failed";
    case Event::kAbandon: return "abandon";
  }
  return "?";
}

void ServingMachine::Move(Event e, State to) {
  if (!Legal(state_, e, to)) {
    // A bug in the caller, never a wire input: stop loudly.
    std::fprintf(stderr, "ServingMachine: no transition %s --%s--> %s\n", Name(state_).data(), Name(e).data(),
                 Name(to).data());
    std::abort();
  }
  state_ = to;
  ++changes_;
}

ServingMachine::Step ServingMachine::Next(bool busy, double now) {
  if (busy || !want_lent_) return Step::kNone;
  if (state_ == State::kFailed && !fresh_) return Step::kNone;
  const bool drain = has_drain_ && state_ != State::kIdle;
  const State lend_to = drain ? State::kDraining : State::kStopping;
  const Step lend_step = drain ? Step::kDrain : Step::kStop;
  fresh_ = false;
  if (*want_lent_) {
    switch (state_) {
      case State::kReady:
      case State::kIdle:
      case State::kFailed:
        Move(Event::kLend, lend_to);  // T3
        return lend_step;
      case State::kStarting:
        Move(Event::kAbandon, lend_to);  // T7
        return lend_step;
      default:
        return Step::kNone;  // draining/stopping run; stopped is there
    }
  }
  switch (state_) {
    case State::kIdle:
    case State::kStopped:
    case State::kFailed:
      Move(Event::kServe, State::kStarting);  // T1
      start_done_ = false;
      started_at_ = now;
      step_.clear();
      error_.clear();
      return Step::kStart;
    case State::kStarting:
      return start_done_ ? Step::kProbe : Step::kNone;
    default:
      return Step::kNone;  // ready; draining/stopping end first, then T1
  }
}

void ServingMachine::Ready(double now) {
  Move(Event::kReady, State::kReady);
  warmup_ = now - started_at_;
}

void ServingMachine::Drained() { Move(Event::kDrained, State::kStopping); }

void ServingMachine::StoppedOk() { Move(Event::kStopped, State::kStopped); }

void ServingMachine::Failed(std::string step, std::string error) {
  Move(Event::kFailed, State::kFailed);
  step_ = std::move(step);
  error_ = std::move(error);
}

}  // namespace aryl::agent
