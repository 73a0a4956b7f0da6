// ServingMachine: the serving side of an inference server as its agent runs
// it (protocol/serving.h, steps S1-S4). The agent runs the operator's hooks:
// --serving-drain (out of the load balancer, finish in-flight requests),
// --serving-stop, --serving-start and the --serving-ready URL; this class
// decides which to run next. States:
//
//   kIdle      nothing runs: before the first command, or the process of a
//              supervised serving side exited on its own (then kFailed)
//   kStarting  the start hook runs, then the ready URL is probed
//   kReady     the ready URL answered 2xx: the server takes traffic
//   kDraining  the drain hook runs
//   kStopping  the stop hook runs (or the supervised process is stopped)
//   kStopped   the serving side is down: the server may be lent to training
//   kFailed    a step failed or passed its timeout (step() and error() say
//              which and why); waits for the next command
//
// Transitions (kTable; each is one member function below):
//   T1 Serve      kIdle|kStopped|kFailed -> kStarting  wanted: serving (lend = false)
//   T2 Ready      kStarting              -> kReady     the ready URL answered
//   T3 Lend       kReady|kFailed         -> kDraining  wanted: lent, with a drain hook
//                 kReady|kFailed|kIdle   -> kStopping  without one (from kIdle:
//                 nothing serves, so nothing to drain)
//   T4 Drained    kDraining              -> kStopping  the drain hook exited 0
//   T5 Stopped    kStopping              -> kStopped   the stop hook exited 0
//   T6 Failed     kStarting|kDraining|kStopping -> kFailed  a hook failed or timed out
//                 kReady                 -> kFailed    the serving process exited
//   T7 Abandon    kStarting              -> kDraining/kStopping  lent while it
//                 was still starting (its start hook is done, the URL not ready)
//
// The newest wish wins: Want(lend) records it, and Next() gives the step it
// calls for once no step runs (a step in flight ends first, bounded by its
// timeout; a ready probe is not a step and is abandoned at once, T7). From
// kFailed only a command received after the failure starts a step: a failed
// hook is not retried in a loop, the scheduler's next command retries it.
//
// Pure: times are arguments; no I/O. Thread safety: none (the agent's loop).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace aryl::agent {

class ServingMachine {
 public:
  enum class State { kIdle, kStarting, kReady, kDraining, kStopping, kStopped, kFailed };
  enum class Event { kServe, kReady, kLend, kDrained, kStopped, kFailed, kAbandon };
  // What the agent should start now.
  enum class Step { kNone, kStart, kProbe, kDrain, kStop };
  struct Row {
    State from;
    Event event;
    State to;
  };
  static constexpr Row kTable[] = {
      {State::kIdle, Event::kServe, State::kStarting},      {State::kStopped, Event::kServe, State::kStarting},
      {State::kFailed, Event::kServe, State::kStarting},    {State::kStarting, Event::kReady, State::kReady},
      {State::kReady, Event::kLend, State::kDraining},      {State::kFailed, Event::kLend, State::kDraining},     {State::kReady, Event::kLend, State::kStopping},
      {State::kIdle, Event::kLend, State::kStopping},       {State::kFailed, Event::kLend, State::kStopping},
      {State::kDraining, Event::kDrained, State::kStopping}, {State::kStopping, Event::kStopped, State::kStopped},
      {State::kStarting, Event::kFailed, State::kFailed},   {State::kDraining, Event::kFailed, State::kFailed},
      {State::kStopping, Event::kFailed, State::kFailed},   {State::kReady, Event::kFailed, State::kFailed},
      {State::kStarting, Event::kAbandon, State::kDraining}, {State::kStarting, Event::kAbandon, State::kStopping},
  };
  static bool Legal(State from, Event event, State to);
  static std::string_view Name(State s);
  static std::string_view Name(Event e);

  explicit ServingMachine(bool has_drain) : has_drain_(has_drain) {}

  // The scheduler's wish (ServingCommand.lend); nullopt until the first.
  void Want(bool lend) {
    want_lent_ = lend;
    fresh_ = true;
  }
  std::optional<bool> wanted() const { return want_lent_; }

  // The step to start now, given whether one runs (`busy`), taking the
  // transition that starts it (T1, T3, T7). kProbe: keep probing the URL.
  Step Next(bool busy, double now);

  // Outcomes of steps (T2, T4, T5, T6).
  void Ready(double now);             // T2; measures the warm-up
  void Drained();                     // T4
  void StoppedOk();                   // T5
  void Failed(std::string step, std::string error);  // T6

  State state() const { return state_; }
  const std::string& step() const { return step_; }
  const std::string& error() const { return error_; }
  double warmup_seconds() const { return warmup_; }
  // Whether the start hook is done and the ready URL is what is awaited.
  bool probing() const { return state_ == State::kStarting && start_done_; }
  void StartDone() { start_done_ = true; }
  // How many transitions were taken (a change to report, protocol S3).
  int changes() const { return changes_; }

 private:
  void Move(Event e, State to);

  bool has_drain_;
  std::optional<bool> want_lent_;
  bool fresh_ = false;  // a command arrived since the last transition Next() took
  State state_ = State::kIdle;
  bool start_done_ = false;
  double started_at_ = 0;
  double warmup_ = -1;
  std::string step_, error_;
  int changes_ = 0;
};

}  // namespace aryl::agent
