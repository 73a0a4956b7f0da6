// GenerationAnnouncer: drives a job's new generations (plans) through the
// agent's rendezvous store (agent.h, step 4; protocol/messages.h, step 12):
//  1. Plan: a NewGeneration whose job uses a store is queued (GenerationQueue,
//     generation_queue.h; the newest plan of a job supersedes older ones).
//  2. Pump, while forming: asks the store whether every member set
//     "ready/<id>" (stayers set it when they started, so only joiners are
//     waited for); once all are, the generation is announced to the workers
//     here (GenerationAnnounce, through the caller's `announce`).
//  3. Pump, once agreed: waits for the runtime's report of the switch
//     ("report/<G>" in the store, or rank 0's WorkerResizeReport: Reported).
// Each store query runs on the probe's thread (store_probe.h), so a store that
// stopped answering never stalls the loop; the life cycle and its deadlines
// are the GenerationQueue's. Its transitions go to the agent's log; the ones
// that give a plan up are warnings.
//
// Thread safety: none; the agent's loop owns it (the probe has its own thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "aryl/agent/generation_queue.h"
#include "aryl/protocol/messages.h"
#include "store_probe.h"

namespace aryl::agent {

// What a worker of `job`'s store generation `generation` is told (WorkerHello's
// answer, or a push): its members and the job's store.
protocol::GenerationAnnounce AnnounceOf(protocol::JobId job, std::int64_t generation,
                                        const std::vector<protocol::WorkerId>& members, const std::string& endpoint,
                                        const std::string& key);

class GenerationAnnouncer {
 public:
  using Announce = std::function<void(const protocol::GenerationAnnounce&)>;

  // The store's queries go through `probe` (without one, Pump does nothing).
  void UseProbe(std::unique_ptr<StoreProbe> probe) { probe_ = std::move(probe); }

  // Step 1: `m` (its job uses a store) as a store generation, at `now`.
  void Plan(const protocol::NewGeneration& m, double now);
  // Steps 2-3 at `now`; `announce` remembers and pushes an agreed generation.
  void Pump(double now, const Announce& announce);
  // Rank 0 reported the switch into `generation` (store generation).
  void Reported(protocol::JobId job, std::int64_t generation);
  // A member's worker ended here (the next Pump or JobEnded logs what follows).
  void MemberEnded(protocol::JobId job, protocol::WorkerId worker) { generations_.MemberEnded(job, worker); }
  // None of the job's workers runs here any more.
  void JobEnded(protocol::JobId job);

 private:
  void LogTransitions();

  GenerationQueue generations_;
  std::unique_ptr<StoreProbe> probe_;
};

}  // namespace aryl::agent
