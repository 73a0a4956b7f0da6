// ProtocolStore: a c10d::Store over the project's rendezvous StoreClient
// (protocol/store.h), so c10d's ProcessGroupGloo rendezvous runs through the
// store the agent (or a coordinator) serves over ZeroMQ and which outlives
// every worker. Errors become exceptions here (c10d's contract) and are turned
// back into Status values by the callers (rendezvous.cc, gloo_communicator.cc):
// the message says "Timeout" for deadlines, so they map to retryable Timeout.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <string>

#include "aryl/result.h"

namespace aryl {

namespace protocol {
class StoreClient;
class StoreServer;
}  // namespace protocol

class ProtocolStore final : public c10d::Store {
 public:
  static Result<c10::intrusive_ptr<ProtocolStore>> Connect(const std::string& endpoint,
                                                           std::chrono::milliseconds timeout);
  ~ProtocolStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // The same connection with its own timeout: setTimeout() on either never
  // changes the other's (a communicator's store must not change the job's).
  c10::intrusive_ptr<ProtocolStore> WithOwnTimeout(std::chrono::milliseconds timeout) const;

  // Prefer Connect(); public for c10::make_intrusive.
  ProtocolStore(std::shared_ptr<protocol::StoreClient> client, std::chrono::milliseconds timeout);

 private:
  std::shared_ptr<protocol::StoreClient> client_;
};

// A StoreServer bound to `endpoint` (e.g. "tcp://127.0.0.1:*"), for
// coordinators that play the agent's part.
class ProtocolStoreServer {
 public:
  static Result<std::unique_ptr<ProtocolStoreServer>> Start(const std::string& endpoint);
  ~ProtocolStoreServer();
  const std::string& endpoint() const;

 private:
  ProtocolStoreServer() = default;
  std::unique_ptr<protocol::StoreServer> server_;
};

}  // namespace aryl
