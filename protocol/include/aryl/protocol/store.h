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
// Authentication (docs/security.md). A job start's keys live under its scope S
// (the store prefix, "<job>-<start>"): "aryl/S/...".
//  4. The cluster has one store key K (random; the scheduler makes it once, keeps
//     it in its state and gives it to agents in AgentRegistered.store_key).
//  5. The token of scope S is "S:" + hex(HMAC-SHA256(K, S)) (StoreToken). The
//     agent hands it to the job's workers (ARYL_STORE_TOKEN); a StoreClient puts
//     its token in every request.
//  6. A StoreService that requires tokens answers PermissionDenied unless the
//     request's token is valid for K and every key of the request is inside the
//     token's scope (the one exception: StoreCheck of the probe key "aryl/probe").
// Quotas (StoreLimits): keys and value bytes per scope and in all, so one job
// (or a stray client) cannot fill an agent's memory; a write past a quota gets
// OutOfRange naming the quota.
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

// A fresh random store key (64 hex characters).
Result<std::string> NewStoreKey();
// The token of `scope` under `key` (step 5).
std::string StoreToken(const std::string& key, const std::string& scope);
// The scope of a key: S for "aryl/S/...", empty otherwise.
std::string StoreScope(const std::string& key);

// How a store checks tokens: kOpen accepts every request (tests, the demo
// without an agent); kRequired refuses every request until a key is set, then
// checks tokens against it.
struct StoreAuth {
  enum class Mode { kOpen, kRequired } mode = Mode::kOpen;
  std::string key{};  // hex; empty while unknown (kRequired refuses all)
};
// The process-wide setting (an agent: required from its start, the key once it
// registers). StoreServices and StoreClients that were given no auth of their
// own follow it: a service checks tokens with it, a client without a token
// signs each request for its keys' scope with the key.
void SetProcessStoreAuth(StoreAuth auth);
StoreAuth ProcessStoreAuth();

struct StoreLimits {
  std::size_t max_keys_per_scope = 10000;
  std::size_t max_bytes_per_scope = std::size_t{64} << 20;
  std::size_t max_keys = 100000;
  std::size_t max_bytes = std::size_t{256} << 20;
  // Requests parked until their keys are set (store_wait, store_get with a
  // timeout): a job's workers park a few each per generation; past these a
  // request is refused (OutOfRange, "store quota") instead of held.
  std::size_t max_parked_per_scope = 256;
  std::size_t max_parked_bytes_per_scope = std::size_t{8} << 20;  // the keys they wait for
  std::size_t max_parked = 4096;
  std::size_t max_parked_bytes = std::size_t{64} << 20;
};

// The store's state and request handling, to embed in any Server's handler:
//   handler: if (IsStoreRequest(m)) return store.Handle(server, from, std::move(m));
//   on_tick: store.Tick(server);
class StoreService {
 public:
  explicit StoreService(StoreLimits limits = {}, std::optional<StoreAuth> auth = std::nullopt)
      : limits_(limits), auth_(std::move(auth)) {}

  // Answers at once (a reply) or parks the request (nullopt) to answer it later
  // through server.Reply().
  std::optional<Message> Handle(Server& server, const ReplyTo& from, Message msg);
  // Expires parked requests whose deadline passed.
  void Tick(Server& server);

  std::size_t size() const;    // keys stored
  std::size_t parked() const;  // requests waiting for keys
  std::size_t bytes() const;   // value bytes stored
  std::uint64_t refused() const;  // requests refused by the token check

 private:
  struct Parked {
    ReplyTo to;
    std::vector<std::string> keys;
    bool get = false;  // reply with the value of keys[0] (StoreGet), else empty (StoreWait)
    std::chrono::steady_clock::time_point deadline;
    std::int64_t timeout_ms = 0;
    std::string scope;
    std::size_t bytes = 0;  // of keys
  };
  struct Usage {
    std::size_t keys = 0, bytes = 0;
  };
  // Parks a request within the parked quotas (OutOfRange past one).
  Status Park(Parked p);
  std::vector<Parked>::iterator Unpark(std::vector<Parked>::iterator it);
  bool HasAll(const std::vector<std::string>& keys) const;
  void WakeParked(Server& server);
  Status Authorize(const Message& msg) const;
  // Stores value at key within the quotas (OutOfRange past one).
  Status Put(const std::string& key, std::string value);
  bool Erase(const std::string& key);

  const StoreLimits limits_;
  const std::optional<StoreAuth> auth_;  // nullopt: the process-wide setting
  mutable std::mutex mu_;
  std::map<std::string, std::string> data_;
  std::map<std::string, Usage> usage_;  // by scope
  Usage total_;
  std::uint64_t refused_ = 0;
  std::vector<Parked> parked_;
  std::map<std::string, Usage> parked_usage_;  // by scope: keys = requests, bytes = their keys' bytes
  Usage parked_total_;
};

// A Server running only a StoreService.
class StoreServer {
 public:
  static Result<std::unique_ptr<StoreServer>> Start(Server::Options options, StoreLimits limits = {},
                                                     std::optional<StoreAuth> auth = std::nullopt);
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
  // `token`: the job's store token; empty: the ARYL_STORE_TOKEN environment
  // variable (a worker, whose agent set it), else sign each request with the
  // process-wide key when there is one (an agent), else send none.
  static Result<std::unique_ptr<StoreClient>> Connect(Client::Options options, std::string token = "");

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
  StoreClient(std::unique_ptr<Client> c, std::string token) : client_(std::move(c)), token_(std::move(token)) {}
  std::string TokenFor(const std::string& key) const;
  std::unique_ptr<Client> client_;
  std::string token_;
};

}  // namespace aryl::protocol
