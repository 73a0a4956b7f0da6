// StoreRelay over the project's rendezvous store (protocol/store.h). Keys and
// records follow the runtime's layout (runtime/src/rendezvous.h):
// "aryl/<job>/gen/<G>" = "prev=<P>;members=<id>,<id>,...".
#include <spdlog/spdlog.h>

#include <map>

#include "aryl/agent/store_relay.h"
#include "aryl/protocol/store.h"

namespace aryl::agent {
namespace {

namespace p = aryl::protocol;
// Per query, on the probe's thread (store_probe.h): a store that does not answer
// within this is gone for now; the loop asks again on a later tick.
constexpr std::chrono::milliseconds kTimeout{2000};

std::string Key(const std::string& job, const std::string& suffix) { return "aryl/" + job + "/" + suffix; }

class ProtocolStoreRelay final : public StoreRelay {
 public:
  ~ProtocolStoreRelay() override {
    clients_.clear();
    if (server_) {
      server_->Close();
      server_->Join();
    }
  }

  Result<std::string> Serve(const std::string& host, int port) override {
    p::Server::Options o;
    o.endpoint = "tcp://" + host + ":" + (port > 0 ? std::to_string(port) : std::string("*"));
    ARYL_ASSIGN_OR_RETURN(server_, p::StoreServer::Start(o));
    return server_->endpoint();
  }

  Result<bool> Ready(const std::string& endpoint, const std::string& job,
                     const std::vector<std::string>& joiners) override {
    if (joiners.empty()) return true;
    ARYL_ASSIGN_OR_RETURN(p::StoreClient * c, Client(endpoint));
    std::vector<std::string> keys;
    for (const auto& id : joiners) keys.push_back(Key(job, "ready/" + id));
    return c->Check(keys, kTimeout);
  }

  Result<std::optional<std::string>> Report(const std::string& endpoint, const std::string& job,
                                            std::int64_t generation) override {
    ARYL_ASSIGN_OR_RETURN(p::StoreClient * c, Client(endpoint));
    std::string key = Key(job, "report/" + std::to_string(generation));
    ARYL_ASSIGN_OR_RETURN(bool present, c->Check({key}, kTimeout));
    if (!present) return std::optional<std::string>();
    ARYL_ASSIGN_OR_RETURN(auto v, c->Get(key, kTimeout));
    return std::optional<std::string>(v);
  }

  Status RequestCheckpoint(const std::string& endpoint, const std::string& job) override {
    ARYL_ASSIGN_OR_RETURN(p::StoreClient * c, Client(endpoint));
    return c->Add(Key(job, "control/checkpoint"), 1, kTimeout).status();
  }

  void Forget(const std::string&) override {}

 private:
  Result<p::StoreClient*> Client(const std::string& endpoint) {
    auto it = clients_.find(endpoint);
    if (it != clients_.end()) return it->second.get();
    p::Client::Options o;
    o.endpoint = endpoint;
    ARYL_ASSIGN_OR_RETURN(auto c, p::StoreClient::Connect(o));
    auto* raw = c.get();
    clients_[endpoint] = std::move(c);
    return raw;
  }

  std::unique_ptr<p::StoreServer> server_;
  std::map<std::string, std::unique_ptr<p::StoreClient>> clients_;
};

}  // namespace

std::unique_ptr<StoreRelay> MakeStoreRelay() { return std::make_unique<ProtocolStoreRelay>(); }

}  // namespace aryl::agent
