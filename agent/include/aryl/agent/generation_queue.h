// GenerationQueue: the life cycle of a job's generations as one agent sees
// them, and the order in which the agent announces them to its workers
// (protocol steps 9-13, docs/protocol.md; the store side in store_relay.h).
//
// A generation here is one scheduler plan (NewGeneration s, store generation
// G = PlanGeneration(s)) of a job with a rendezvous store. Its states:
//
//   kForming    planned; the agent waits until every member has set
//               "ready/<id>" in the job's store (joiners set it when they start)
//   kAgreed     announced to the workers here (GenerationAnnounce): the runtime
//               moves into it at a step boundary; the agent waits for the
//               runtime's "report/<G>"
//   kTraining   the runtime reported the switch: the generation trains (final
//               for the agent)
//   kAbandoned  it will never train as planned (final): a newer plan of the
//               job superseded it, one of its members ended while it formed,
//               its members were not all ready in time, or the job ended here
//
// Transitions, the only ones (kTable; each is one member function below):
//   T1 Plan        (new)      -> kForming   a NewGeneration with workers here
//   T2 Superseded  kForming   -> kAbandoned a newer plan of the same job (T1)
//                  kAgreed    -> kAbandoned   arrived: the newest plan wins
//   T3 AllReady    kForming   -> kAgreed    every member is ready: announce it
//   T4 Reported    kAgreed    -> kTraining  report/<G>, or rank 0's WorkerResizeReport
//                  kForming   -> kTraining    (the runtime got there first)
//   T5 MemberEnded kForming   -> kAbandoned one of its members exited here
//   T6 Expired     kForming   -> kAbandoned not all ready by the forming deadline
//                  kAgreed    -> kAbandoned no report by the report deadline
//   T7 JobEnded    kForming   -> kAbandoned the job's last worker here is gone
//                  kAgreed    -> kAbandoned
//
// Why the newest plan wins (T2): the runtime agrees on the highest generation
// any rank has seen (runtime.h, step 2), so an older plan is never needed to
// reach a newer one. A plan that cannot form (a joiner died before it was
// ready) used to hold every later plan of its job behind it until its forming
// deadline (120 s), and a plan announced but never reported (a member died in
// the switch) held the next for 30 s; the joiners of those later plans timed
// out in their rendezvous meanwhile, were replaced, and the job livelocked.
//
// Pure: no clock (times are arguments), no I/O. Thread safety: none; the
// agent's loop owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace aryl::agent {

class GenerationQueue {
 public:
  enum class State { kForming, kAgreed, kTraining, kAbandoned };
  enum class Event { kPlan, kSuperseded, kAllReady, kReported, kMemberEnded, kExpired, kJobEnded };
  struct Row {
    std::optional<State> from;  // nullopt: a new generation
    Event event;
    State to;
  };
  // Every legal transition; anything else is a bug (Apply refuses it).
  static constexpr Row kTable[] = {
      {std::nullopt, Event::kPlan, State::kForming},
      {State::kForming, Event::kSuperseded, State::kAbandoned},
      {State::kAgreed, Event::kSuperseded, State::kAbandoned},
      {State::kForming, Event::kAllReady, State::kAgreed},
      {State::kAgreed, Event::kReported, State::kTraining},
      {State::kForming, Event::kReported, State::kTraining},
      {State::kForming, Event::kMemberEnded, State::kAbandoned},
      {State::kForming, Event::kExpired, State::kAbandoned},
      {State::kAgreed, Event::kExpired, State::kAbandoned},
      {State::kForming, Event::kJobEnded, State::kAbandoned},
      {State::kAgreed, Event::kJobEnded, State::kAbandoned},
  };
  // The state `event` leads to from `from`, or nullopt when kTable has no such row.
  static std::optional<State> Next(std::optional<State> from, Event event);
  static std::string_view Name(State s);
  static std::string_view Name(Event e);

  struct Timeouts {
    double forming = 120;  // s from the plan until every member is ready
    double report = 30;    // s from the announcement until the runtime's report
  };

  struct Generation {
    std::int64_t job = 0;
    std::int64_t generation = 0;        // store generation
    std::vector<std::int64_t> members;  // worker ids in rank order
    std::string endpoint, key;          // the job's store and its key there
    State state = State::kForming;
    double deadline = 0;  // of the current state
  };
  // One transition, for the agent's log and for tests.
  struct Transition {
    std::int64_t job = 0;
    std::int64_t generation = 0;
    std::optional<State> from;
    Event event;
    State to;
    std::string key;  // the job's key in its store
  };

  GenerationQueue() = default;
  explicit GenerationQueue(Timeouts t) : timeouts_(t) {}

  // T1 (and T2 for the older generations of the job). A plan not newer than
  // one already here is ignored (false): the agent fences stale plans before.
  bool Plan(Generation g, double now);
  // T3: every member of `generation` is ready; returns the generation to
  // announce (nullopt when it is no longer forming).
  std::optional<Generation> AllReady(std::int64_t job, std::int64_t generation, double now);
  // T4.
  void Reported(std::int64_t job, std::int64_t generation);
  // T5: `worker` of `job` exited here.
  void MemberEnded(std::int64_t job, std::int64_t worker);
  // T6 for every generation past its deadline.
  void Expire(double now);
  // T7.
  void JobEnded(std::int64_t job);

  // The generation of `job` in flight (forming or agreed), if any: at most one.
  const Generation* Current(std::int64_t job) const;
  // Every generation in flight, for the loop's store queries.
  std::vector<Generation> InFlight() const;
  // Transitions made since the last call, in order.
  std::vector<Transition> TakeTransitions() { return std::exchange(log_, {}); }

 private:
  void Apply(Generation& g, Event e);  // moves g along kTable and logs it

  Timeouts timeouts_;
  std::map<std::int64_t, Generation> in_flight_;  // by job
  std::map<std::int64_t, std::int64_t> newest_;   // newest plan seen per job
  std::vector<Transition> log_;
};

}  // namespace aryl::agent
