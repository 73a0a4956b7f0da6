// Runtime: lets an ordinary libtorch data-parallel loop change its worker
// count while it trains, without restarting the workers that stay.
//
//   auto rt = aryl::Runtime::FromEnv();
//   aryl::ElasticState state;
//   state.Track(model); state.Track(optimizer); state.Track(sampler);
//   while (rt.Step(state) && state.step() < steps) {
//     auto batch = sampler.Local(rt.Rank(), rt.WorldSize());
//     ... forward on batch.indices, loss.backward() ...
//     if (!rt.AllReduceGradients(*model, batch.weight)) continue;  // fault: step abandoned
//     optimizer.step();
//   }
//   return rt.ExitCode();
//
// Resize protocol (planned changes). Generation g is a numbered, ordered list
// of worker ids; rank = position in the list.
//  1. Announce. The agent (or the test coordinator, which plays its part)
//     starts any joiners, waits until each has set "<job>/ready/<id>", then
//     writes the record of generation G = {prev, members} under
//     "<job>/gen/<G>" and sets "<job>/gen/latest" = G in the rendezvous store.
//     Workers poll "latest" without blocking (at most every poll interval) at
//     step boundaries.
//  2. Agree. Each rank writes the newest generation it has seen into its own
//     slot of a control vector appended to the last gradient bucket of the
//     step's all-reduce; after the sum every rank knows max(seen) = G and
//     switches after this step. No extra round trip, and no rank can switch
//     at a different step.
//  3. Leave / stay / join. At the next Step(), ranks not in G's members
//     return false (the process exits 0); stayers keep their state in memory;
//     joiners (new processes, started with ARYL_GENERATION=G) are already
//     waiting for G's record. The rendezvous store lives in the agent, never
//     in a worker, so it survives any one worker.
//  4. Communicator. Every member destroys the old communicator and builds G's:
//     Gloo: a c10d ProcessGroupGloo over PrefixStore("<job>/g<G>/pg").
//     NCCL: ncclCommShrink for a pure shrink, else ncclCommInitRank with a
//     fresh unique id published in the store; ncclCommAbort of the old one.
//  5. State. A tiny all-reduce of (has_state, step) per rank picks the source:
//     the rank with state and the highest committed step (lowest rank on
//     ties). When every member already holds that state (pure shrink) nothing
//     moves; otherwise the source broadcasts ElasticState (parameters,
//     buffers, optimizer state, step, sampler cursor, scalars) and all resume.
// Each phase (detect, agree, rendezvous, communicator, transfer) is timed,
// logged, and stored as "<job>/report/<G>" for the agent.
//
// Faults (unplanned changes). A collective that fails with a retryable error
// (peer gone: Gloo I/O error; timeout) abandons the step: AllReduceGradients
// returns false and the caller must skip optimizer.step(), so parameters
// change only after a successful all-reduce. At the next Step() each survivor
// of generation g registers under "<job>/g<g>/fail/", the first to register
// waits until all other members registered or until the settle time passes
// with no new arrival, and publishes the survivors as generation G = g + 1
// (fault generations are numbered below the next plan, so a replacement the
// scheduler plans meanwhile is applied after it: aryl/protocol/generation.h).
// Then steps 4 and 5 run as above, the source being
// a survivor with the most committed steps, so no completed step is lost.
// Below min_workers the survivors write a checkpoint and wait (bounded) for a
// generation that is large enough.
//
// Checkpoints: rank 0 writes one every `checkpoint_every` steps, when the
// agent asks (a counter at "<job>/control/checkpoint"), and before stopping on
// SIGTERM or "<job>/control/stop". A fresh generation 1 restores the newest
// valid checkpoint in checkpoint_dir, at any world size.
//
// Thread safety: one thread (the training loop) uses a Runtime.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aryl/communicator.h"
#include "aryl/elastic_state.h"
#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl {

// The ARYL_* environment contract (docs/runtime.md has the full table).
struct RuntimeOptions {
  std::string job_id = "local";
  std::string worker_id;           // ARYL_WORKER_ID
  std::string store_endpoint;      // ARYL_STORE_ENDPOINT host:port; empty: standalone
  std::string agent_endpoint;      // ARYL_AGENT_ENDPOINT (reported, for the agent's own use)
  std::string agent_channel_id;    // ARYL_CHANNEL_ID: the identity the agent issued this worker
  int64_t generation = 1;          // ARYL_GENERATION: the generation this worker starts in
  std::string backend = "gloo";    // ARYL_BACKEND: gloo | nccl | fake
  std::string gloo_host = "127.0.0.1";  // ARYL_GLOO_HOST: address peers reach this worker at
  std::string checkpoint_dir;      // ARYL_CHECKPOINT_DIR
  // ARYL_FENCE_ID (set by the scheduler): the job's identity for the checkpoint
  // fence (checkpoint.h), whose generation is ARYL_GENERATION's; empty: no fencing.
  std::string fence_id;
  int64_t checkpoint_every = 0;    // ARYL_CHECKPOINT_EVERY (steps; 0: off)
  int64_t total_steps = 0;         // ARYL_TOTAL_STEPS (0: unknown; see SetTotalSteps)
  int checkpoint_keep = 3;         // ARYL_CHECKPOINT_KEEP
  int min_workers = 1;             // ARYL_MIN_WORKERS
  int max_workers = 1 << 20;       // ARYL_MAX_WORKERS
  std::chrono::milliseconds collective_timeout{30000};   // ARYL_COLLECTIVE_TIMEOUT_MS
  std::chrono::milliseconds rendezvous_timeout{60000};   // ARYL_RENDEZVOUS_TIMEOUT_MS
  std::chrono::milliseconds fault_settle{2000};          // ARYL_FAULT_SETTLE_MS
  std::chrono::milliseconds poll_interval{20};           // ARYL_POLL_MS
  std::chrono::milliseconds wait_for_workers{60000};     // ARYL_WAIT_WORKERS_MS (below min)
  std::size_t bucket_bytes = 25u << 20;                  // ARYL_BUCKET_MB
  // Standalone mode (no store endpoint): a fixed world, rank 0 hosts the store.
  int world_size = 1;              // ARYL_WORLD_SIZE
  int rank = 0;                    // ARYL_RANK
  std::string master_addr = "127.0.0.1";  // ARYL_MASTER_ADDR
  int master_port = 29511;         // ARYL_MASTER_PORT

  static Result<RuntimeOptions> FromEnv();
  bool elastic() const { return !store_endpoint.empty(); }
};

// The timed phases of one membership change (seconds).
struct ResizeReport {
  int64_t from_generation = 0;
  int64_t to_generation = 0;
  int from_world = 0;
  int to_world = 0;
  int64_t step = 0;
  bool planned = true;
  double detect_s = 0, agree_s = 0, rendezvous_s = 0, communicator_s = 0, transfer_s = 0;
  double total_s = 0;
  std::string ToString() const;  // one line, key=value
};

class Runtime {
 public:
  // Reads RuntimeOptions::FromEnv() and connects; prints the error and exits
  // with status 2 when the environment is wrong or the rendezvous fails.
  static Runtime FromEnv();
  static Result<Runtime> Create(RuntimeOptions options);

  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;
  ~Runtime();

  // A step boundary. Commits the previous step (or recovers from its fault),
  // applies an agreed membership change, writes due checkpoints. The first call
  // joins the starting generation and synchronizes the state. False: stop the
  // loop (this worker left, a stop was requested, or a fatal error: status()).
  // Each step must call AllReduceGradients() before the next Step(); a Step()
  // without one is a FailedPrecondition error (it would commit a step whose
  // batch was never applied).
  bool Step(ElasticState& state);

  // Scales every gradient of `module` by `weight` (default: 1 / WorldSize(),
  // i.e. averaging) and sums them across ranks in buckets. False when the
  // collective failed: skip optimizer.step(); the next Step() recovers.
  // The gradients are summed in place in flat buckets kept from step to step
  // (like DDP's gradient_as_bucket_view): afterwards each .grad is a tensor
  // inside a bucket, and zero_grad() keeps it there, so a steady step copies
  // and allocates nothing. A .grad set to None or replaced is copied in again.
  [[nodiscard]] bool AllReduceGradients(torch::nn::Module& module, double weight = -1.0);
  // The same for the gradients of `parameters` (the Python API passes
  // model.parameters()); parameters without requires_grad are skipped.
  [[nodiscard]] bool AllReduceGradients(const std::vector<at::Tensor>& parameters, double weight = -1.0);

  int Rank() const;
  int WorldSize() const;
  int64_t Generation() const;
  const std::string& WorkerId() const;
  const RuntimeOptions& options() const;
  // Why Step() returned false; Ok for a clean exit (left, stopped).
  Status status() const;
  int ExitCode() const;  // 0 unless status() is an error
  const std::vector<ResizeReport>& Resizes() const;
  Communicator* communicator();  // for extra collectives (metrics); may be null

  // Writes a checkpoint now (rank 0 only; others return Ok).
  Status CheckpointNow(const ElasticState& state);
  // Stops at the next step boundary after a checkpoint (also on SIGTERM).
  void RequestStop();
  // The training loss of the latest step (rank 0's is the one reported), carried in
  // the progress reports to the agent and from there to the scheduler. Optional.
  void ReportLoss(double loss);
  // Samples each worker processes per step, carried with the step-time
  // summaries the scheduler fits the job's speed on (docs/scheduler.md,
  // "Measured speed"). Optional: unknown, the scheduler assumes a fixed
  // global batch split evenly.
  void ReportLocalBatch(double samples);
  // The steps the whole run takes (default: ARYL_TOTAL_STEPS, which the
  // scheduler sets from `aryl-run --steps`; 0 = unknown): the scheduler's
  // finish estimates use the steps left at the measured rate.
  void SetTotalSteps(int64_t steps);

 private:
  class Impl;
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace aryl
