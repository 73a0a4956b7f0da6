// WorkerLife: one worker's life as its agent sees it, as named states and one
// table. (The scheduler's view of a job is daemon/job_machine.h; the worker's
// own runtime has runtime/src/worker_phase.h.) The agent keeps one in each
// LocalWorker (local_workers.h) and acts on what its transitions answer: the
// SIGTERM of a first stop, the SIGKILL of a kill; ProcessLauncher (process.h)
// sends them.
//
// States:
//  1. kRunning: started (fork/exec) and not asked to end.
//  2. kLeaving: a NewGeneration left it out (protocol step 4): it exits by
//     itself at the switch step, by leave_by() (the first deadline holds).
//  3. kStopping: asked to stop (StopWorkers with a grace, the agent's lease
//     ran out, a leaver past its deadline): SIGTERM once, SIGKILL at
//     kill_at(), the earliest any stop asked for.
//  4. kKilled: SIGKILL sent (a stop without grace: a reclaim's deadline, a
//     stray); nothing is asked of it any more.
//  5. kExited (terminal): reaped; its WorkerExited is in the ExitBook until
//     the scheduler acknowledges it (exit_book.h).
//
// Transitions (kTable, from --event--> to):
//  a. kRunning, kLeaving --kLeave--> kLeaving (a repeated leave keeps the
//     first deadline)
//  b. kRunning, kLeaving --kStop--> kStopping: send SIGTERM
//  c. kStopping --kStop--> kStopping: no second SIGTERM; kill_at() moves
//     earlier, never later
//  d. kLeaving --kOverdue--> kStopping: past leave_by(), stopped with
//     kOverdueGrace
//  e. kRunning, kLeaving, kStopping --kKill--> kKilled: send SIGKILL
//  f. kRunning, kLeaving, kStopping, kKilled --kExit--> kExited
// Anything else is refused: Next() answers nullopt and the transition
// functions return false, the state unchanged (a leave after a stop, a stop
// or a second kill after a kill, anything after the exit).
//
// Pure: times are passed in. Thread safety: none (the agent's loop owns it).
#pragma once

#include <optional>
#include <string_view>

namespace aryl::agent {

class WorkerLife {
 public:
  enum class State { kRunning, kLeaving, kStopping, kKilled, kExited };
  enum class Event { kLeave, kStop, kOverdue, kKill, kExit };
  struct Row {
    State from;
    Event event;
    State to;
  };
  static constexpr Row kTable[] = {
      {State::kRunning, Event::kLeave, State::kLeaving},    // a
      {State::kLeaving, Event::kLeave, State::kLeaving},    // a
      {State::kRunning, Event::kStop, State::kStopping},    // b
      {State::kLeaving, Event::kStop, State::kStopping},    // b
      {State::kStopping, Event::kStop, State::kStopping},   // c
      {State::kLeaving, Event::kOverdue, State::kStopping}, // d
      {State::kRunning, Event::kKill, State::kKilled},      // e
      {State::kLeaving, Event::kKill, State::kKilled},      // e
      {State::kStopping, Event::kKill, State::kKilled},     // e
      {State::kRunning, Event::kExit, State::kExited},      // f
      {State::kLeaving, Event::kExit, State::kExited},      // f
      {State::kStopping, Event::kExit, State::kExited},     // f
      {State::kKilled, Event::kExit, State::kExited},       // f
  };
  // A leaver past its deadline has this long between SIGTERM and SIGKILL (s).
  static constexpr double kOverdueGrace = 5;

  static std::optional<State> Next(State from, Event event);
  static std::string_view Name(State s);
  static std::string_view Name(Event e);

  State state() const { return state_; }
  double leave_by() const { return leave_by_; }  // kLeaving; -1 before
  double kill_at() const { return kill_at_; }    // kStopping; -1 before

  // a. Whether it was taken (false after a stop or kill).
  bool Leave(double deadline);
  // b, c. Whether a SIGTERM is to be sent now (the first stop only). A stop
  // refused (killed, exited) answers false and changes nothing.
  bool Stop(double now, double grace);
  // d. Whether a leaver's deadline passed at `now`: it is stopping then (send
  // SIGTERM, SIGKILL at kill_at()).
  bool Overdue(double now);
  // e. Whether a SIGKILL is to be sent now (false once killed or exited).
  bool Kill();
  // f. Reaped. False only for a second exit.
  bool Exit();

 private:
  bool Move(Event e);
  State state_ = State::kRunning;
  double leave_by_ = -1;
  double kill_at_ = -1;
};

}  // namespace aryl::agent
