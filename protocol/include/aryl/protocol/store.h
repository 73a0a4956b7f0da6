// The rendezvous store: a key-value service workers use to find each other for
// each generation (what torch's TCPStore is for c10d, but hosted by a process that
// outlives every worker: the agent, the scheduler daemon or a test coordinator).
//
// Protocol (messages.h, step 17):
//  1. A StoreClient sends StoreSet/Get/Add/CompareSet/Wait/Check/DeleteKey; the
//     StoreService answers StoreReply or Error.
//  2. StoreGet and StoreWait on missing keys are parked, not refused: the service
//     answers as soon as a StoreSet/Add/CompareSet creates the last missing key, or
//     Error{Timeout} naming the missing keys once timeout_ms passes (checked on
//     every server tick). Parked requests never block the server thread.
//  3. The client waits a little longer than the server-side timeout, so a slow
//     store answers Timeout rather than leaving the client to guess; a reply that
//     arrives after the client gave up is dropped by correlation (transport.h).
// Values are bytes; StoreAdd keeps its counter as decimal text (as c10d does).
//
// Thread safety: StoreService is thread-safe. StoreClient is thread-safe; its calls
// are serialized on one socket, so a long Wait delays the same client's other calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"
#include "aryl/result.h"

namespace aryl::protocol {

// True for the store request types (StoreSet ... StoreDeleteKey).
bool IsStoreRequest(const Message& msg);

// The store's state and request handling, to embed in any Server's handler:
//   handler: if (IsStoreRequest(m)) return store.Handle(server, from, std::move(m));
//   on_tick: store.Tick(server);
class StoreService {
 public:
  // Answers at once (a reply) or parks the request (nullopt) to answer it later
  // through server.Reply().
  std::optional<Message> Handle(Server& server, const ReplyTo& from, Message msg);
  // Expires parked requests whose deadline passed.
  void Tick(Server& server);

  std::size_t size() const;    // keys stored
  std::size_t parked() const;  // requests waiting for keys

 private:
  struct Parked {
    ReplyTo to;
    std::vector<std::string> keys;
    bool get = false;  // reply with the value of keys[0] (StoreGet), else empty (StoreWait)
    std::chrono::steady_clock::time_point deadline;
    std::int64_t timeout_ms = 0;
  };
  bool HasAll(const std::vector<std::string>& keys) const;
  void WakeParked(Server& server);

  mutable std::mutex mu_;
  std::map<std::string, std::string> data_;
  std::vector<Parked> parked_;
};

// A Server running only a StoreService.
class StoreServer {
 public:
  static Result<std::unique_ptr<StoreServer>> Start(Server::Options options);
  const std::string& endpoint() const { return server_->endpoint(); }
  const StoreService& service() const { return *service_; }
  void Close() { server_->Close(); }
  void Join() { server_->Join(); }

 private:
  StoreServer() = default;
  std::unique_ptr<StoreService> service_;
  std::unique_ptr<Server> server_;  // destroyed first: it calls into service_
};

class StoreClient {
 public:
  static Result<std::unique_ptr<StoreClient>> Connect(Client::Options options);

  Status Set(const std::string& key, const std::string& value, std::chrono::milliseconds timeout);
  // Waits up to `timeout` for the key; Timeout when it does not appear.
  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout);
  // Adds delta to the counter at key (missing = 0); returns the new value.
  Result<std::int64_t> Add(const std::string& key, std::int64_t delta,
                           std::chrono::milliseconds timeout);
  // c10d compareSet: the value now stored (desired on success).
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired, std::chrono::milliseconds timeout);
  // Waits until every key exists; Timeout naming the missing keys otherwise.
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  Result<bool> Check(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Whether the key existed.
  Result<bool> DeleteKey(const std::string& key, std::chrono::milliseconds timeout);

  Client& client() { return *client_; }

 private:
  explicit StoreClient(std::unique_ptr<Client> c) : client_(std::move(c)) {}
  std::unique_ptr<Client> client_;
};

}  // namespace aryl::protocol
