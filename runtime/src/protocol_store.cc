#include "protocol_store.h"

#include <stdexcept>

#include "aryl/protocol/store.h"

namespace aryl {
namespace {

[[noreturn]] void Throw(const Status& s, const std::string& what) {
  // c10d callers match "Timeout" / "timed out" for deadlines.
  throw std::runtime_error("aryl store " + what + ": " + s.ToString());
}

std::string Str(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }
std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

ProtocolStore::ProtocolStore(std::shared_ptr<protocol::StoreClient> client, std::chrono::milliseconds timeout)
    : c10d::Store(timeout), client_(std::move(client)) {}
ProtocolStore::~ProtocolStore() = default;

c10::intrusive_ptr<ProtocolStore> ProtocolStore::WithOwnTimeout(std::chrono::milliseconds timeout) const {
  return c10::make_intrusive<ProtocolStore>(client_, timeout);
}

Result<c10::intrusive_ptr<ProtocolStore>> ProtocolStore::Connect(const std::string& endpoint,
                                                                 std::chrono::milliseconds timeout) {
  protocol::Client::Options opts;
  opts.endpoint = endpoint;
  ARYL_ASSIGN_OR_RETURN(auto client, protocol::StoreClient::Connect(opts));
  auto store = c10::make_intrusive<ProtocolStore>(std::shared_ptr<protocol::StoreClient>(std::move(client)), timeout);
  // Fail fast when nobody serves the endpoint.
  auto probe = store->client_->Check({"aryl/probe"}, timeout);
  if (!probe.ok()) return probe.status().WithContext("store " + endpoint);
  return store;
}

void ProtocolStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  if (Status s = client_->Set(key, Str(value), timeout_); !s.ok()) Throw(s, "set " + key);
}

std::vector<uint8_t> ProtocolStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                               const std::vector<uint8_t>& desired) {
  auto r = client_->CompareSet(key, Str(expected), Str(desired), timeout_);
  if (!r.ok()) Throw(r.status(), "compareSet " + key);
  return Bytes(*r);
}

std::vector<uint8_t> ProtocolStore::get(const std::string& key) {
  auto r = client_->Get(key, timeout_);
  if (!r.ok()) Throw(r.status(), "get " + key);
  return Bytes(*r);
}

int64_t ProtocolStore::add(const std::string& key, int64_t value) {
  auto r = client_->Add(key, value, timeout_);
  if (!r.ok()) Throw(r.status(), "add " + key);
  return *r;
}

bool ProtocolStore::deleteKey(const std::string& key) {
  auto r = client_->DeleteKey(key, timeout_);
  if (!r.ok()) Throw(r.status(), "deleteKey " + key);
  return *r;
}

bool ProtocolStore::check(const std::vector<std::string>& keys) {
  auto r = client_->Check(keys, timeout_);
  if (!r.ok()) Throw(r.status(), "check");
  return *r;
}

int64_t ProtocolStore::getNumKeys() { throw std::runtime_error("aryl store: getNumKeys is not supported"); }

void ProtocolStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void ProtocolStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  if (Status s = client_->Wait(keys, timeout); !s.ok()) Throw(s, "wait");
}

Result<std::unique_ptr<ProtocolStoreServer>> ProtocolStoreServer::Start(const std::string& endpoint) {
  protocol::Server::Options opts;
  opts.endpoint = endpoint;
  opts.tick = std::chrono::milliseconds(10);
  ARYL_ASSIGN_OR_RETURN(auto server, protocol::StoreServer::Start(opts));
  auto out = std::unique_ptr<ProtocolStoreServer>(new ProtocolStoreServer());
  out->server_ = std::move(server);
  return out;
}

ProtocolStoreServer::~ProtocolStoreServer() = default;
const std::string& ProtocolStoreServer::endpoint() const { return server_->endpoint(); }

}  // namespace aryl
