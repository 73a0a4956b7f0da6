// SchedulerClient: a Client (transport.h) that finds the leader among several
// aryl-scheduler processes, for agents, `aryl` and `aryl-run`.
//
// In a highly available install several schedulers share their state; one is
// the leader, the others are standbys. Clients are given all of them as a
// list ("tcp://a:7117,tcp://b:7117", ParseSchedulerEndpoints).
//
// The standby reply:
//  1. A standby answers every request with Error{code = Unavailable,
//     message = StandbyError(...)} (and may push the same Error in answer to
//     a one-way message, such as a Heartbeat): either
//       "standby: not the leader (term N); the leader is ENDPOINT"
//     naming the leader it knows and that leader's term, or, while none is
//     known,
//       "standby: not the leader; no leader is known yet (election in progress)".
//     IsStandbyError tells this reply from any other Unavailable, LeaderHint
//     reads the ENDPOINT back (from an Error, or from the Status a Call makes
//     of it, with or without added context).
//
// Finding the leader (Request):
//  2. A request goes to the current endpoint (the first of the list at start).
//  3. A reply that is not the standby Error, including every other Error, is
//     the answer: it is returned as it is, and the endpoint stays current.
//  4. On Timeout, or the standby Error, the client moves: to the hinted leader
//     when the reply named one (an endpoint of the list, or any other
//     well-formed one, which then joins the list), else to the next endpoint of
//     the list that gave a reply in the last 10 s (an endpoint is silent
//     after a try's Timeout or a Failover away from it). When every other
//     endpoint was silent, a standby that knows no leader yet is asked again
//     (an election is in progress and it may win it: a dead leader, just
//     left, is not tried again first), and after a Timeout the client goes
//     on round the list. A move to another endpoint closes the DEALER and connects a new
//     one (same identity), so late replies of the old one are never taken for
//     answers; staying on the only endpoint keeps the socket.
//  5. Before the next try it sleeps a backoff: backoff_initial, doubling up to
//     backoff_max, with +-25% jitter, so a fleet of clients does not retry in
//     step. Following a hint right after a try that was not itself a followed
//     hint does not sleep (the hint is fresh news); two hints in a row do, so
//     two standbys that name each other cannot make a tight loop.
//  6. Each try waits at most per_try_timeout, and no try starts or outlives
//     total_timeout from the call's start. Then the call fails with the last
//     try's status code and message, prefixed with the endpoints tried.
//
// Retrying is safe only for idempotent requests, and every request Aryl's
// clients and agents send is: SubmitJob carries a client token (a resent
// submission returns the job the first created), CancelJob, ListJobs,
// JobStatus, ListNodes, StatusRequest, describe and log reads change nothing
// or change it once, and AgentRegister is idempotent (the scheduler
// reconciles from what it reports). A request a new leader answers may have
// been applied by the old one too; that is what idempotency covers.
//
// Send and Receive do not move: a one-way message goes to the current
// endpoint, and pushes come from the current connection (a move loses pushes
// the old one had queued; clients re-send WatchJob and agents re-register, so
// nothing depends on them). Failover moves explicitly, e.g. when an agent's
// heartbeats stop being acknowledged.
//
// Every move is logged at info: "scheduler tcp://a:7117 -> tcp://b:7117 (reason)".
//
// Thread safety: like Client, every method may be called from any thread.
// Calls on one connection are serialized by that Client; a move while another
// thread waits on the old connection lets that call finish there.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"
#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl::protocol {

// "tcp://a:7117,tcp://b:7117" (or a single endpoint; tcp://, ipc:// and
// inproc://; spaces around items are ignored) as a list. An empty list or
// item, a duplicate, or an item without one of those schemes and an address
// is InvalidArgument naming the item.
Result<std::vector<std::string>> ParseSchedulerEndpoints(std::string_view list);

// The standby reply (step 1). `leader_endpoint` empty: no leader known yet.
Error StandbyError(std::string_view leader_endpoint, std::uint64_t term);
// The leader's reply while it is frozen (etcd unreachable; daemon/leadership.h):
// Error{Unavailable, "frozen: this scheduler cannot decide now (WHY); retry
// in a few seconds"}. SchedulerClient asks the same endpoint again after a
// backoff, within its total timeout.
inline constexpr std::string_view kFrozenPrefix = "frozen: this scheduler cannot decide now (";
Error FrozenError(std::string_view why);
bool IsFrozenError(const Error& e);
bool IsFrozenError(const Status& s);  // with or without added context
// Whether `s` (or `e`) is a standby's reply, with or without added context.
bool IsStandbyError(const Status& s);
bool IsStandbyError(const Error& e);
// The leader a standby reply names; nullopt for any other error, for a
// standby that knows none, and for a name that is not a well-formed endpoint.
std::optional<std::string> LeaderHint(const Error& e);
std::optional<std::string> LeaderHint(const Status& s);

class SchedulerClient {
 public:
  struct Options {
    std::vector<std::string> endpoints{};  // ParseSchedulerEndpoints; tried in this order
    std::string identity{};                // routing id, kept across moves; empty = random
    // Every scheduler of a cluster shares one CURVE key pair, so one server key serves them all.
    std::optional<CurveClientKeys> curve{};
    SocketOptions socket{};
    std::size_t max_queued_pushes = 4096;
    std::chrono::milliseconds total_timeout{30000};  // a Request's whole budget (step 6)
    std::chrono::milliseconds backoff_initial{100};  // step 5
    std::chrono::milliseconds backoff_max{2000};
    zmq::context_t* context = nullptr;  // null: SharedContext()
  };

  // Connects to the first endpoint (asynchronously, as Client::Connect).
  // Fails for an empty list, a malformed endpoint or invalid keys.
  static Result<std::unique_ptr<SchedulerClient>> Connect(Options options);
  ~SchedulerClient();
  SchedulerClient(const SchedulerClient&) = delete;
  SchedulerClient& operator=(const SchedulerClient&) = delete;

  // Steps 2-6. An Error reply other than the standby's is returned as a message.
  Result<Message> Request(const Message& msg, std::chrono::milliseconds per_try_timeout);

  // Request() that expects a reply of type T; an Error reply becomes its Status.
  template <typename T>
  Result<T> Call(const Message& msg, std::chrono::milliseconds per_try_timeout) {
    ARYL_ASSIGN_OR_RETURN(Message reply, Request(msg, per_try_timeout));
    return As<T>(std::move(reply));
  }

  // One-way, to the current endpoint; Timeout when not connected within `timeout`.
  Status Send(const Message& msg, std::chrono::milliseconds timeout);
  // The next push on the current connection; Timeout when none within `timeout`.
  Result<Message> Receive(std::chrono::milliseconds timeout);

  // Moves to the next endpoint of the list (reconnecting; the same one when
  // the list has only one) and logs why.
  Status Failover(std::string reason);

  std::string endpoint() const;                // the current one
  std::vector<std::string> endpoints() const;  // the list, with hinted leaders added

  // Closes the connection; later calls fail with Cancelled.
  void Close();

  class Impl;

 private:
  explicit SchedulerClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace aryl::protocol
