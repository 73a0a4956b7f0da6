// The Aryl wire protocol: every message the scheduler, agents, workers, the
// rendezvous store and the command-line clients exchange.
//
// Who sends what to whom (→ request or push, ⇠ reply):
//
//  Agent ↔ scheduler (agent DEALER, routing id = agent id → scheduler ROUTER):
//   1. Agent → AgentRegister {agent id, host, pool, gpu type, slots, the workers it
//      already runs}. Sent on start and again after any reconnect, so a restarted
//      scheduler reconciles from what agents report. ⇠ AgentRegistered (or Error).
//      Registrations and heartbeats are the agent's reports of what it runs,
//      numbered from one counter per agent process (AgentRegister.seq,
//      Heartbeat.seq): the scheduler reads none older than one it has read
//      from the same process (`instance`), so a registration that a later
//      report overtook cannot undo it (a stale list would have workers that
//      run read as gone). A stale registration is answered Error{FailedPrecondition}.
//   2. Agent → Heartbeat {seq, free slots, running workers} every
//      AgentRegistered.heartbeat_interval_seconds, one-way. A scheduler that does
//      not know the agent (it restarted) pushes Error{FailedPrecondition}; the
//      agent then registers again (step 1) without touching its workers. A
//      scheduler that knows it pushes HeartbeatAck {seq, lease}: the agent's
//      lease runs until the send time of the newest acknowledged heartbeat plus
//      `lease_seconds`. An agent whose lease ran out stops its workers
//      (checkpoint first) and registers again; the scheduler starts a job whose
//      rendezvous store was on a lost agent elsewhere only once that agent's
//      lease has surely expired (docs/architecture.md, "Leases and fencing").
//   3. Scheduler → StartWorkers {job, generation, workers to start here, members,
//      argv, env, checkpoint dir, store endpoint}, pushed by routing id. The agent
//      forks the workers and answers with nothing; failures come as WorkerExited.
//   4. Scheduler → NewGeneration {job, generation, full member list, local leavers}
//      to every agent that hosts stayers or leavers of the job. Joiners of the same
//      generation arrive as StartWorkers. The agent relays it (step 12).
//   5. Scheduler → StopWorkers {job, workers (empty = all here), grace, checkpoint
//      first}. The agent sends WorkerCheckpointRequest first when asked, then
//      SIGTERM, then SIGKILL after the grace period.
//   6. Scheduler → WorkerCheckpointRequest {job, reason, deadline}: a preemption
//      notice; the agent relays it to the job's local workers (step 15).
//   7. Agent → WorkerExited {job, worker, exit code or signal, the runtime's
//      outcome (step 18), exec error}, one-way. The agent keeps each exit and
//      sends it again (every few seconds, and in AgentRegister.exited) until the
//      scheduler answers WorkerExitAck, which it sends once the exit is durable:
//      an exit is never lost to a scheduler restart or a full state disk, and
//      handling one twice changes nothing.
//   8. Agent → ResizeReport {job, generation, per-phase timings}, one-way, once
//      per resize (from the rank-0 worker's WorkerResizeReport).
//   9. Agent → JobProgress {job, step, loss, steps/s, remaining work}, one-way,
//      from the rank-0 worker's WorkerProgress, at most a few times per second.
//  Term fencing (steps 1-6). Every scheduler → agent message that grants the
//  lease or changes workers (AgentRegistered, HeartbeatAck, StartWorkers,
//  NewGeneration, StopWorkers, WorkerCheckpointRequest) carries `term`, the
//  sending scheduler's fencing token: the create revision of the etcd leader
//  key it holds (high availability), or a counter in the state file bumped at
//  every start (SQLite). A later leader's term is higher than every earlier
//  one's, so a deposed leader that has not yet noticed is told apart:
//   a. An agent remembers the highest term it has seen, from AgentRegistered
//      and from every command.
//   b. It refuses any of these messages with a lower term, logging a warning
//      that names both terms: a deposed leader can neither start, stop, resize
//      or checkpoint workers, nor renew the agent's lease, nor register it.
//   c. Term 0 means "no term" (a scheduler that stamps none); it is accepted
//      only while the agent has seen no term.
//  A scheduler whose state file was restored from an older copy starts with a
//  lower term than its agents have seen: they refuse it until they restart.
//  Start confirmation (steps 1-3). A StartWorkers that is late must not run
//  after the scheduler gave it up, nor be given up while it may still run:
//   d. The scheduler numbers each start with `ack_floor`, the newest report
//      (registration or heartbeat seq) of the agent's process it had
//      acknowledged when it sent the start; every later acknowledgement
//      (AgentRegistered, HeartbeatAck) is of a newer report.
//   e. The agent keeps the newest report acknowledged to it (`acked`) and
//      sends it in every registration and heartbeat. It refuses a start whose
//      ack_floor is below it: an acknowledgement sent after that start
//      overtook it.
//   f. A start that a report with acked > its ack_floor does not list never
//      runs (refused, or already ended: its WorkerExited says so): the
//      scheduler gives it up at once. One that no such report has covered
//      yet is waited for, however late the wire is; a lost agent's lease
//      settles it. A worker the scheduler restored from its state file is
//      not waited for: the agent's registration with the new process lists
//      what runs, and what it does not list is gone (the old process's
//      starts carry an older term: refused from then on). A worker reloaded
//      after a failed state write, and an agent that sends no `acked` (an
//      older version): a start unlisted for 6 s of watching is given up
//      (the time rule it had).
//
//  Client (aryl, aryl-run, an inference cluster manager) ↔ scheduler (DEALER → ROUTER):
//  10. SubmitJob ⇠ SubmitReply{job}; ListJobs ⇠ JobsReply (a page); JobStatus ⇠
//      JobStatusReply; CancelJob ⇠ Ok; ListNodes ⇠ NodesReply; PoolOffer ⇠ Ok;
//      PoolReclaim ⇠ Ok; NodeCommand ⇠ Ok; StatusRequest ⇠ StatusReply; ListQueues ⇠
//      QueuesReply (queues.h, Q1-Q2). Any request may instead be
//      answered with Error{code, message}.
//  11. WatchJob ⇠ Ok, then the scheduler pushes JobEvent {state, size, rank-0
//      output lines} to that client until a JobEvent with final = true. A client
//      re-sends WatchJob after a reconnect.
//
//  Worker (runtime) ↔ agent or a test coordinator (worker DEALER → ROUTER on ipc://):
//  12. Worker → WorkerHello {job, worker, pid, generation} once at start ⇠ the
//      current GenerationAnnounce. The agent pushes every later
//      GenerationAnnounce {job, generation, members in rank order, store endpoint
//      and prefix}; a worker not among the members leaves at the switch step.
//  13. Worker → WorkerResizeReport {phase timings} after each resize, one-way.
//  14. Worker → WorkerProgress {step, loss, rate}, one-way.
//  15. Agent → WorkerCheckpointRequest: checkpoint now (e.g. a preemption notice).
//  16. Worker → WorkerLeave {job, worker, generation, step} when it leaves
//      cleanly (it then exits 0), one-way.
//  18. Worker → WorkerDone {job, worker, generation, step, outcome} just before
//      its program exits ⇠ Ok. Only an outcome of "completed" ends a job as
//      completed; an exit 0 without it (a worker stopped by a signal the runtime
//      turned into a clean stop) is not the end of the job's work.
//
//  Operator inspection (describe job/node, logs through the agents, the event
//  journal, checkpoint reports): see inspect.h, steps 1-8 there.
//
//  Rendezvous store (StoreClient → StoreServer, embedded in an agent, the daemon
//  or a test coordinator; it outlives every worker):
//  17. StoreSet, StoreGet (waits up to timeout_ms for the key), StoreAdd,
//      StoreCompareSet, StoreWait (waits until every key exists), StoreCheck,
//      StoreDeleteKey ⇠ StoreReply, or Error{Timeout | NotFound | ...}.
//
// Encoding: one UTF-8 JSON object per frame, {"v": 1, "type": "<type>", fields...}.
// Decoding is strict and total (see Decode). Unknown fields are rejected, so adding
// a field is a protocol version bump; peers built from one tree always agree.
// Binary values (store values) travel as base64 strings. Non-finite doubles are
// rejected, except fields documented as "NaN allowed", which carry NaN as null.
//
// Thread safety: messages are plain values; Encode and Decode are reentrant.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl::protocol {

inline constexpr int kProtocolVersion = 1;
// Largest frame Decode accepts (and the transport lets through).
inline constexpr std::size_t kMaxFrameBytes = std::size_t{1} << 20;

}  // namespace aryl::protocol

#define ARYL_PROTOCOL_MESSAGES_H_PARTS
#include "aryl/protocol/wire_basics.h"
#include "aryl/protocol/agent_messages.h"
#include "aryl/protocol/client_messages.h"
#include "aryl/protocol/worker_messages.h"
#include "aryl/protocol/store_messages.h"
#include "aryl/protocol/inspect.h"
#include "aryl/protocol/serving.h"
#include "aryl/protocol/queues.h"
#undef ARYL_PROTOCOL_MESSAGES_H_PARTS
namespace aryl::protocol {

// --- The message sum type --------------------------------------------------------

// X(Type) for every message, in a fixed order (the variant's index order).
// clang-format off
#define ARYL_PROTOCOL_MESSAGES(X)                                                          \
  X(AgentRegister) X(AgentRegistered) X(Heartbeat) X(StartWorkers) X(NewGeneration)        \
  X(StopWorkers) X(WorkerExited) X(WorkerExitAck) X(ResizeReport) X(JobProgress)           \
  X(HeartbeatAck)                                                                          \
  X(SubmitJob) X(SubmitReply) X(ListJobs) X(JobsReply) X(JobStatus) X(JobStatusReply)      \
  X(CancelJob) X(ListNodes) X(NodesReply) X(NodeCommand) X(PoolOffer) X(PoolReclaim)       \
  X(WatchJob)                                                                              \
  X(JobEvent) X(StatusRequest) X(StatusReply) X(Ok) X(Error)                               \
  X(WorkerHello) X(GenerationAnnounce) X(WorkerResizeReport) X(WorkerProgress)             \
  X(WorkerCheckpointRequest) X(WorkerLeave) X(WorkerDone)                                  \
  X(StoreSet) X(StoreGet) X(StoreAdd) X(StoreCompareSet) X(StoreWait) X(StoreCheck)        \
  X(StoreDeleteKey) X(StoreReply)                                                         \
  ARYL_PROTOCOL_INSPECT_MESSAGES(X)                                                        \
  ARYL_PROTOCOL_SERVING_MESSAGES(X)                                                        \
  ARYL_PROTOCOL_QUEUES_MESSAGES(X)
// clang-format on

#define ARYL_PROTOCOL_COMMA_TYPE_(T) , T
namespace internal {
template <typename... Ts>
struct TypeList {};
template <typename L>
struct VariantOfTail;
template <typename F, typename... Ts>
struct VariantOfTail<TypeList<F, Ts...>> {
  using type = std::variant<Ts...>;
};
}  // namespace internal
#define ARYL_PROTOCOL_COMMA_TYPE_(T) , T
// Every message type; the index order is the list's order.
using Message = internal::VariantOfTail<
    internal::TypeList<void ARYL_PROTOCOL_MESSAGES(ARYL_PROTOCOL_COMMA_TYPE_)>>::type;
#undef ARYL_PROTOCOL_COMMA_TYPE_

// --- Encode / Decode ------------------------------------------------------------------

// One JSON frame. Never throws; invalid UTF-8 in strings is replaced by U+FFFD.
#define ARYL_PROTOCOL_DECLARE_ENCODE_(T) std::string Encode(const T& msg);
ARYL_PROTOCOL_MESSAGES(ARYL_PROTOCOL_DECLARE_ENCODE_)
#undef ARYL_PROTOCOL_DECLARE_ENCODE_
std::string Encode(const Message& msg);

// The frame's JSON object (e.g. for `aryl ... --json`).
nlohmann::json ToJson(const Message& msg);

// Strict, total decoding. Fails with InvalidArgument naming the problem and the field
// ("start_workers: field 'workers[1].rank': expected integer >= 0, got -3") for: an
// empty frame, a frame over kMaxFrameBytes, invalid JSON, a non-object, a missing or
// unsupported "v", a missing or unknown "type", a missing field, a field of the wrong
// type, a value out of range, an unknown field, a message-level inconsistency.
// Never throws.
Result<Message> Decode(std::string_view frame);

// The message's "type" string ("agent_register", ...).
std::string_view TypeName(const Message& msg);
// Every message type string, in variant order.
std::vector<std::string_view> AllTypeNames();

// Decode that also requires a given type; an Error message decodes to its Status, so
// `DecodeAs<StoreReply>(reply)` turns a remote failure into the caller's error.
template <typename T>
Result<T> DecodeAs(std::string_view frame);
template <typename T>
Result<T> As(Message msg);

template <typename T>
Result<T> As(Message msg) {
  if (auto* v = std::get_if<T>(&msg)) return std::move(*v);
  if constexpr (!std::is_same_v<T, Error>) {
    if (auto* e = std::get_if<Error>(&msg)) return e->ToStatus();
  }
  return Status::InvalidArgument("expected a '" + std::string(T::kType) + "' message, got '" +
                                 std::string(TypeName(msg)) + "'");
}

template <typename T>
Result<T> DecodeAs(std::string_view frame) {
  ARYL_ASSIGN_OR_RETURN(Message msg, Decode(frame));
  return As<T>(std::move(msg));
}

}  // namespace aryl::protocol
