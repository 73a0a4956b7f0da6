// Runtime::Impl, the class behind aryl::Runtime (aryl/runtime.h has the
// numbered resize and fault protocols). Its member functions live in files of
// one job each:
//   runtime.cc             the public API, Init, the step boundary (Step,
//                          AllReduceGradients, PollControl), Fail, ReportDone
//   membership.cc          joining generations: Start, Enter, SyncState,
//                          BroadcastTensors, Record, PlannedResize, Report
//   recovery.cc            fault recovery: RecoverLoop, Recover,
//                          WaitForWorkers, WaitForGeneration
//   runtime_checkpoint.cc  FenceAs, CheckpointNow, RestoreCheckpoint
// Where the worker is in its life cycle is one WorkerPhase (worker_phase.h),
// moved only by Go(); the booleans left are per-step agreements and requests.
//
// Thread safety: one thread (the training loop) uses it; the StorePoller's
// thread only hands values over through the poller.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent_channel.h"
#include "aryl/checkpoint.h"
#include "aryl/protocol/step_timer.h"
#include "aryl/runtime.h"
#include "grad_buckets.h"
#include "rendezvous.h"
#include "store_poller.h"
#include "worker_phase.h"

namespace aryl {

// Seconds on the steady clock: phase timings in ResizeReport, poll and
// progress intervals.
inline double RuntimeNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class Runtime::Impl {
 public:
  explicit Impl(RuntimeOptions o) : opt_(std::move(o)) {}
  ~Impl() { ReportDone(); }

  Status Init();
  void ReportDone();

  // ---- step boundary (runtime.cc) ----
  bool Step(ElasticState& state);
  bool AllReduceGradients(const std::vector<torch::Tensor>& parameters, double weight);
  void PollControl();
  bool Fail(Status s);
  // Moves phase_ by `event` (worker_phase.h); a transition the table lacks is
  // a bug in this class: logged, and the phase is kept.
  void Go(WorkerEvent event);

  // ---- checkpoints (runtime_checkpoint.cc) ----
  void FenceAs(int64_t generation);
  Status CheckpointNow(const ElasticState& state);
  Status RestoreCheckpoint(ElasticState& state);

  // ---- membership (membership.cc) ----
  Status Start(ElasticState& state);
  Status Enter(const GenerationRecord& rec);
  Status SyncState(ElasticState& state);
  Result<int64_t> BroadcastTensors(const std::vector<torch::Tensor>& tensors, int root);
  Result<GenerationRecord> Record(int64_t generation);
  Status PlannedResize(ElasticState& state, int64_t target);
  void Report(const ResizeReport& rep);

  // ---- fault recovery (recovery.cc) ----
  Status RecoverLoop(ElasticState& state, Status cause);
  Status Recover(ElasticState& state, const Status& cause);
  Status WaitForWorkers(ElasticState& state);
  template <typename Wanted>  // defined in recovery.cc, its only user
  Status WaitForGeneration(ElasticState& state, std::chrono::milliseconds timeout,
                           const std::string& what, Wanted wanted);

  RuntimeOptions opt_;
  WorkerPhase phase_ = WorkerPhase::kCreated;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<Communicator> comm_;
  GradBuckets grads_{opt_.bucket_bytes};
  std::unique_ptr<CheckpointManager> ckpt_;
  int64_t ckpt_failures_ = 0;       // checkpoints failed in a row (CheckpointNow)
  int64_t ckpt_failing_since_ = 0;  // the step of the first of them
  double last_fence_check_ = 0;
  std::unique_ptr<AgentChannel> channel_;
  std::map<int64_t, GenerationRecord> gens_;  // announced by the agent
  double last_progress_time_ = 0;
  double last_loss_ = std::nan("");  // from ReportLoss; NaN until the program reports one
  int64_t last_progress_step_ = 0;
  protocol::StepTimer timer_;  // rank 0: step-time summaries for the scheduler's speed model
  double last_sync_s_ = -1;    // the last all-reduce's time
  int64_t total_steps_ = 0;    // ARYL_TOTAL_STEPS or SetTotalSteps; 0 = unknown
  int64_t gen_ = 0;
  std::vector<std::string> members_;
  int rank_ = 0;
  int world_ = 1;
  bool has_state_ = false;  // holds the job's state (false until the first state sync)
  Status fail_status_;      // why the step was abandoned (kAbandoned)
  Status status_;
  double fail_time_ = 0;
  int64_t seen_gen_ = 0;
  int64_t agreed_gen_ = 0;
  bool agreed_ckpt_ = false;  // this step's all-reduce agreed on a checkpoint
  bool agreed_stop_ = false;  // this step's all-reduce agreed on a stop
  int64_t last_step_ = 0;     // the step of the last Step() call
  bool ckpt_wanted_ = false;  // asked for a checkpoint; offered at the next all-reduce
  bool stop_wanted_ = false;  // asked to stop; offered at the next all-reduce
  int64_t ckpt_seen_ = 0;
  double last_poll_ = 0;
  std::unique_ptr<StorePoller>
      poller_;  // elastic mode: the store's reads and writes at step boundaries
  double first_seen_time_ = 0;
  double agree_time_ = 0;
  int64_t last_transfer_bytes_ = 0;
  std::vector<ResizeReport> reports_;
};

}  // namespace aryl
