#include "aryl/protocol/transport.h"

#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "aryl/protocol/security.h"

namespace aryl::protocol {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ZeroMQ drops (and disconnects) anything larger, a little above Decode's limit so
// that Decode, not the socket, reports frames just over it when both ends are ours.
constexpr std::int64_t kMaxMsgSize = std::int64_t(kMaxFrameBytes) + 4096;
constexpr std::size_t kMaxCorrelation = 64;
constexpr std::size_t kMaxParts = 8;
// Messages handled per loop turn before ticks and pushes get their turn.
constexpr int kBatch = 256;
constexpr const char* kZapDomain = "aryl";

Status FromZmq(std::string_view what, const zmq::error_t& e) {
  std::string msg = std::string(what) + ": " + e.what();
  switch (e.num()) {
    case EINVAL:
    case EPROTONOSUPPORT:
    case ENOCOMPATPROTO:
      return Status::InvalidArgument(msg);
    case EADDRINUSE:
    case EADDRNOTAVAIL:
    case ENODEV:
      return Status::IoError(msg);
    case ETERM:
      return Status::Cancelled(msg);
    case EHOSTUNREACH:
      return Status::Unavailable(msg);
    default:
      return Status::IoError(msg);
  }
}

// Printable form of a routing id (random ids are binary).
std::string Printable(std::string_view id) {
  std::string out;
  for (unsigned char c : id) {
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace

std::optional<std::uint32_t> IpcPeerUid(const std::string& address) {
  // "<host>:<uid>:<gid>:<pid>": the uid is the third field from the end.
  size_t c3 = address.rfind(':');
  if (c3 == std::string::npos || c3 == 0) return std::nullopt;
  size_t c2 = address.rfind(':', c3 - 1);
  if (c2 == std::string::npos || c2 == 0) return std::nullopt;
  size_t c1 = address.rfind(':', c2 - 1);
  if (c1 == std::string::npos) return std::nullopt;
  std::string_view uid_text(address.data() + c1 + 1, c2 - c1 - 1);
  unsigned long uid = 0;
  auto [p, ec] = std::from_chars(uid_text.data(), uid_text.data() + uid_text.size(), uid);
  if (ec != std::errc() || p != uid_text.data() + uid_text.size() || uid_text.empty() || uid > 0xffffffffUL)
    return std::nullopt;
  return static_cast<std::uint32_t>(uid);
}

namespace {

std::string MessageProperty(zmq::message_t& msg, const char* name) {
  const char* v = zmq_msg_gets(msg.handle(), name);
  return v ? std::string(v) : std::string();
}

void ApplyCommon(zmq::socket_t& s, const SocketOptions& o) {
  s.set(zmq::sockopt::linger, int(o.linger.count()));
  s.set(zmq::sockopt::maxmsgsize, kMaxMsgSize);
  s.set(zmq::sockopt::heartbeat_ivl, int(o.heartbeat_interval.count()));
  s.set(zmq::sockopt::heartbeat_timeout, int(o.heartbeat_timeout.count()));
  // The peer drops us when it hears nothing for this long (sent in our PINGs).
  s.set(zmq::sockopt::heartbeat_ttl, int(o.heartbeat_timeout.count()));
  s.set(zmq::sockopt::sndhwm, o.high_water_mark);
  s.set(zmq::sockopt::rcvhwm, o.high_water_mark);
}

// Receives one multipart message without blocking; false when none is waiting.
// Parts beyond kMaxParts are read and discarded (and make the message invalid).
bool ReceiveParts(zmq::socket_t& s, std::vector<zmq::message_t>* parts, bool* too_many) {
  parts->clear();
  *too_many = false;
  zmq::message_t part;
  auto r = s.recv(part, zmq::recv_flags::dontwait);
  if (!r) return false;
  bool more = part.more();
  parts->push_back(std::move(part));
  while (more) {
    zmq::message_t next;
    (void)s.recv(next, zmq::recv_flags::none);  // the rest of a multipart is already here
    more = next.more();
    if (parts->size() < kMaxParts) {
      parts->push_back(std::move(next));
    } else {
      *too_many = true;
    }
  }
  return true;
}

long MillisUntil(SteadyClock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now()).count();
  return left < 0 ? 0 : long(left);
}

}  // namespace

zmq::context_t& SharedContext() {
  static zmq::context_t* context = new zmq::context_t(1);
  return *context;
}

// --- Server ---------------------------------------------------------------------------

class Server::Impl {
 public:
  struct Outgoing {
    std::string identity, correlation, payload;
  };

  Options options;
  Handler handler;
  std::unique_ptr<zmq::context_t> own_context;  // CURVE servers get their own
  zmq::context_t* context = nullptr;
  std::unique_ptr<ZapAuthenticator> zap;
  zmq::socket_t router, wake_rx, wake_tx;
  std::string endpoint;
  bool ipc = false;  // peers carry SO_PEERCRED credentials (Peer::uid)
  ino_t ipc_inode = 0;  // the ipc:// socket file this server created

  std::mutex tx_mu;  // guards wake_tx and outbox
  std::deque<Outgoing> outbox;

  std::thread thread;
  std::atomic<std::thread::id> thread_id{};
  std::atomic<bool> stop{false};
  std::mutex join_mu;
  bool joined = false;

  std::atomic<std::uint64_t> received{0}, rejected{0}, sent{0}, send_failed{0};
  std::atomic<bool> drained{true};  // the last receive batch emptied the socket

  Status Init() {
    try {
      if (options.curve) {
        const auto& c = *options.curve;
        if (!IsValidZ85Key(c.public_key) || !IsValidZ85Key(c.secret_key))
          return Status::InvalidArgument("server CURVE keys must be 40-character Z85 strings");
        for (const auto& k : c.allowed_clients)
          if (!IsValidZ85Key(k))
            return Status::InvalidArgument("allow-listed client key '" + k + "' is not Z85");
        if (!options.context) {
          own_context = std::make_unique<zmq::context_t>(1);
          context = own_context.get();
        }
        ARYL_ASSIGN_OR_RETURN(zap, ZapAuthenticator::Start(*context, c.allowed_clients));
      }
      router = zmq::socket_t(*context, zmq::socket_type::router);
      ApplyCommon(router, options.socket);
      router.set(zmq::sockopt::router_mandatory, true);
      router.set(zmq::sockopt::router_handover, true);
      // Every agent of a cluster connects at once when the scheduler starts:
      // a full accept queue drops SYNs, which the kernel retries after 1 s.
      router.set(zmq::sockopt::backlog, options.socket.backlog);
      if (options.curve) {
        router.set(zmq::sockopt::curve_server, true);
        router.set(zmq::sockopt::curve_secretkey, options.curve->secret_key);
        router.set(zmq::sockopt::zap_domain, kZapDomain);
      }
      try {
        router.bind(options.endpoint);
      } catch (const zmq::error_t& e) {
        return FromZmq("bind '" + options.endpoint + "'", e);
      }
      endpoint = router.get(zmq::sockopt::last_endpoint);
      ipc = endpoint.rfind("ipc://", 0) == 0;
      struct stat st {};
      if (endpoint.rfind("ipc://", 0) == 0 && endpoint.size() > 6 && endpoint[6] != '@' &&
          ::stat(endpoint.c_str() + 6, &st) == 0)
        ipc_inode = st.st_ino;

      // A fresh name each time: a closed inproc endpoint is released asynchronously.
      static std::atomic<std::uint64_t> next_wake{0};
      std::string wake = "inproc://aryl-server-wake-" + std::to_string(++next_wake);
      wake_rx = zmq::socket_t(*context, zmq::socket_type::pair);
      wake_rx.bind(wake);
      wake_tx = zmq::socket_t(*context, zmq::socket_type::pair);
      wake_tx.set(zmq::sockopt::linger, 0);
      wake_tx.connect(wake);
    } catch (const zmq::error_t& e) {
      return FromZmq("server on '" + options.endpoint + "'", e);
    }
    return Status::Ok();
  }

  // Server thread only.
  Status SendNow(const std::string& identity, const std::string& correlation,
                 const std::string& payload) {
    try {
      auto r =
          router.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      if (!r) {
        ++send_failed;
        return Status::Unavailable("send queue to peer '" + Printable(identity) + "' is full");
      }
      router.send(zmq::buffer(correlation), zmq::send_flags::sndmore);
      router.send(zmq::buffer(payload), zmq::send_flags::none);
      ++sent;
      return Status::Ok();
    } catch (const zmq::error_t& e) {
      ++send_failed;
      if (e.num() == EHOSTUNREACH)
        return Status::Unavailable("no connected peer '" + Printable(identity) + "'");
      return FromZmq("send to '" + Printable(identity) + "'", e);
    }
  }

  Status Enqueue(std::string identity, std::string correlation, std::string payload) {
    if (std::this_thread::get_id() == thread_id) return SendNow(identity, correlation, payload);
    std::lock_guard<std::mutex> lock(tx_mu);
    if (stop) return Status::Cancelled("server on '" + endpoint + "' is closed");
    outbox.push_back({std::move(identity), std::move(correlation), std::move(payload)});
    try {
      wake_tx.send(zmq::str_buffer("w"), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // The loop also drains the outbox on every tick.
    }
    return Status::Ok();
  }

  void DrainOutbox() {
    std::deque<Outgoing> batch;
    {
      std::lock_guard<std::mutex> lock(tx_mu);
      batch.swap(outbox);
    }
    for (auto& o : batch) {
      Status s = SendNow(o.identity, o.correlation, o.payload);
      if (!s.ok()) spdlog::debug("server {}: {}", endpoint, s.ToString());
    }
  }

  void Reject(const std::string& identity, const std::string& correlation, const Status& why) {
    ++rejected;
    spdlog::debug("server {}: rejected frame from '{}': {}", endpoint, Printable(identity),
                  why.ToString());
    if (!identity.empty() && !correlation.empty() && correlation.size() <= kMaxCorrelation)
      (void)SendNow(identity, correlation, Encode(Error::FromStatus(why)));
  }

  void HandleOne(std::vector<zmq::message_t>& parts, bool too_many) {
    std::string identity = parts[0].to_string();
    if (too_many || parts.size() != 3) {
      // Only with 3+ frames is the first one after the routing id a correlation.
      std::string correlation = parts.size() >= 3 ? parts[1].to_string() : std::string();
      Reject(identity, correlation,
             Status::InvalidArgument(
                 "expected 2 frames [correlation, message], got " +
                 (too_many ? std::string("more than 7") : std::to_string(parts.size() - 1))));
      return;
    }
    ReplyTo from;
    from.peer.identity = std::move(identity);
    from.correlation = parts[1].to_string();
    if (from.correlation.size() > kMaxCorrelation) {
      Reject(from.peer.identity, "", Status::InvalidArgument("correlation frame too long"));
      return;
    }
    auto msg = Decode(parts[2].to_string_view());
    if (!msg.ok()) {
      Reject(from.peer.identity, from.correlation, msg.status());
      return;
    }
    ++received;
    from.peer.address = MessageProperty(parts[2], "Peer-Address");
    from.peer.user_id = MessageProperty(parts[2], "User-Id");
    if (ipc) from.peer.uid = IpcPeerUid(from.peer.address);
    std::optional<Message> reply;
    try {
      reply = handler(from, std::move(*msg));
    } catch (const std::exception& e) {
      spdlog::error("server {}: handler failed: {}", endpoint, e.what());
      reply = Error::FromStatus(Status::Internal(std::string("handler failed: ") + e.what()));
    }
    if (reply && !from.correlation.empty()) {
      Status s = SendNow(from.peer.identity, from.correlation, Encode(*reply));
      if (!s.ok()) spdlog::debug("server {}: reply: {}", endpoint, s.ToString());
    }
  }

  void Run() {
    thread_id = std::this_thread::get_id();
    auto next_tick = SteadyClock::now() + options.tick;
    std::vector<zmq::message_t> parts;
    while (!stop) {
      zmq_pollitem_t items[] = {{router.handle(), 0, ZMQ_POLLIN, 0},
                                {wake_rx.handle(), 0, ZMQ_POLLIN, 0}};
      int rc = zmq_poll(items, 2, MillisUntil(next_tick));
      if (rc < 0 && zmq_errno() == ETERM) break;
      try {
        if (items[1].revents & ZMQ_POLLIN) {
          zmq::message_t m;
          while (wake_rx.recv(m, zmq::recv_flags::dontwait)) {
          }
        }
        DrainOutbox();
        bool too_many = false;
        // A bounded batch, so ticks and pushes are not starved by a flood.
        int i = 0;
        for (; i < kBatch && !stop && ReceiveParts(router, &parts, &too_many); ++i) HandleOne(parts, too_many);
        drained = i < kBatch;
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) break;
        spdlog::warn("server {}: {}", endpoint, e.what());
      }
      if (SteadyClock::now() >= next_tick) {
        if (options.on_tick) {
          try {
            options.on_tick();
          } catch (const std::exception& e) {
            spdlog::error("server {}: tick failed: {}", endpoint, e.what());
          }
        }
        next_tick = SteadyClock::now() + options.tick;
      }
    }
  }

  void Close() {
    std::lock_guard<std::mutex> lock(tx_mu);
    if (stop.exchange(true)) return;
    try {
      wake_tx.send(zmq::str_buffer("s"), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
    }
  }

  void Join() {
    std::lock_guard<std::mutex> lock(join_mu);
    if (joined) return;
    joined = true;
    if (thread.joinable()) thread.join();
    {
      std::lock_guard<std::mutex> tx(tx_mu);
      wake_tx.close();
      outbox.clear();
    }
    wake_rx.close();
    router.close();
    // libzmq removes an ipc:// socket file only once its I/O thread gets to it,
    // which a process that exits right away never sees. Only our own file goes: a
    // later server may have bound the same path since.
    if (ipc_inode != 0) {
      struct stat st {};
      const char* path = endpoint.c_str() + 6;
      if (::stat(path, &st) == 0 && st.st_ino == ipc_inode) ::unlink(path);
    }
    if (zap) {
      zap->Close();
      zap->Join();
    }
  }
};

Result<std::unique_ptr<Server>> Server::Start(Options options, Handler handler) {
  if (!handler) return Status::InvalidArgument("Server::Start: no handler");
  if (options.tick <= milliseconds(0)) return Status::InvalidArgument("Server::Start: tick <= 0");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->handler = std::move(handler);
  impl->context = impl->options.context ? impl->options.context : &SharedContext();
  Status s = impl->Init();
  if (!s.ok()) {
    impl->router.close();
    impl->wake_rx.close();
    impl->wake_tx.close();
    return s;
  }
  Impl* raw = impl.get();
  raw->thread = std::thread([raw] { raw->Run(); });
  spdlog::debug("server listening on {}{}", raw->endpoint, raw->options.curve ? " (CURVE)" : "");
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() {
  Close();
  Join();
}
const std::string& Server::endpoint() const { return impl_->endpoint; }
Status Server::Reply(const ReplyTo& to, const Message& msg) {
  if (to.correlation.empty()) return Status::Ok();
  return impl_->Enqueue(to.peer.identity, to.correlation, Encode(msg));
}
Status Server::Push(std::string_view identity, const Message& msg) {
  if (identity.empty()) return Status::InvalidArgument("Push: empty routing id");
  return impl_->Enqueue(std::string(identity), "", Encode(msg));
}
bool Server::drained() const { return impl_->drained; }

ServerStats Server::stats() const {
  return {impl_->received.load(), impl_->rejected.load(), impl_->sent.load(),
          impl_->send_failed.load()};
}
void Server::Close() { impl_->Close(); }
void Server::Join() { impl_->Join(); }

// --- Client -----------------------------------------------------------------------------

class Client::Impl {
 public:
  Options options;
  std::mutex mu;
  zmq::socket_t dealer;
  bool closed = false;
  std::uint64_t next_id = 0;
  std::string salt;  // distinguishes this socket's correlations in logs
  std::deque<Message> pushes;

  Status Init() {
    zmq::context_t* context = options.context ? options.context : &SharedContext();
    try {
      dealer = zmq::socket_t(*context, zmq::socket_type::dealer);
      ApplyCommon(dealer, options.socket);
      dealer.set(zmq::sockopt::immediate, true);
      dealer.set(zmq::sockopt::reconnect_ivl, int(options.socket.reconnect_interval.count()));
      dealer.set(zmq::sockopt::reconnect_ivl_max,
                 int(options.socket.reconnect_interval_max.count()));
      if (!options.identity.empty()) {
        if (options.identity.size() > 255 || options.identity[0] == '\0')
          return Status::InvalidArgument("client identity '" + Printable(options.identity) +
                                         "' must be 1-255 bytes and not start with a zero byte");
        dealer.set(zmq::sockopt::routing_id, options.identity);
      }
      if (options.curve) {
        const auto& c = *options.curve;
        if (!IsValidZ85Key(c.public_key) || !IsValidZ85Key(c.secret_key) ||
            !IsValidZ85Key(c.server_public_key))
          return Status::InvalidArgument("client CURVE keys must be 40-character Z85 strings");
        dealer.set(zmq::sockopt::curve_serverkey, c.server_public_key);
        dealer.set(zmq::sockopt::curve_publickey, c.public_key);
        dealer.set(zmq::sockopt::curve_secretkey, c.secret_key);
      }
      dealer.connect(options.endpoint);
    } catch (const zmq::error_t& e) {
      return FromZmq("connect '" + options.endpoint + "'", e);
    }
    return Status::Ok();
  }

  Status SendLocked(const std::string& correlation, const std::string& payload,
                    SteadyClock::time_point deadline, std::string_view type) {
    while (true) {
      zmq_pollitem_t item{dealer.handle(), 0, ZMQ_POLLOUT, 0};
      int rc = zmq_poll(&item, 1, MillisUntil(deadline));
      if (rc < 0 && zmq_errno() == ETERM) return Status::Cancelled("context terminated");
      if (item.revents & ZMQ_POLLOUT) {
        try {
          auto r = dealer.send(zmq::buffer(correlation),
                               zmq::send_flags::sndmore | zmq::send_flags::dontwait);
          if (r) {
            dealer.send(zmq::buffer(payload), zmq::send_flags::none);
            return Status::Ok();
          }
        } catch (const zmq::error_t& e) {
          return FromZmq("send to '" + options.endpoint + "'", e);
        }
      }
      if (SteadyClock::now() >= deadline)
        return Status::Timeout("not connected to '" + options.endpoint + "': '" +
                               std::string(type) + "' not sent");
    }
  }

  void QueuePush(const zmq::message_t& frame) {
    auto msg = Decode(frame.to_string_view());
    if (!msg.ok()) {
      spdlog::warn("client {}: dropped undecodable push: {}", options.endpoint,
                   msg.status().ToString());
      return;
    }
    if (pushes.size() >= options.max_queued_pushes) {
      spdlog::warn("client {}: push queue full ({}), dropping the oldest", options.endpoint,
                   pushes.size());
      pushes.pop_front();
    }
    pushes.push_back(std::move(*msg));
  }

  // Reads whatever is waiting. Returns the reply for `correlation` when it came.
  std::optional<Result<Message>> DrainLocked(const std::string& correlation) {
    std::vector<zmq::message_t> parts;
    bool too_many = false;
    while (ReceiveParts(dealer, &parts, &too_many)) {
      if (too_many || parts.size() != 2) {
        spdlog::warn("client {}: dropped a {}-part message", options.endpoint, parts.size());
        continue;
      }
      if (parts[0].size() == 0) {
        QueuePush(parts[1]);
      } else if (!correlation.empty() && parts[0].to_string_view() == correlation) {
        auto msg = Decode(parts[1].to_string_view());
        if (!msg.ok())
          return Result<Message>(msg.status().WithContext("reply from " + options.endpoint));
        return Result<Message>(std::move(*msg));
      }
      // else: a late reply to a request that timed out; dropped.
    }
    return std::nullopt;
  }

  Result<Message> Request(const Message& msg, milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mu);
    if (closed) return Status::Cancelled("client for '" + options.endpoint + "' is closed");
    auto deadline = SteadyClock::now() + timeout;
    std::string correlation = salt + std::to_string(++next_id);
    std::string_view type = TypeName(msg);
    try {
      ARYL_RETURN_IF_ERROR(SendLocked(correlation, Encode(msg), deadline, type));
      while (true) {
        if (auto r = DrainLocked(correlation)) return std::move(*r);
        long left = MillisUntil(deadline);
        if (left <= 0) break;
        zmq_pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, left) < 0 && zmq_errno() == ETERM)
          return Status::Cancelled("context terminated");
      }
    } catch (const zmq::error_t& e) {
      return FromZmq("request to '" + options.endpoint + "'", e);
    }
    return Status::Timeout("no reply to '" + std::string(type) + "' from '" + options.endpoint +
                           "' within " + std::to_string(timeout.count()) + " ms");
  }

  Status Send(const Message& msg, milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mu);
    if (closed) return Status::Cancelled("client for '" + options.endpoint + "' is closed");
    return SendLocked("", Encode(msg), SteadyClock::now() + timeout, TypeName(msg));
  }

  Result<Message> Receive(milliseconds timeout) {
    auto deadline = SteadyClock::now() + timeout;
    // Polls in short slices without holding the lock between them, so that other
    // threads' requests get through while one thread waits for pushes.
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (closed) return Status::Cancelled("client for '" + options.endpoint + "' is closed");
        try {
          if (pushes.empty()) (void)DrainLocked("");
          if (!pushes.empty()) {
            Message m = std::move(pushes.front());
            pushes.pop_front();
            return m;
          }
          long left = MillisUntil(deadline);
          if (left <= 0) break;
          zmq_pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
          if (zmq_poll(&item, 1, std::min(left, 10L)) < 0 && zmq_errno() == ETERM)
            return Status::Cancelled("context terminated");
        } catch (const zmq::error_t& e) {
          return FromZmq("receive from '" + options.endpoint + "'", e);
        }
      }
    }
    return Status::Timeout("no message from '" + options.endpoint + "' within " +
                           std::to_string(timeout.count()) + " ms");
  }

  void Close() {
    std::lock_guard<std::mutex> lock(mu);
    if (closed) return;
    closed = true;
    dealer.close();
  }
};

Result<std::unique_ptr<Client>> Client::Connect(Options options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->salt = std::to_string(reinterpret_cast<std::uintptr_t>(impl.get()) & 0xffff) + ":";
  ARYL_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() { Close(); }
Result<Message> Client::Request(const Message& msg, milliseconds timeout) {
  return impl_->Request(msg, timeout);
}
Status Client::Send(const Message& msg, milliseconds timeout) { return impl_->Send(msg, timeout); }
Result<Message> Client::Receive(milliseconds timeout) { return impl_->Receive(timeout); }
void Client::Close() { impl_->Close(); }
const std::string& Client::endpoint() const { return impl_->options.endpoint; }

}  // namespace aryl::protocol
