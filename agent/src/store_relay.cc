// StoreRelay over the project's rendezvous store (protocol/store.h). Keys and
// records follow the runtime's layout (runtime/src/rendezvous.h):
// "aryl/<job>/gen/<G>" = "prev=<P>;members=<id>,<id>,...".
#include <spdlog/spdlog.h>

#include <map>
#include <sstream>

#include "aryl/agent/store_relay.h"
#include "aryl/protocol/store.h"

namespace aryl::agent {
namespace {

namespace p = aryl::protocol;
constexpr std::chrono::milliseconds kTimeout{5000};

std::string Key(const std::string& job, const std::string& suffix) { return "aryl/" + job + "/" + suffix; }

Result<std::int64_t> ParseInt(const std::string& key, const std::string& v) {
  try {
    size_t pos = 0;
    long long x = std::stoll(v, &pos);
    if (pos == v.size()) return static_cast<std::int64_t>(x);
  } catch (const std::exception&) {
  }
  return Status::Corruption(key + ": '" + v + "' is not a number");
}

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

  Result<std::int64_t> StoreGeneration(const std::string& endpoint, const std::string& job,
                                       std::int64_t sched_gen) override {
    ARYL_ASSIGN_OR_RETURN(p::StoreClient * c, Client(endpoint));
    std::string key = Key(job, "sched/" + std::to_string(sched_gen));
    ARYL_ASSIGN_OR_RETURN(auto claim, c->Add(key + "/claim", 1, kTimeout));
    if (claim == 1) {
      ARYL_ASSIGN_OR_RETURN(auto g, c->Add(Key(job, "gen/counter"), 1, kTimeout));
      ARYL_RETURN_IF_ERROR(c->Set(key, std::to_string(g), kTimeout));
      return g;
    }
    ARYL_ASSIGN_OR_RETURN(auto v, c->Get(key, kTimeout));
    return ParseInt(key, v);
  }

  Result<std::pair<std::int64_t, std::vector<std::string>>> Latest(const std::string& endpoint,
                                                                   const std::string& job) override {
    ARYL_ASSIGN_OR_RETURN(p::StoreClient * c, Client(endpoint));
    std::string latest_key = Key(job, "gen/latest");
    ARYL_ASSIGN_OR_RETURN(bool present, c->Check({latest_key}, kTimeout));
    if (!present) return std::make_pair(std::int64_t{0}, std::vector<std::string>{});
    ARYL_ASSIGN_OR_RETURN(auto text, c->Get(latest_key, kTimeout));
    ARYL_ASSIGN_OR_RETURN(auto g, ParseInt(latest_key, text));
    std::string rec_key = Key(job, "gen/" + std::to_string(g));
    ARYL_ASSIGN_OR_RETURN(auto rec, c->Get(rec_key, kTimeout));
    auto semi = rec.find(';');
    if (rec.rfind("prev=", 0) != 0 || semi == std::string::npos || rec.compare(semi + 1, 8, "members=") != 0) {
      return Status::Corruption(rec_key + ": bad record '" + rec + "'");
    }
    std::vector<std::string> members;
    std::stringstream ss(rec.substr(semi + 9));
    std::string id;
    while (std::getline(ss, id, ','))
      if (!id.empty()) members.push_back(id);
    return std::make_pair(g, members);
  }

  Result<bool> Ready(const std::string& endpoint, const std::string& job,
                     const std::vector<std::string>& joiners) override {
    if (joiners.empty()) return true;
    ARYL_ASSIGN_OR_RETURN(p::StoreClient * c, Client(endpoint));
    std::vector<std::string> keys;
    for (const auto& id : joiners) keys.push_back(Key(job, "ready/" + id));
    return c->Check(keys, kTimeout);
  }

  Status Publish(const std::string& endpoint, const std::string& job, std::int64_t generation, std::int64_t prev,
                 const std::vector<std::string>& members) override {
    ARYL_ASSIGN_OR_RETURN(p::StoreClient * c, Client(endpoint));
    std::string rec = "prev=" + std::to_string(prev) + ";members=";
    for (size_t i = 0; i < members.size(); ++i) rec += (i ? "," : "") + members[i];
    ARYL_RETURN_IF_ERROR(c->Set(Key(job, "gen/" + std::to_string(generation)), rec, kTimeout));
    // "latest" only moves forward (the runtime's fault recovery also publishes).
    ARYL_ASSIGN_OR_RETURN(auto latest, Latest(endpoint, job));
    if (generation > latest.first)
      ARYL_RETURN_IF_ERROR(c->Set(Key(job, "gen/latest"), std::to_string(generation), kTimeout));
    return Status::Ok();
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
