// Rendezvous keys and generation records in the job's store (c10d::Store).
//
// The store is served by the agent (or the test coordinator), never by a
// worker, so it outlives any one worker. Layout, all under "aryl/<job>/":
//   gen/<G>              record "prev=<P>;members=<id>,<id>,..." (P=0: fresh start);
//                        G is numbered as aryl/protocol/generation.h says
//   gen/latest           newest announced G
//   ready/<worker>       a joiner is up and connected
//   g<G>/pg/...          the communicator's own rendezvous for generation G
//   g<G>/fail/...        survivors of a failed generation G (count, member/<id>, decided)
//   control/checkpoint   counter: a checkpoint is requested when it grows
//   control/stop         present: checkpoint and stop
//   progress             committed steps (rank 0)
//   report/<G>           the ResizeReport line of the change into G
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aryl/result.h"
#include "aryl/status.h"


namespace aryl {

struct GenerationRecord {
  int64_t generation = 0;
  int64_t prev = 0;
  std::vector<std::string> members;
  std::string Encode() const;
  static Result<GenerationRecord> Decode(int64_t generation, const std::string& text);
};

// Store access that never throws and never blocks past its timeout.
class JobStore {
 public:
  JobStore(c10::intrusive_ptr<c10d::Store> store, std::string job_id);
  ~JobStore();

  // "tcp://host:port", "ipc://path", "inproc://name": the project's rendezvous
  // store (protocol/store.h, served by the agent); "host:port" or
  // "c10d://host:port": a c10d TCPStore.
  static Result<JobStore> Connect(const std::string& endpoint, const std::string& job_id,
                                  std::chrono::milliseconds timeout);
  // Serves a c10d TCPStore on 0.0.0.0:port (port 0: any free port) in this process.
  static Result<JobStore> Serve(int port, const std::string& job_id, std::chrono::milliseconds timeout);
  // Serves the project's rendezvous store at `endpoint` ("tcp://127.0.0.1:*") in this process.
  static Result<JobStore> ServeProtocol(const std::string& endpoint, const std::string& job_id,
                                        std::chrono::milliseconds timeout);
  int port() const { return port_; }
  // What workers pass as ARYL_STORE_ENDPOINT to reach this store.
  const std::string& endpoint() const { return endpoint_; }

  std::string Key(const std::string& suffix) const { return "aryl/" + job_id_ + "/" + suffix; }
  Status Set(const std::string& suffix, const std::string& value);
  Result<std::string> Get(const std::string& suffix);  // waits for the key up to `timeout`
  Result<std::string> Wait(const std::string& suffix, std::chrono::milliseconds timeout);
  Result<bool> Check(const std::string& suffix);
  Status Delete(const std::string& suffix);
  Result<int64_t> Add(const std::string& suffix, int64_t delta);
  Result<std::optional<std::string>> TryGet(const std::string& suffix);

  Result<GenerationRecord> ReadGeneration(int64_t generation, std::chrono::milliseconds timeout);
  // Stores the record and moves "latest" forward (never back).
  Status PublishAs(const GenerationRecord& record);
  Result<int64_t> Latest();

  // A store whose keys live under "aryl/<job>/<suffix>", on a handle with its
  // own timeout: a communicator may set that store's timeout without changing
  // this job store's (c10d's PrefixStore::setTimeout passes it down).
  Result<c10::intrusive_ptr<c10d::Store>> Prefixed(const std::string& suffix, std::chrono::milliseconds timeout) const;
  // This job store on a connection of its own whose every call is bounded by
  // `timeout` (same keys): for polls from another thread.
  Result<JobStore> WithTimeout(std::chrono::milliseconds timeout) const;
  const c10::intrusive_ptr<c10d::Store>& raw() const { return store_; }

 private:
  Result<c10::intrusive_ptr<c10d::Store>> OwnHandle(std::chrono::milliseconds timeout) const;

  c10::intrusive_ptr<c10d::Store> store_;
  std::string job_id_;
  std::string host_;  // a c10d TCPStore's host (empty for the project's store)
  int port_ = 0;
  std::string endpoint_;
  std::shared_ptr<void> server_;  // keeps an in-process store server alive
};

}  // namespace aryl
