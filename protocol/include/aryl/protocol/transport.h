// Transport: protocol messages over ZeroMQ ROUTER (Server) and DEALER (Client).
//
// Wire format. A Client sends two frames [correlation, message]; the Server's ROUTER
// sees [routing id, correlation, message] and answers [routing id, correlation,
// reply]. The correlation is an opaque token (at most 64 bytes) the Client picks per
// request; an empty correlation marks a one-way message that gets no reply.
// A server-initiated push is [routing id, "", message]. So:
//  1. Request: Client → [c, m]; Server handler returns a reply → [c, r]. The Client
//     discards replies whose correlation it no longer waits for (late replies to
//     requests that timed out), so a timeout never shifts later replies.
//  2. One-way: Client → ["", m]; the handler's reply, if any, is dropped.
//  3. Push: Server::Push(routing id, m) → ["", m]; the Client queues it for
//     Receive(). A Client that sets Options::identity (e.g. an agent id) can be
//     pushed to by that name, and a reconnect with the same identity takes over.
//  4. Garbage (wrong frame count, undecodable message) is counted and dropped; when
//     it carries a correlation the sender gets Error{InvalidArgument} naming the
//     problem. Frames over kMaxFrameBytes are cut off by ZeroMQ (ZMQ_MAXMSGSIZE,
//     which also drops the connection) and by Decode.
//
// Liveness: ZMTP heartbeats (ZMQ_HEARTBEAT_IVL/TIMEOUT/TTL) let a Client detect a
// dead Server (the Server sets no timeout of its own and Clients send no TTL: libzmq
// cancels those timers in O(connections); the Server uses TCP keepalive instead),
// DEALERs reconnect on their own (ZMQ_RECONNECT_IVL[_MAX]), ZMQ_IMMEDIATE keeps a
// disconnected Client from queueing requests that would be delivered stale, and
// ZMQ_LINGER bounds how long closing waits. Every blocking call takes a timeout.
//
// Endpoints: inproc:// (same process; both ends must use the same context, by
// default SharedContext()), ipc:// and tcp://. A Server bound to "tcp://host:*"
// picks a free port; endpoint() tells which.
//
// Security: with Options::curve set, a Server speaks CURVE and runs its own
// ZapAuthenticator (security.h) in its own context, so only allow-listed client keys
// get in; refusals are logged with the peer address. CURVE needs tcp:// or ipc://.
//
// Thread safety: Server runs its handler and tick on its own thread; Reply and Push
// may be called from any thread. Client is thread-safe; its calls are serialized.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "aryl/protocol/messages.h"
#include "aryl/result.h"
#include "aryl/status.h"

namespace zmq {
class context_t;
}

namespace aryl::protocol {

// The process-wide ZeroMQ context used when Options::context is null. Never
// terminated (terminating it at exit would wait on sockets still open).
zmq::context_t& SharedContext();

// Socket tuning shared by Server and Client; the defaults suit a LAN.
struct SocketOptions {
  std::chrono::milliseconds heartbeat_interval{1000};  // ZMTP PING every ...
  std::chrono::milliseconds heartbeat_timeout{3000};   // no traffic for ... = dead peer
  std::chrono::milliseconds reconnect_interval{100};
  std::chrono::milliseconds reconnect_interval_max{2000};
  std::chrono::milliseconds linger{200};  // how long Close() may flush unsent frames
  int high_water_mark = 10000;            // frames queued per peer before dropping
  int backlog = 4096;  // a Server's pending TCP connections (capped by net.core.somaxconn)
};

// CURVE keys in Z85 text (40 characters each); see security.h for key files.
struct CurveServerKeys {
  std::string public_key{};
  std::string secret_key{};
  std::set<std::string> allowed_clients{};  // client public keys
};
struct CurveClientKeys {
  std::string public_key{};
  std::string secret_key{};
  std::string server_public_key{};
};

// Where the scheduler listens and its clients connect by default: a local
// socket whose peers the kernel identifies by uid (SO_PEERCRED), so that a
// keyless install tells local users apart (docs/security.md). Reaching the
// scheduler from other servers takes tcp:// with CURVE keys.
inline constexpr const char* kDefaultSchedulerEndpoint = "ipc:///run/aryl/scheduler.sock";

// Who sent a frame to a Server.
struct Peer {
  std::string identity{};  // ROUTER routing id (Client::Options::identity or random)
  std::string address{};   // remote IP for tcp://, empty for inproc/ipc
  std::string user_id{};   // CURVE: the client's public key (Z85); empty without CURVE
  // ipc:// only: the connecting process's uid as the kernel reported it at
  // connect (SO_PEERCRED, from libzmq's "<host>:<uid>:<gid>:<pid>" address);
  // nullopt on every other transport.
  std::optional<std::uint32_t> uid{};
};

// The uid in a libzmq ipc peer address ("<host>:<uid>:<gid>:<pid>"); nullopt
// when it is not one. Only meaningful for an ipc:// server (Peer::uid).
std::optional<std::uint32_t> IpcPeerUid(const std::string& address);

// A received message's return address; keep it to reply later (Server::Reply).
struct ReplyTo {
  Peer peer{};
  std::string correlation{};  // empty: one-way, nobody waits for a reply
};

struct ServerStats {
  std::uint64_t received = 0;     // well-formed messages handed to the handler
  std::uint64_t rejected = 0;     // garbage frames (bad envelope or undecodable)
  std::uint64_t sent = 0;         // replies and pushes sent
  std::uint64_t send_failed = 0;  // unknown peer or full queue
};

class Server {
 public:
  // Called on the server thread for each decoded message. Return a reply, or
  // nullopt to answer later with Reply() (or not at all, for one-way messages).
  // An exception thrown here becomes Error{Internal} for the sender.
  using Handler = std::function<std::optional<Message>(const ReplyTo& from, Message msg)>;

  struct Options {
    std::string endpoint{};  // to bind: "tcp://127.0.0.1:*", "ipc:///run/aryl.sock", ...
    std::optional<CurveServerKeys> curve{};
    SocketOptions socket{};
    // Called on the server thread at least every tick (timers: wait deadlines,
    // heartbeat checks).
    std::chrono::milliseconds tick{50};
    std::function<void()> on_tick{};
    zmq::context_t* context = nullptr;  // null: SharedContext() (own context with CURVE)
  };

  // Binds and starts the server thread. Fails (InvalidArgument / IoError) when the
  // endpoint is malformed or taken, or the CURVE keys are invalid.
  static Result<std::unique_ptr<Server>> Start(Options options, Handler handler);
  ~Server();  // Close() + Join()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound endpoint, with the port filled in for "tcp://host:*".
  const std::string& endpoint() const;

  // Sends `msg` as the answer to `to` (a no-op for one-way messages). Any thread.
  Status Reply(const ReplyTo& to, const Message& msg);
  // Sends `msg` to the Client whose routing id is `identity`. Any thread. From the
  // server thread an unknown peer is reported as Unavailable; from other threads
  // delivery is asynchronous and failures only counted in stats().
  Status Push(std::string_view identity, const Message& msg);

  ServerStats stats() const;
  // True when the loop's last receive batch found no more queued messages: a
  // tick can then trust that every message sent before it has been handled
  // (the daemon's agent liveness check measures time up to such a moment).
  bool drained() const;

  // Two-step shutdown: Close() stops the loop (returns at once, any thread);
  // Join() waits for the thread and closes the sockets. Both idempotent.
  void Close();
  void Join();

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Client {
 public:
  struct Options {
    std::string endpoint{};  // to connect: "tcp://head:7117", "ipc://...", "inproc://..."
    std::string identity{};  // routing id the Server sees; empty = random
    std::optional<CurveClientKeys> curve{};
    SocketOptions socket{};
    std::size_t max_queued_pushes = 4096;  // oldest dropped beyond this
    zmq::context_t* context = nullptr;     // null: SharedContext()
  };

  // Creates the socket and starts connecting (asynchronously; a Server need not be
  // up yet). Fails only for a malformed endpoint or invalid keys.
  static Result<std::unique_ptr<Client>> Connect(Options options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends `msg` and waits for its reply. Timeout when not connected, or no reply,
  // within `timeout`; an Error reply is returned as a message (see Call()).
  Result<Message> Request(const Message& msg, std::chrono::milliseconds timeout);

  // Request() that expects a reply of type T; an Error reply becomes its Status.
  template <typename T>
  Result<T> Call(const Message& msg, std::chrono::milliseconds timeout) {
    ARYL_ASSIGN_OR_RETURN(Message reply, Request(msg, timeout));
    return As<T>(std::move(reply));
  }

  // One-way send; Timeout when not connected within `timeout`.
  Status Send(const Message& msg, std::chrono::milliseconds timeout);

  // The next pushed message; Timeout when none arrives within `timeout`.
  Result<Message> Receive(std::chrono::milliseconds timeout);

  // Closes the socket (bounded by linger). Later calls fail with Cancelled.
  void Close();

  const std::string& endpoint() const;

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace aryl::protocol
