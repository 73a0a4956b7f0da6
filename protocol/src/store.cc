#include "aryl/protocol/store.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <charconv>
#include <cstdlib>
#include <type_traits>

namespace aryl::protocol {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How much longer a client waits than the server-side timeout it asked for.
milliseconds ClientGrace(milliseconds t) { return std::max(milliseconds(100), t / 10); }

std::string JoinKeys(const std::vector<std::string>& keys, std::size_t max = 5) {
  std::string s;
  for (std::size_t i = 0; i < keys.size() && i < max; ++i) {
    if (i) s += ", ";
    s += "'" + keys[i] + "'";
  }
  if (keys.size() > max) s += ", ... (" + std::to_string(keys.size()) + " keys)";
  return s;
}

Status ParseCounter(const std::string& key, const std::string& text, std::int64_t* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (ec != std::errc() || p != text.data() + text.size())
    return Status::InvalidArgument("store_add: key '" + key + "' holds a non-integer value");
  return Status::Ok();
}

std::string Hex(const unsigned char* p, std::size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

std::mutex g_auth_mu;
StoreAuth g_auth;

// Every key a request names.
std::vector<std::string> KeysOf(const Message& msg) {
  return std::visit(
      [](const auto& m) -> std::vector<std::string> {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, StoreWait> || std::is_same_v<T, StoreCheck>) return m.keys;
        else if constexpr (requires { m.key; }) return {m.key};
        else return {};
      },
      msg);
}

std::string TokenOf(const Message& msg) {
  return std::visit(
      [](const auto& m) -> std::string {
        if constexpr (requires { m.token; }) return m.token;
        else return {};
      },
      msg);
}

}  // namespace

Result<std::string> NewStoreKey() {
  unsigned char k[32];
  if (RAND_bytes(k, sizeof k) != 1) return Status::Internal("no random bytes for the store key");
  return Hex(k, sizeof k);
}

std::string StoreToken(const std::string& key, const std::string& scope) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(scope.data()), scope.size(), mac, &len);
  return scope + ":" + Hex(mac, len);
}

std::string StoreScope(const std::string& key) {
  if (key.rfind("aryl/", 0) != 0) return "";
  auto slash = key.find('/', 5);
  if (slash == std::string::npos) return "";
  return key.substr(5, slash - 5);
}

void SetProcessStoreAuth(StoreAuth auth) {
  std::lock_guard<std::mutex> lock(g_auth_mu);
  g_auth = std::move(auth);
}

StoreAuth ProcessStoreAuth() {
  std::lock_guard<std::mutex> lock(g_auth_mu);
  return g_auth;
}

bool IsStoreRequest(const Message& msg) {
  return std::holds_alternative<StoreSet>(msg) || std::holds_alternative<StoreGet>(msg) ||
         std::holds_alternative<StoreAdd>(msg) || std::holds_alternative<StoreCompareSet>(msg) ||
         std::holds_alternative<StoreWait>(msg) || std::holds_alternative<StoreCheck>(msg) ||
         std::holds_alternative<StoreDeleteKey>(msg);
}

bool StoreService::HasAll(const std::vector<std::string>& keys) const {
  for (const auto& k : keys)
    if (!data_.count(k)) return false;
  return true;
}

Status StoreService::Park(Parked p) {
  p.scope = p.keys.empty() ? std::string() : StoreScope(p.keys[0]);
  for (const auto& k : p.keys) p.bytes += k.size();
  Usage& mine = parked_usage_[p.scope];
  auto refuse = [&](const std::string& what, std::size_t limit) {
    if (mine.keys == 0) parked_usage_.erase(p.scope);
    return Status::OutOfRange("store quota: " + what + " (at most " + std::to_string(limit) +
                              "); a request that waits for keys is refused, not held");
  };
  if (mine.keys + 1 > limits_.max_parked_per_scope)
    return refuse("too many waiting requests of job scope '" + p.scope + "'", limits_.max_parked_per_scope);
  if (mine.bytes + p.bytes > limits_.max_parked_bytes_per_scope)
    return refuse("the keys waited for by job scope '" + p.scope + "' are too large", limits_.max_parked_bytes_per_scope);
  if (parked_total_.keys + 1 > limits_.max_parked) return refuse("too many waiting requests", limits_.max_parked);
  if (parked_total_.bytes + p.bytes > limits_.max_parked_bytes)
    return refuse("the keys waited for are too large", limits_.max_parked_bytes);
  mine.keys++;
  mine.bytes += p.bytes;
  parked_total_.keys++;
  parked_total_.bytes += p.bytes;
  parked_.push_back(std::move(p));
  return Status::Ok();
}

std::vector<StoreService::Parked>::iterator StoreService::Unpark(std::vector<Parked>::iterator it) {
  auto u = parked_usage_.find(it->scope);
  if (u != parked_usage_.end()) {
    u->second.keys--;
    u->second.bytes -= it->bytes;
    if (u->second.keys == 0) parked_usage_.erase(u);
  }
  parked_total_.keys--;
  parked_total_.bytes -= it->bytes;
  return parked_.erase(it);
}

void StoreService::WakeParked(Server& server) {
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (!HasAll(it->keys)) {
      ++it;
      continue;
    }
    StoreReply reply;
    if (it->get) reply.value = Bytes{data_.at(it->keys[0])};
    (void)server.Reply(it->to, reply);
    it = Unpark(it);
  }
}

Status StoreService::Authorize(const Message& msg) const {
  StoreAuth auth = auth_ ? *auth_ : ProcessStoreAuth();
  if (auth.mode == StoreAuth::Mode::kOpen) return Status::Ok();
  std::string what = std::string(TypeName(msg));
  if (auth.key.empty())
    return Status::PermissionDenied(what + ": this store does not accept requests yet (its agent has not registered)");
  std::string token = TokenOf(msg);
  auto colon = token.rfind(':');
  if (token.empty() || colon == std::string::npos)
    return Status::PermissionDenied(what + ": no store token (the job's ARYL_STORE_TOKEN)");
  std::string scope = token.substr(0, colon);
  std::string expected = StoreToken(auth.key, scope);
  if (expected.size() != token.size() || CRYPTO_memcmp(expected.data(), token.data(), token.size()) != 0)
    return Status::PermissionDenied(what + ": invalid store token for scope '" + scope + "'");
  auto keys = KeysOf(msg);
  bool probe = std::holds_alternative<StoreCheck>(msg) && keys.size() == 1 && keys[0] == "aryl/probe";
  if (probe) return Status::Ok();
  for (const auto& k : keys)
    if (StoreScope(k) != scope)
      return Status::PermissionDenied(what + ": key '" + k + "' is outside the token's scope 'aryl/" + scope + "/'");
  return Status::Ok();
}

Status StoreService::Put(const std::string& key, std::string value) {
  std::string scope = StoreScope(key);
  Usage& u = usage_[scope];
  auto it = data_.find(key);
  std::size_t old_bytes = it == data_.end() ? 0 : it->second.size();
  std::size_t new_keys = it == data_.end() ? 1 : 0;
  std::string where = scope.empty() ? "outside a job scope" : "in scope 'aryl/" + scope + "/'";
  if (u.keys + new_keys > limits_.max_keys_per_scope || total_.keys + new_keys > limits_.max_keys)
    return Status::OutOfRange("store quota: at most " +
                              std::to_string(u.keys + new_keys > limits_.max_keys_per_scope ? limits_.max_keys_per_scope
                                                                                             : limits_.max_keys) +
                              " keys " + (u.keys + new_keys > limits_.max_keys_per_scope ? where : "in all") +
                              "; refusing key '" + key + "'");
  std::size_t scope_bytes = u.bytes - old_bytes + value.size();
  std::size_t all_bytes = total_.bytes - old_bytes + value.size();
  if (scope_bytes > limits_.max_bytes_per_scope || all_bytes > limits_.max_bytes)
    return Status::OutOfRange("store quota: at most " +
                              std::to_string(scope_bytes > limits_.max_bytes_per_scope ? limits_.max_bytes_per_scope
                                                                                       : limits_.max_bytes) +
                              " value bytes " + (scope_bytes > limits_.max_bytes_per_scope ? where : "in all") +
                              "; refusing " + std::to_string(value.size()) + " bytes at key '" + key + "'");
  u.keys += new_keys;
  total_.keys += new_keys;
  u.bytes = scope_bytes;
  total_.bytes = all_bytes;
  data_[key] = std::move(value);
  return Status::Ok();
}

bool StoreService::Erase(const std::string& key) {
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  Usage& u = usage_[StoreScope(key)];
  u.keys--;
  u.bytes -= it->second.size();
  total_.keys--;
  total_.bytes -= it->second.size();
  if (u.keys == 0) usage_.erase(StoreScope(key));
  data_.erase(it);
  return true;
}

std::optional<Message> StoreService::Handle(Server& server, const ReplyTo& from, Message msg) {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = SteadyClock::now();
  if (Status a = Authorize(msg); !a.ok()) {
    ++refused_;
    return Error::FromStatus(a);
  }
  if (auto* m = std::get_if<StoreSet>(&msg)) {
    if (Status st = Put(m->key, std::move(m->value.data)); !st.ok()) return Error::FromStatus(st);
    WakeParked(server);
    return StoreReply{};
  }
  if (auto* m = std::get_if<StoreGet>(&msg)) {
    auto it = data_.find(m->key);
    if (it != data_.end()) return StoreReply{.value = Bytes{it->second}};
    if (m->timeout_ms == 0)
      return Error::FromStatus(Status::NotFound("store_get: key '" + m->key + "' not set"));
    if (Status st = Park({from, {m->key}, true, now + milliseconds(m->timeout_ms), m->timeout_ms}); !st.ok())
      return Error::FromStatus(st);
    return std::nullopt;
  }
  if (auto* m = std::get_if<StoreAdd>(&msg)) {
    std::int64_t value = 0;
    auto it = data_.find(m->key);
    if (it != data_.end()) {
      Status s = ParseCounter(m->key, it->second, &value);
      if (!s.ok()) return Error::FromStatus(s);
    }
    value += m->delta;
    if (Status st = Put(m->key, std::to_string(value)); !st.ok()) return Error::FromStatus(st);
    WakeParked(server);
    return StoreReply{.number = value};
  }
  if (auto* m = std::get_if<StoreCompareSet>(&msg)) {
    auto it = data_.find(m->key);
    if (it == data_.end()) {
      if (!m->expected.data.empty()) return StoreReply{.value = m->expected};
      if (Status st = Put(m->key, m->desired.data); !st.ok()) return Error::FromStatus(st);
      WakeParked(server);
      return StoreReply{.value = m->desired};
    }
    if (it->second == m->expected.data) {
      if (Status st = Put(m->key, m->desired.data); !st.ok()) return Error::FromStatus(st);
      WakeParked(server);
    }
    return StoreReply{.value = Bytes{data_.at(m->key)}};
  }
  if (auto* m = std::get_if<StoreWait>(&msg)) {
    if (HasAll(m->keys)) return StoreReply{};
    if (m->timeout_ms == 0)
      return Error::FromStatus(Status::Timeout("store_wait: keys not set: " + JoinKeys(m->keys)));
    if (Status st = Park({from, m->keys, false, now + milliseconds(m->timeout_ms), m->timeout_ms}); !st.ok())
      return Error::FromStatus(st);
    return std::nullopt;
  }
  if (auto* m = std::get_if<StoreCheck>(&msg)) return StoreReply{.flag = HasAll(m->keys)};
  if (auto* m = std::get_if<StoreDeleteKey>(&msg))
    return StoreReply{.flag = Erase(m->key)};
  return Error::FromStatus(
      Status::InvalidArgument("the store does not handle '" + std::string(TypeName(msg)) + "'"));
}

void StoreService::Tick(Server& server) {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = SteadyClock::now();
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    std::vector<std::string> missing;
    for (const auto& k : it->keys)
      if (!data_.count(k)) missing.push_back(k);
    std::string what = it->get ? "store_get" : "store_wait";
    (void)server.Reply(it->to, Error::FromStatus(Status::Timeout(what + ": keys not set within " +
                                                                 std::to_string(it->timeout_ms) +
                                                                 " ms: " + JoinKeys(missing))));
    it = Unpark(it);
  }
}

std::size_t StoreService::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.size();
}

std::size_t StoreService::parked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return parked_.size();
}

std::size_t StoreService::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_.bytes;
}

std::uint64_t StoreService::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

Result<std::unique_ptr<StoreServer>> StoreServer::Start(Server::Options options, StoreLimits limits,
                                                        std::optional<StoreAuth> auth) {
  std::unique_ptr<StoreServer> s(new StoreServer());
  s->service_ = std::make_unique<StoreService>(limits, std::move(auth));
  StoreService* service = s->service_.get();
  // The server pointer is set once Start returns; ticks and requests only run after
  // that, on the server thread, which reads it through this shared slot.
  auto slot = std::make_shared<std::atomic<Server*>>(nullptr);
  options.on_tick = [service, slot] {
    if (Server* srv = slot->load()) service->Tick(*srv);
  };
  ARYL_ASSIGN_OR_RETURN(
      s->server_,
      Server::Start(std::move(options),
                    [service, slot](const ReplyTo& from, Message msg) -> std::optional<Message> {
                      Server* srv = slot->load();
                      if (!srv) return Error::FromStatus(Status::Unavailable("store is starting"));
                      if (!IsStoreRequest(msg))
                        return Error::FromStatus(Status::InvalidArgument(
                            "the store does not handle '" + std::string(TypeName(msg)) + "'"));
                      return service->Handle(*srv, from, std::move(msg));
                    }));
  slot->store(s->server_.get());
  return s;
}

// --- StoreClient ---------------------------------------------------------------------------

Result<std::unique_ptr<StoreClient>> StoreClient::Connect(Client::Options options, std::string token) {
  if (token.empty()) {
    const char* env = std::getenv("ARYL_STORE_TOKEN");
    if (env) token = env;
  }
  ARYL_ASSIGN_OR_RETURN(auto client, Client::Connect(std::move(options)));
  return std::unique_ptr<StoreClient>(new StoreClient(std::move(client), std::move(token)));
}

std::string StoreClient::TokenFor(const std::string& key) const {
  if (!token_.empty()) return token_;
  StoreAuth auth = ProcessStoreAuth();
  if (auth.key.empty()) return "";
  return StoreToken(auth.key, StoreScope(key));
}

Status StoreClient::Set(const std::string& key, const std::string& value, milliseconds timeout) {
  return client_->Call<StoreReply>(StoreSet{.key = key, .value = {value}, .token = TokenFor(key)}, timeout).status();
}

Result<std::string> StoreClient::Get(const std::string& key, milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(
      auto r, client_->Call<StoreReply>(StoreGet{.key = key, .timeout_ms = timeout.count(), .token = TokenFor(key)},
                                        timeout + ClientGrace(timeout)));
  if (!r.value) return Status::Internal("store_get: reply without a value");
  return std::move(r.value->data);
}

Result<std::int64_t> StoreClient::Add(const std::string& key, std::int64_t delta,
                                      milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(auto r,
                        client_->Call<StoreReply>(StoreAdd{.key = key, .delta = delta, .token = TokenFor(key)}, timeout));
  if (!r.number) return Status::Internal("store_add: reply without a number");
  return *r.number;
}

Result<std::string> StoreClient::CompareSet(const std::string& key, const std::string& expected,
                                            const std::string& desired, milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(
      auto r,
      client_->Call<StoreReply>(
          StoreCompareSet{.key = key, .expected = {expected}, .desired = {desired}, .token = TokenFor(key)}, timeout));
  if (!r.value) return Status::Internal("store_compare_set: reply without a value");
  return std::move(r.value->data);
}

Status StoreClient::Wait(const std::vector<std::string>& keys, milliseconds timeout) {
  return client_
      ->Call<StoreReply>(StoreWait{.keys = keys, .timeout_ms = timeout.count(), .token = TokenFor(keys.empty() ? "" : keys[0])},
                         timeout + ClientGrace(timeout))
      .status();
}

Result<bool> StoreClient::Check(const std::vector<std::string>& keys, milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(auto r, client_->Call<StoreReply>(StoreCheck{.keys = keys, .token = TokenFor(keys.empty() ? "" : keys[0])}, timeout));
  if (!r.flag) return Status::Internal("store_check: reply without a flag");
  return *r.flag;
}

Result<bool> StoreClient::DeleteKey(const std::string& key, milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(auto r, client_->Call<StoreReply>(StoreDeleteKey{.key = key, .token = TokenFor(key)}, timeout));
  if (!r.flag) return Status::Internal("store_delete_key: reply without a flag");
  return *r.flag;
}

}  // namespace aryl::protocol
