// The serving side of a loaned inference server: the agent drains and stops
// the model server before its server is lent to training, and starts it and
// waits until it is ready before the server counts as returned. Part of
// messages.h (which includes this file before its message list); include
// messages.h. The agent's side is a state machine with one transition table
// (agent/include/aryl/agent/serving_machine.h); the operator's view is in
// docs/operations.md, "The serving side of a loan".
//
// The protocol (→ push or one-way):
//
//  Agent ↔ scheduler (after AgentRegister, protocol step 1):
//   S1. An agent with --serving-start registers with AgentRegister.serving:
//       the serving side's state now. It starts the serving side when it comes
//       up unless the scheduler then says the server is lent (S2), or after
//       kServingUnregisteredStartSeconds without a registration: inference is
//       not left down while the scheduler is away.
//   S2. Scheduler → ServingCommand {lend, term} after every registration of
//       such an agent (the state it should be in: lent while the node is being
//       lent, loaned or still emptied by a reclaim) and whenever that changes:
//       `pool offer` sends lend = true; the reclaim, once no worker is left on
//       the server, lend = false. The agent takes only the newest command (a
//       repeated one changes nothing) and refuses lower terms (term fencing).
//   S3. Agent → ServingReport {agent id, status} one-way at every change of
//       state: lend = true runs drain (when given) then stop, then "stopped";
//       lend = false runs start then probes the ready URL until it answers 2xx,
//       then "ready" with the warm-up measured (start to ready). A step that
//       fails or passes its timeout is state "failed" with the step and why;
//       the agent then waits for the next command (a retry is a new command).
//       The heartbeat's next AgentRegister after a reconnect carries the state
//       too, so a report lost with a scheduler restart is made good.
//   S4. The scheduler lends the server to the core only at "stopped" (a
//       "failed" while lending ends the offer: the server stays inference's);
//       a reclaim is complete only at "ready", and is late if that comes after
//       its deadline. Each report is a journal row (kinds serving_*) and a
//       metric; a reclaim's deadline given to the core is the requested one
//       less the server's warm-up (the last measured, else --serving-warmup).
#pragma once

#ifndef ARYL_PROTOCOL_MESSAGES_H_PARTS
#error "include aryl/protocol/messages.h, not aryl/protocol/serving.h"
#endif

namespace aryl::protocol {

inline constexpr double kServingUnregisteredStartSeconds = 10;

// S2: scheduler → agent.
struct ServingCommand {
  static constexpr std::string_view kType = "serving_command";
  bool lend = false;
  std::uint64_t term = 0;
  template <typename V>
  void Visit(V& v) {
    v("lend", lend);
    v("term", term);
  }
  bool operator==(const ServingCommand&) const = default;
};

// S3: agent → scheduler.
struct ServingReport {
  static constexpr std::string_view kType = "serving_report";
  std::string agent_id{};
  ServingStatus status{};
  template <typename V>
  void Visit(V& v) {
    v("agent_id", agent_id, {.non_empty = true});
    v("status", status);
  }
  bool operator==(const ServingReport&) const = default;
};

}  // namespace aryl::protocol

// clang-format off
#define ARYL_PROTOCOL_SERVING_MESSAGES(X) X(ServingCommand) X(ServingReport)
// clang-format on
