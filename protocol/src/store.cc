#include "aryl/protocol/store.h"

#include <charconv>

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

}  // namespace

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

void StoreService::WakeParked(Server& server) {
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (!HasAll(it->keys)) {
      ++it;
      continue;
    }
    StoreReply reply;
    if (it->get) reply.value = Bytes{data_.at(it->keys[0])};
    (void)server.Reply(it->to, reply);
    it = parked_.erase(it);
  }
}

std::optional<Message> StoreService::Handle(Server& server, const ReplyTo& from, Message msg) {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = SteadyClock::now();
  if (auto* m = std::get_if<StoreSet>(&msg)) {
    data_[m->key] = std::move(m->value.data);
    WakeParked(server);
    return StoreReply{};
  }
  if (auto* m = std::get_if<StoreGet>(&msg)) {
    auto it = data_.find(m->key);
    if (it != data_.end()) return StoreReply{.value = Bytes{it->second}};
    if (m->timeout_ms == 0)
      return Error::FromStatus(Status::NotFound("store_get: key '" + m->key + "' not set"));
    parked_.push_back({from, {m->key}, true, now + milliseconds(m->timeout_ms), m->timeout_ms});
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
    data_[m->key] = std::to_string(value);
    WakeParked(server);
    return StoreReply{.number = value};
  }
  if (auto* m = std::get_if<StoreCompareSet>(&msg)) {
    auto it = data_.find(m->key);
    if (it == data_.end()) {
      if (!m->expected.data.empty()) return StoreReply{.value = m->expected};
      data_[m->key] = m->desired.data;
      WakeParked(server);
      return StoreReply{.value = m->desired};
    }
    if (it->second == m->expected.data) {
      it->second = m->desired.data;
      WakeParked(server);
    }
    return StoreReply{.value = Bytes{it->second}};
  }
  if (auto* m = std::get_if<StoreWait>(&msg)) {
    if (HasAll(m->keys)) return StoreReply{};
    if (m->timeout_ms == 0)
      return Error::FromStatus(Status::Timeout("store_wait: keys not set: " + JoinKeys(m->keys)));
    parked_.push_back({from, m->keys, false, now + milliseconds(m->timeout_ms), m->timeout_ms});
    return std::nullopt;
  }
  if (auto* m = std::get_if<StoreCheck>(&msg)) return StoreReply{.flag = HasAll(m->keys)};
  if (auto* m = std::get_if<StoreDeleteKey>(&msg))
    return StoreReply{.flag = data_.erase(m->key) > 0};
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
    it = parked_.erase(it);
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

Result<std::unique_ptr<StoreServer>> StoreServer::Start(Server::Options options) {
  std::unique_ptr<StoreServer> s(new StoreServer());
  s->service_ = std::make_unique<StoreService>();
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

Result<std::unique_ptr<StoreClient>> StoreClient::Connect(Client::Options options) {
  ARYL_ASSIGN_OR_RETURN(auto client, Client::Connect(std::move(options)));
  return std::unique_ptr<StoreClient>(new StoreClient(std::move(client)));
}

Status StoreClient::Set(const std::string& key, const std::string& value, milliseconds timeout) {
  return client_->Call<StoreReply>(StoreSet{.key = key, .value = {value}}, timeout).status();
}

Result<std::string> StoreClient::Get(const std::string& key, milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(
      auto r, client_->Call<StoreReply>(StoreGet{.key = key, .timeout_ms = timeout.count()},
                                        timeout + ClientGrace(timeout)));
  if (!r.value) return Status::Internal("store_get: reply without a value");
  return std::move(r.value->data);
}

Result<std::int64_t> StoreClient::Add(const std::string& key, std::int64_t delta,
                                      milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(auto r,
                        client_->Call<StoreReply>(StoreAdd{.key = key, .delta = delta}, timeout));
  if (!r.number) return Status::Internal("store_add: reply without a number");
  return *r.number;
}

Result<std::string> StoreClient::CompareSet(const std::string& key, const std::string& expected,
                                            const std::string& desired, milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(
      auto r,
      client_->Call<StoreReply>(
          StoreCompareSet{.key = key, .expected = {expected}, .desired = {desired}}, timeout));
  if (!r.value) return Status::Internal("store_compare_set: reply without a value");
  return std::move(r.value->data);
}

Status StoreClient::Wait(const std::vector<std::string>& keys, milliseconds timeout) {
  return client_
      ->Call<StoreReply>(StoreWait{.keys = keys, .timeout_ms = timeout.count()},
                         timeout + ClientGrace(timeout))
      .status();
}

Result<bool> StoreClient::Check(const std::vector<std::string>& keys, milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(auto r, client_->Call<StoreReply>(StoreCheck{.keys = keys}, timeout));
  if (!r.flag) return Status::Internal("store_check: reply without a flag");
  return *r.flag;
}

Result<bool> StoreClient::DeleteKey(const std::string& key, milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(auto r, client_->Call<StoreReply>(StoreDeleteKey{.key = key}, timeout));
  if (!r.flag) return Status::Internal("store_delete_key: reply without a flag");
  return *r.flag;
}

}  // namespace aryl::protocol
