// StoreRelay: the agent's part in a job's rendezvous store (the runtime's
// resize protocol, see runtime/include/aryl/runtime.h).
//
// Every agent serves one rendezvous store (protocol/store.h, over ZeroMQ; keys
// of each job under "aryl/<job>/", so one store serves every job; the runtime
// reaches it through ARYL_STORE_ENDPOINT) and reports its endpoint in
// AgentRegister. The scheduler picks one "home" store per job start (the
// agent of rank 0) and names it in StartWorkers/NewGeneration. Then:
//  1. The scheduler numbers plans; its generation s is store generation
//     G = PlanGeneration(s) on every agent, without asking the store
//     (aryl/protocol/generation.h: the runtime's fault recovery numbers its
//     own generations below the next plan, so the two never collide).
//  2. Joiners start with ARYL_GENERATION=G and ARYL_STORE_ENDPOINT=home.
//  3. Each agent hosting the job's workers announces G to them over its
//     worker channel (GenerationAnnounce, see agent.h), for a resize once
//     every member has set "ready/<id>". The agent does not publish planned
//     generations in the store.
//  4. After the switch the runtime writes "report/<G>" (timed phases): the
//     agent's GenerationQueue marks G training; a newer plan that arrives
//     before does not wait for it (generation_queue.h). The scheduler's ResizeReport comes
//     from rank 0's WorkerResizeReport.
//
// Thread safety: Serve from the agent's setup; the queries from one thread at a
// time (the agent's StoreProbe thread, store_probe.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aryl/result.h"

namespace aryl::agent {

class StoreRelay {
 public:
  virtual ~StoreRelay() = default;
  // Starts serving the agent's store on `host`:`port` (0: any); returns its tcp:// endpoint.
  virtual Result<std::string> Serve(const std::string& host, int port) = 0;
  // True when every joiner has set "ready/<id>".
  virtual Result<bool> Ready(const std::string& endpoint, const std::string& job,
                             const std::vector<std::string>& joiners) = 0;
  // "report/<G>" once the runtime wrote it.
  virtual Result<std::optional<std::string>> Report(const std::string& endpoint, const std::string& job,
                                                    std::int64_t generation) = 0;
  // Asks the job's workers to checkpoint ("control/checkpoint" counter).
  virtual Status RequestCheckpoint(const std::string& endpoint, const std::string& job) = 0;
  // Drops client connections of a job that ended here.
  virtual void Forget(const std::string& job) = 0;
};

// The implementation over protocol::StoreServer / StoreClient.
std::unique_ptr<StoreRelay> MakeStoreRelay();

}  // namespace aryl::agent
