// AgentChannel: the worker's side of the worker <-> agent messages of
// protocol/messages.h (steps 12-16), over the agent's ipc:// endpoint
// (ARYL_AGENT_ENDPOINT). ARYL_JOB_ID and ARYL_WORKER_ID are then the
// protocol's numeric JobId / WorkerId.
//  - Hello(): WorkerHello -> the current GenerationAnnounce (the one this
//    worker was started for, for a joiner).
//  - Poll(): drains pushes without blocking: later GenerationAnnounce
//    (planned changes) and WorkerCheckpointRequest (preemption notices).
//  - ReportResize / ReportProgress / Leave / ReportCheckpoint: one-way
//    WorkerResizeReport, WorkerProgress, WorkerLeave, CheckpointReport.
//  - Done(): WorkerDone -> Ok, the program's outcome just before it exits
//    (protocol step 18); bounded by `timeout`.
// Thread safety: one thread (the training loop).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aryl/protocol/messages.h"
#include "aryl/result.h"
#include "aryl/runtime.h"
#include "rendezvous.h"

namespace aryl {

namespace protocol {
class Client;
}

class AgentChannel {
 public:
  // `channel_id`: the identity the agent issued (ARYL_CHANNEL_ID), if any.
  static Result<std::unique_ptr<AgentChannel>> Connect(const std::string& endpoint, const std::string& job_id,
                                                       const std::string& worker_id,
                                                       const std::string& channel_id = "");
  ~AgentChannel();

  Result<GenerationRecord> Hello(int64_t generation, std::chrono::milliseconds timeout);

  struct Pushes {
    std::vector<GenerationRecord> generations;
    bool checkpoint = false;
    bool stop_after = false;
  };
  Pushes Poll();

  void ReportResize(const ResizeReport& report);
  // `remaining`: steps left (0 = unknown); `stats`: a new step-time summary.
  void ReportProgress(int64_t generation, int64_t step, double loss, double steps_per_second, double remaining = 0,
                      std::optional<protocol::StepStats> stats = std::nullopt);
  void Leave(int64_t generation, int64_t step);
  // `error` non-empty: the checkpoint failed (the path names what was tried).
  void ReportCheckpoint(int64_t generation, int64_t step, const std::string& path, int64_t bytes, double seconds,
                        const std::string& error = "");
  Status Done(int64_t generation, int64_t step, const std::string& outcome, const std::string& message,
              std::chrono::milliseconds timeout);

 private:
  AgentChannel() = default;
  std::unique_ptr<protocol::Client> client_;
  uint64_t job_ = 0;
  int64_t worker_ = 0;
};

}  // namespace aryl
