// The elastic runtime's public API and step boundary: see the numbered
// protocol in aryl/runtime.h, the life cycle in worker_phase.h and the files
// of Runtime::Impl in runtime_impl.h.
#include "aryl/runtime.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "runtime_impl.h"

namespace aryl {
namespace {

std::atomic<bool> g_sigterm{false};
void OnSigterm(int) { g_sigterm = true; }

}  // namespace

std::string ResizeReport::ToString() const {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "resize from_gen=%lld to_gen=%lld from_world=%d to_world=%d step=%lld planned=%d "
                "detect_s=%.4f "
                "agree_s=%.4f rendezvous_s=%.4f communicator_s=%.4f transfer_s=%.4f total_s=%.4f",
                (long long)from_generation, (long long)to_generation, from_world, to_world,
                (long long)step, planned ? 1 : 0, detect_s, agree_s, rendezvous_s, communicator_s,
                transfer_s, total_s);
  return buf;
}

// The program is about to exit (the Runtime goes out of scope): tell the
// agent how it ended, so that an exit 0 after a stop is never taken for the
// end of the job's work (protocol step 18). Bounded; a lost report makes the
// scheduler treat the exit as an interruption, which resumes from a checkpoint.
void Runtime::Impl::ReportDone() {
  if (!channel_) return;
  std::string outcome = !status_.ok() ? (status_.IsRetryable() ? "interrupted" : "failed")
                        : phase_ == WorkerPhase::kLeft ? "left"
                        : agreed_stop_                 ? "stopped"
                                                       : "completed";
  Status st = channel_->Done(gen_, last_step_, outcome, status_.ok() ? "" : status_.ToString(),
                             std::chrono::milliseconds(2000));
  if (!st.ok())
    spdlog::warn("aryl: {}: completion report ({}) not delivered: {}", opt_.worker_id, outcome,
                 st.ToString());
}

Status Runtime::Impl::Init() {
  total_steps_ = opt_.total_steps;
  if (opt_.elastic()) {
    ARYL_ASSIGN_OR_RETURN(
        auto js, JobStore::Connect(opt_.store_endpoint, opt_.job_id, opt_.rendezvous_timeout));
    store_ = std::make_unique<JobStore>(std::move(js));
    // A store on loopback or a LAN answers in milliseconds: a poll that
    // waits longer finds it gone (and is retried with backoff).
    ARYL_ASSIGN_OR_RETURN(auto ps, store_->WithTimeout(std::min(opt_.rendezvous_timeout,
                                                                std::chrono::milliseconds(1000))));
    poller_ = std::make_unique<StorePoller>(std::make_unique<JobStore>(std::move(ps)),
                                            opt_.poll_interval, opt_.worker_id);
  } else if (opt_.world_size > 1) {
    // Standalone, fixed world: rank 0 hosts the store (no elasticity, so
    // nothing needs to outlive it).
    if (opt_.rank == 0) {
      ARYL_ASSIGN_OR_RETURN(
          auto js, JobStore::Serve(opt_.master_port, opt_.job_id, opt_.rendezvous_timeout));
      store_ = std::make_unique<JobStore>(std::move(js));
    } else {
      ARYL_ASSIGN_OR_RETURN(
          auto js, JobStore::Connect(opt_.master_addr + ":" + std::to_string(opt_.master_port),
                                     opt_.job_id, opt_.rendezvous_timeout));
      store_ = std::make_unique<JobStore>(std::move(js));
    }
  }
  if (!opt_.agent_endpoint.empty()) {
    ARYL_ASSIGN_OR_RETURN(channel_, AgentChannel::Connect(opt_.agent_endpoint, opt_.job_id,
                                                          opt_.worker_id, opt_.agent_channel_id));
  }
  if (!opt_.checkpoint_dir.empty()) {
    ckpt_ = std::make_unique<CheckpointManager>(opt_.checkpoint_dir, opt_.checkpoint_keep);
  }
  struct sigaction sa {};
  sa.sa_handler = OnSigterm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  // Gloo writes to its peers with writev(): after a peer dies, a write to
  // its reset socket raises SIGPIPE, whose default action kills this worker
  // without a word. Ignored, the write fails with EPIPE, the collective
  // fails, and the survivors regroup. (A handler the program installed is kept.)
  struct sigaction old_pipe {};
  if (sigaction(SIGPIPE, nullptr, &old_pipe) == 0 && old_pipe.sa_handler == SIG_DFL) {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, nullptr);
  }
  return Status::Ok();
}

// ---- step boundary ----------------------------------------------------
// Where the step boundary goes depends on the phase the previous step left:
// kCreated starts, kAbandoned recovers, kReduced commits, kTraining (no
// all-reduce since the previous Step()) is the program's error.
bool Runtime::Impl::Step(ElasticState& state) {
  if (IsTerminal(phase_)) return false;
  struct NoteStep {  // the last step reached, for the completion report
    Impl* self;
    ElasticState& state;
    ~NoteStep() { self->last_step_ = state.step(); }
  } note{this, state};
  Status s;
  if (phase_ == WorkerPhase::kCreated) {
    Go(WorkerEvent::kStart);
    s = Start(state);
    // No fault recovery from here: a joiner whose generation never formed
    // (the stayers moved on to a newer plan) would regroup alone and train
    // from a checkpoint beside the job. It fails; the planner replaces it.
    if (!s.ok()) return Fail(s);
  } else if (phase_ == WorkerPhase::kAbandoned) {
    s = RecoverLoop(state, fail_status_);
    if (!s.ok()) return Fail(s);
    if (IsTerminal(phase_)) return false;
  } else if (phase_ == WorkerPhase::kTraining) {
    return Fail(Status::FailedPrecondition(
        "Step() called without AllReduceGradients() since the previous Step(): step " +
        std::to_string(state.step()) +
        "'s batch would be skipped; call AllReduceGradients() once per step"));
  } else {  // kReduced: commit the step
    Go(WorkerEvent::kCommit);
    state.set_step(state.step() + 1);
    state.AdvanceSamplers(world_);
    if (poller_) poller_->SetProgress(rank_ == 0, state.step());  // stored by the poller's thread
    if (channel_ && rank_ == 0) {
      double now = RuntimeNow();
      timer_.Step(now, gen_, world_, last_sync_s_);
      if (now - last_progress_time_ > 0.25) {
        double rate = last_progress_time_ > 0
                          ? (state.step() - last_progress_step_) / (now - last_progress_time_)
                          : 0;
        double remaining =
            total_steps_ > 0 ? std::max<double>(1, double(total_steps_ - state.step())) : 0;
        channel_->ReportProgress(gen_, state.step(), last_loss_, rate, remaining,
                                 timer_.TakeSummary());
        last_progress_time_ = now;
        last_progress_step_ = state.step();
      }
    }
  }

  if (agreed_gen_ > gen_) {
    s = PlannedResize(state, agreed_gen_);
    if (!s.ok() && s.IsRetryable()) s = RecoverLoop(state, s);
    if (!s.ok()) return Fail(s);
    if (IsTerminal(phase_)) return false;
  }
  // A copy of the job cut off from the scheduler while the job started again
  // elsewhere learns it within a second, checkpoint or not (checkpoint.h).
  if (rank_ == 0 && ckpt_ && !opt_.fence_id.empty() && RuntimeNow() - last_fence_check_ > 1.0) {
    last_fence_check_ = RuntimeNow();
    FenceAs(gen_);
    if (Status f = ckpt_->CheckFence(); CheckpointManager::IsFenced(f)) return Fail(f);
  }
  bool due =
      opt_.checkpoint_every > 0 && state.step() > 0 && state.step() % opt_.checkpoint_every == 0;
  if (due || agreed_ckpt_) {
    agreed_ckpt_ = false;
    if (Status c = CheckpointNow(state); CheckpointManager::IsFenced(c)) return Fail(c);
    timer_.Interrupt();  // the next interval holds the checkpoint, not only a step
  }
  if (agreed_stop_) {
    Go(WorkerEvent::kStop);
    if (Status c = CheckpointNow(state); CheckpointManager::IsFenced(c)) return Fail(c);
    spdlog::info("aryl: {} stopping at step {} (stop requested)", opt_.worker_id, state.step());
    Go(WorkerEvent::kStopped);
    return false;
  }
  return true;
}

bool Runtime::Impl::AllReduceGradients(const std::vector<torch::Tensor>& parameters,
                                       double weight) {
  // Before the first Step() there is nothing to reduce with: a no-op.
  if (IsTerminal(phase_) || !comm_) return comm_ == nullptr && !IsTerminal(phase_);
  if (weight < 0) weight = 1.0 / double(world_);
  PollControl();
  try {
    // The gradients live in buckets reused across steps (grad_buckets.h);
    // the control vector rides at the end of the last one.
    const int64_t slots = world_ + 2;
    if (Status s = grads_.Prepare(parameters, slots); !s.ok()) {
      Fail(s);
      return false;
    }
    grads_.Scale(weight);
    float* c = grads_.control();
    // Generations ride as offsets from gen_ (the same on every rank of this
    // communicator): exact in float32 however large the numbers grow.
    c[rank_] = float(std::max(seen_gen_, gen_) - gen_);
    c[world_] = ckpt_wanted_ ? 1.f : 0.f;
    c[world_ + 1] = (g_sigterm || stop_wanted_) ? 1.f : 0.f;
    grads_.PushControl();
    double t_sync = RuntimeNow();
    Status s = comm_->AllReduceSum(grads_.views());
    last_sync_s_ = RuntimeNow() - t_sync;
    if (!s.ok()) {
      if (!s.IsRetryable()) {
        Fail(s);
        return false;
      }
      spdlog::warn("aryl: {} rank {} gen {}: step abandoned: {}", opt_.worker_id, rank_, gen_,
                   s.ToString());
      Go(WorkerEvent::kAbandon);
      fail_status_ = s;
      fail_time_ = RuntimeNow();
      return false;
    }
    grads_.PullControl();
    int64_t g = gen_;
    for (int r = 0; r < world_; ++r) g = std::max<int64_t>(g, gen_ + int64_t(c[r]));
    if (g > gen_ && agreed_gen_ <= gen_) agree_time_ = RuntimeNow();
    agreed_gen_ = std::max(agreed_gen_, g);
    if (c[world_] > 0) {
      agreed_ckpt_ = true;
      ckpt_wanted_ = false;
    }
    if (c[world_ + 1] > 0) agreed_stop_ = true;
  } catch (const std::exception& e) {
    std::string what = e.what();
    Fail(Status::Internal("AllReduceGradients: " + what.substr(0, what.find('\n'))));
    return false;
  }
  Go(WorkerEvent::kReduce);
  return true;
}

// Step-boundary polls, never waiting for the store: the agent's pushes
// (drained without blocking) and what the StorePoller's thread last read.
void Runtime::Impl::PollControl() {
  if (!store_ || !opt_.elastic()) return;
  double now = RuntimeNow();
  if (now - last_poll_ < std::chrono::duration<double>(opt_.poll_interval).count()) return;
  last_poll_ = now;
  if (channel_) {
    auto pushes = channel_->Poll();
    for (auto& rec : pushes.generations) {
      gens_[rec.generation] = rec;
      if (rec.generation > std::max(gen_, seen_gen_)) {
        seen_gen_ = rec.generation;
        if (first_seen_time_ == 0) first_seen_time_ = now;
      }
    }
    if (pushes.checkpoint) ckpt_wanted_ = true;
    if (pushes.stop_after) stop_wanted_ = true;
  }
  if (!poller_) return;
  if (int64_t latest = poller_->latest(); latest > std::max(gen_, seen_gen_)) {
    seen_gen_ = latest;
    if (first_seen_time_ == 0) first_seen_time_ = now;
  }
  if (int64_t ck = poller_->checkpoint_counter(); ck > ckpt_seen_) {
    ckpt_seen_ = ck;
    ckpt_wanted_ = true;
  }
  if (poller_->stop_requested()) stop_wanted_ = true;
}

void Runtime::Impl::Go(WorkerEvent event) {
  WorkerPhase from = phase_;
  if (!Apply(phase_, event)) {
    spdlog::error("aryl: {}: internal error: no transition from phase {} on {} (phase kept)",
                  opt_.worker_id, PhaseName(from), EventName(event));
  }
}

bool Runtime::Impl::Fail(Status s) {
  status_ = std::move(s);
  if (phase_ != WorkerPhase::kFailed)
    Go(WorkerEvent::kFail);  // a wait that ran out is kFailed already
  spdlog::error("aryl: {}: {}", opt_.worker_id, status_.ToString());
  std::fprintf(stderr, "aryl: fatal: %s\n", status_.ToString().c_str());
  return false;
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;
Runtime::~Runtime() = default;

Result<Runtime> Runtime::Create(RuntimeOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  ARYL_RETURN_IF_ERROR(impl->Init());
  return Runtime(std::move(impl));
}

Runtime Runtime::FromEnv() {
  auto opts = RuntimeOptions::FromEnv();
  if (!opts.ok()) {
    std::fprintf(stderr, "aryl: error: %s\n", opts.status().ToString().c_str());
    std::exit(2);
  }
  auto rt = Create(std::move(*opts));
  if (!rt.ok()) {
    std::fprintf(stderr, "aryl: error: %s\n", rt.status().ToString().c_str());
    std::exit(2);
  }
  return std::move(*rt);
}

bool Runtime::Step(ElasticState& state) { return impl_->Step(state); }
bool Runtime::AllReduceGradients(torch::nn::Module& module, double weight) {
  return impl_->AllReduceGradients(module.parameters(), weight);
}
bool Runtime::AllReduceGradients(const std::vector<at::Tensor>& parameters, double weight) {
  return impl_->AllReduceGradients(parameters, weight);
}
int Runtime::Rank() const { return impl_->rank_; }
int Runtime::WorldSize() const { return impl_->world_; }
int64_t Runtime::Generation() const { return impl_->gen_; }
const std::string& Runtime::WorkerId() const { return impl_->opt_.worker_id; }
const RuntimeOptions& Runtime::options() const { return impl_->opt_; }
Status Runtime::status() const { return impl_->status_; }
int Runtime::ExitCode() const {
  return impl_->status_.ok() ? 0 : (impl_->status_.IsRetryable() ? 3 : 1);
}
const std::vector<ResizeReport>& Runtime::Resizes() const { return impl_->reports_; }
Communicator* Runtime::communicator() { return impl_->comm_.get(); }
Status Runtime::CheckpointNow(const ElasticState& state) { return impl_->CheckpointNow(state); }
void Runtime::RequestStop() { impl_->stop_wanted_ = true; }
void Runtime::ReportLoss(double loss) { impl_->last_loss_ = loss; }
void Runtime::ReportLocalBatch(double samples) { impl_->timer_.set_local_batch(samples); }
void Runtime::SetTotalSteps(int64_t steps) { impl_->total_steps_ = std::max<int64_t>(0, steps); }

}  // namespace aryl
