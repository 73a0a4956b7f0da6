// The elastic runtime: see the numbered protocol in aryl/runtime.h.
#include "aryl/runtime.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include <cmath>
#include <map>

#include "agent_channel.h"
#include "aryl/checkpoint.h"
#include "aryl/protocol/generation.h"
#include "comm/fake/fake_communicator.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/registry.h"
#include "grad_buckets.h"
#include "rendezvous.h"
#include "aryl/protocol/step_timer.h"
#include "store_poller.h"

namespace aryl {
namespace {

std::atomic<bool> g_sigterm{false};
void OnSigterm(int) { g_sigterm = true; }

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string ResizeReport::ToString() const {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "resize from_gen=%lld to_gen=%lld from_world=%d to_world=%d step=%lld planned=%d detect_s=%.4f "
                "agree_s=%.4f rendezvous_s=%.4f communicator_s=%.4f transfer_s=%.4f total_s=%.4f",
                (long long)from_generation, (long long)to_generation, from_world, to_world, (long long)step,
                planned ? 1 : 0, detect_s, agree_s, rendezvous_s, communicator_s, transfer_s, total_s);
  return buf;
}

class Runtime::Impl {
 public:
  explicit Impl(RuntimeOptions o) : opt_(std::move(o)) {}
  ~Impl() { ReportDone(); }

  // The program is about to exit (the Runtime goes out of scope): tell the
  // agent how it ended, so that an exit 0 after a stop is never taken for the
  // end of the job's work (protocol step 18). Bounded; a lost report makes the
  // scheduler treat the exit as an interruption, which resumes from a checkpoint.
  void ReportDone() {
    if (!channel_) return;
    std::string outcome = !status_.ok() ? (status_.IsRetryable() ? "interrupted" : "failed")
                          : left_       ? "left"
                          : agreed_stop_ ? "stopped"
                                         : "completed";
    Status st = channel_->Done(gen_, last_step_, outcome, status_.ok() ? "" : status_.ToString(),
                               std::chrono::milliseconds(2000));
    if (!st.ok()) spdlog::warn("aryl: {}: completion report ({}) not delivered: {}", opt_.worker_id, outcome, st.ToString());
  }

  Status Init() {
    total_steps_ = opt_.total_steps;
    if (opt_.elastic()) {
      ARYL_ASSIGN_OR_RETURN(auto js, JobStore::Connect(opt_.store_endpoint, opt_.job_id, opt_.rendezvous_timeout));
      store_ = std::make_unique<JobStore>(std::move(js));
      // A store on loopback or a LAN answers in milliseconds: a poll that
      // waits longer finds it gone (and is retried with backoff).
      ARYL_ASSIGN_OR_RETURN(auto ps, store_->WithTimeout(std::min(opt_.rendezvous_timeout, std::chrono::milliseconds(1000))));
      poller_ = std::make_unique<StorePoller>(std::make_unique<JobStore>(std::move(ps)), opt_.poll_interval, opt_.worker_id);
    } else if (opt_.world_size > 1) {
      // Standalone, fixed world: rank 0 hosts the store (no elasticity, so
      // nothing needs to outlive it).
      if (opt_.rank == 0) {
        ARYL_ASSIGN_OR_RETURN(auto js, JobStore::Serve(opt_.master_port, opt_.job_id, opt_.rendezvous_timeout));
        store_ = std::make_unique<JobStore>(std::move(js));
      } else {
        ARYL_ASSIGN_OR_RETURN(auto js, JobStore::Connect(opt_.master_addr + ":" + std::to_string(opt_.master_port),
                                                          opt_.job_id, opt_.rendezvous_timeout));
        store_ = std::make_unique<JobStore>(std::move(js));
      }
    }
    if (!opt_.agent_endpoint.empty()) {
      ARYL_ASSIGN_OR_RETURN(channel_, AgentChannel::Connect(opt_.agent_endpoint, opt_.job_id, opt_.worker_id,
                                                                opt_.agent_channel_id));
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
  bool Step(ElasticState& state) {
    if (finished_) return false;
    struct NoteStep {  // the last step reached, for the completion report
      Impl* self;
      ElasticState& state;
      ~NoteStep() { self->last_step_ = state.step(); }
    } note{this, state};
    Status s;
    if (!started_) {
      started_ = true;
      s = Start(state);
      // No fault recovery from here: a joiner whose generation never formed
      // (the stayers moved on to a newer plan) would regroup alone and train
      // from a checkpoint beside the job. It fails; the planner replaces it.
      if (!s.ok()) return Fail(s);
    } else if (last_ == LastStep::kFailed) {
      s = RecoverLoop(state, fail_status_);
      if (!s.ok()) return Fail(s);
      if (finished_) return false;
    } else if (last_ == LastStep::kNone) {
      return Fail(Status::FailedPrecondition(
          "Step() called without AllReduceGradients() since the previous Step(): step " +
          std::to_string(state.step()) + "'s batch would be skipped; call AllReduceGradients() once per step"));
    } else {
      state.set_step(state.step() + 1);
      state.AdvanceSamplers(world_);
      if (poller_) poller_->SetProgress(rank_ == 0, state.step());  // stored by the poller's thread
      if (channel_ && rank_ == 0) {
        double now = Now();
        timer_.Step(now, gen_, world_, last_sync_s_);
        if (now - last_progress_time_ > 0.25) {
          double rate = last_progress_time_ > 0 ? (state.step() - last_progress_step_) / (now - last_progress_time_) : 0;
          double remaining = total_steps_ > 0 ? std::max<double>(1, double(total_steps_ - state.step())) : 0;
          channel_->ReportProgress(gen_, state.step(), last_loss_, rate, remaining, timer_.TakeSummary());
          last_progress_time_ = now;
          last_progress_step_ = state.step();
        }
      }
    }
    last_ = LastStep::kNone;

    if (agreed_gen_ > gen_) {
      s = PlannedResize(state, agreed_gen_);
      if (!s.ok() && s.IsRetryable()) s = RecoverLoop(state, s);
      if (!s.ok()) return Fail(s);
      if (finished_) return false;
    }
    // A copy of the job cut off from the scheduler while the job started again
    // elsewhere learns it within a second, checkpoint or not (checkpoint.h).
    if (rank_ == 0 && ckpt_ && !opt_.fence_id.empty() && Now() - last_fence_check_ > 1.0) {
      last_fence_check_ = Now();
      FenceAs(gen_);
      if (Status f = ckpt_->CheckFence(); CheckpointManager::IsFenced(f)) return Fail(f);
    }
    bool due = opt_.checkpoint_every > 0 && state.step() > 0 && state.step() % opt_.checkpoint_every == 0;
    if (due || agreed_ckpt_) {
      agreed_ckpt_ = false;
      if (Status c = CheckpointNow(state); CheckpointManager::IsFenced(c)) return Fail(c);
      timer_.Interrupt();  // the next interval holds the checkpoint, not only a step
    }
    if (agreed_stop_) {
      if (Status c = CheckpointNow(state); CheckpointManager::IsFenced(c)) return Fail(c);
      spdlog::info("aryl: {} stopping at step {} (stop requested)", opt_.worker_id, state.step());
      finished_ = true;
      return false;
    }
    return true;
  }

  bool AllReduceGradients(const std::vector<torch::Tensor>& parameters, double weight) {
    if (finished_ || !comm_) return comm_ == nullptr && !finished_;
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
      double t_sync = Now();
      Status s = comm_->AllReduceSum(grads_.views());
      last_sync_s_ = Now() - t_sync;
      if (!s.ok()) {
        if (!s.IsRetryable()) {
          Fail(s);
          return false;
        }
        spdlog::warn("aryl: {} rank {} gen {}: step abandoned: {}", opt_.worker_id, rank_, gen_, s.ToString());
        last_ = LastStep::kFailed;
        fail_status_ = s;
        fail_time_ = Now();
        return false;
      }
      grads_.PullControl();
      int64_t g = gen_;
      for (int r = 0; r < world_; ++r) g = std::max<int64_t>(g, gen_ + int64_t(c[r]));
      if (g > gen_ && agreed_gen_ <= gen_) agree_time_ = Now();
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
    last_ = LastStep::kOk;
    return true;
  }

  // Fencing (checkpoint.h): under the scheduler (ARYL_FENCE_ID) its
  // generations order every copy of the job, so a copy of a stale generation
  // is refused.
  void FenceAs(int64_t generation) {
    if (!ckpt_ || opt_.fence_id.empty()) return;
    ckpt_->set_fence(opt_.fence_id, generation);
  }

  // A refused (fenced) write means this copy of the job is stale: the caller stops.
  // Every other failure is reported to the scheduler, which counts each one
  // (aryl_checkpoint_failures_total); the job keeps its newest good checkpoint.
  Status CheckpointNow(const ElasticState& state) {
    if (rank_ != 0 || !ckpt_) return Status::Ok();
    FenceAs(gen_);
    double t0 = Now();
    auto bytes = state.Serialize();
    Result<CheckpointInfo> info =
        bytes.ok() ? ckpt_->Write(state.step(), world_, *bytes)
                   : Result<CheckpointInfo>(bytes.status().WithContext("serialize"));
    if (!info.ok()) {
      if (ckpt_failures_++ == 0) ckpt_failing_since_ = state.step();
      spdlog::error("aryl: checkpoint at step {} failed ({} in a row since step {}): {}",
                    state.step(), ckpt_failures_, ckpt_failing_since_, info.status().ToString());
      // A full disk is the operator's to see, not only this worker's stderr.
      if (channel_ && !CheckpointManager::IsFenced(info.status()))
        channel_->ReportCheckpoint(gen_, state.step(), ckpt_->dir(), 0, Now() - t0, info.status().ToString());
      return info.status();
    }
    if (info->removed_for_space > 0)
      spdlog::warn("aryl: checkpoint dir {} was full: removed {} older checkpoint(s) to make room",
                   ckpt_->dir(), info->removed_for_space);
    if (ckpt_failures_ > 0) {
      spdlog::info("aryl: checkpoints written again after {} failure(s) since step {}",
                   ckpt_failures_, ckpt_failing_since_);
      ckpt_failures_ = 0;
    }
    spdlog::info("aryl: checkpoint {} step={} world={} bytes={} seconds={:.3f}", info->path, state.step(), world_,
                 bytes->size(), Now() - t0);
    if (channel_) channel_->ReportCheckpoint(gen_, state.step(), info->path, static_cast<int64_t>(bytes->size()), Now() - t0);
    return Status::Ok();
  }

  // ---- membership ---------------------------------------------------------
  Status Start(ElasticState& state) {
    double t0 = Now();
    GenerationRecord rec;
    if (opt_.elastic()) {
      ARYL_RETURN_IF_ERROR(store_->Set("ready/" + opt_.worker_id, "1"));
      if (channel_) {
        ARYL_ASSIGN_OR_RETURN(rec, channel_->Hello(opt_.generation, opt_.rendezvous_timeout));
        gens_[rec.generation] = rec;
      } else {
        ARYL_ASSIGN_OR_RETURN(rec, store_->ReadGeneration(opt_.generation, opt_.rendezvous_timeout));
      }
      ARYL_ASSIGN_OR_RETURN(ckpt_seen_, store_->Add("control/checkpoint", 0));
    } else {
      rec.generation = 1;
      for (int r = 0; r < opt_.world_size; ++r) rec.members.push_back("rank" + std::to_string(r));
      opt_.worker_id = "rank" + std::to_string(opt_.rank);
    }
    double t_rdv = Now();
    ARYL_RETURN_IF_ERROR(Enter(rec));
    double t_comm = Now();
    // Nobody in a fresh generation has state: SyncState then makes rank 0
    // the source (its initialization or the newest valid checkpoint). A
    // joiner brings none and receives it from a stayer.
    ARYL_RETURN_IF_ERROR(SyncState(state));
    spdlog::info("aryl: {} started in gen {} as rank {}/{} at step {} (rendezvous {:.3f}s comm {:.3f}s state {:.3f}s)",
                 opt_.worker_id, gen_, rank_, world_, state.step(), t_rdv - t0, t_comm - t_rdv, Now() - t_comm);
    return Status::Ok();
  }

  // Builds the communicator of `rec` (step 4).
  Status Enter(const GenerationRecord& rec) {
    auto it = std::find(rec.members.begin(), rec.members.end(), opt_.worker_id);
    if (it == rec.members.end()) {
      return Status::FailedPrecondition("worker '" + opt_.worker_id + "' is not a member of generation " +
                                        std::to_string(rec.generation));
    }
    int rank = int(it - rec.members.begin());
    int size = int(rec.members.size());
    // A backend outside aryl_runtime (comm/registry.h): NCCL when the program
    // links aryl_runtime_nccl.
    const CommunicatorBackend* external = nullptr;
    if (opt_.backend != "gloo" && opt_.backend != "fake") {
      external = FindCommunicatorBackend(opt_.backend);
      if (!external) {
        return Status::InvalidArgument("ARYL_BACKEND=" + opt_.backend +
                                       ": this program does not link that communicator (link Aryl::runtime_nccl, "
                                       "from find_package(Aryl COMPONENTS nccl), to a runtime built with NCCL)");
      }
      if (!store_) {
        return Status::InvalidArgument("ARYL_BACKEND=" + opt_.backend +
                                       " needs the job store (ARYL_STORE_ENDPOINT); a worker alone uses gloo");
      }
    }
    // A pure planned shrink of a live group whose backend can shrink it
    // (NCCL: ncclCommShrink, no new unique id).
    if (external && external->shrink && comm_ && rec.prev == gen_) {
      std::vector<int> excluded;
      bool subset = true;
      for (const auto& id : rec.members) {
        subset = subset && std::find(members_.begin(), members_.end(), id) != members_.end();
      }
      for (size_t r = 0; r < members_.size(); ++r) {
        if (std::find(rec.members.begin(), rec.members.end(), members_[r]) == rec.members.end()) {
          excluded.push_back(int(r));
        }
      }
      if (subset && !excluded.empty()) {
        auto shrunk = external->shrink(comm_.get(), excluded, opt_.collective_timeout);
        if (shrunk.ok()) {
          comm_ = std::move(*shrunk);
          gen_ = rec.generation;
          members_ = rec.members;
          rank_ = rank;
          world_ = size;
          return Status::Ok();
        }
        spdlog::warn("aryl: {} shrink failed ({}); building a fresh group", opt_.backend, shrunk.status().ToString());
      }
    }
    if (comm_) comm_->Abort();
    comm_.reset();
    gen_ = rec.generation;
    members_ = rec.members;
    rank_ = rank;
    world_ = size;
    if (opt_.backend == "fake") {
      comm_ = CreateFakeCommunicator(opt_.job_id + "/g" + std::to_string(gen_), rank, size, opt_.collective_timeout);
      return Status::Ok();
    }
    if (external) {
      ARYL_ASSIGN_OR_RETURN(comm_, external->create(*store_, "g" + std::to_string(gen_) + "/" + opt_.backend, rank,
                                                    size, opt_.collective_timeout));
      return Status::Ok();
    }
    if (size == 1 && !store_) {
      comm_ = CreateFakeCommunicator(opt_.job_id + "/solo/" + std::to_string(::getpid()), 0, 1, opt_.collective_timeout);
      return Status::Ok();
    }
    // Its own store handle: the communicator sets its timeout on it, which
    // must not change the job store's (c10d's PrefixStore would pass it down).
    ARYL_ASSIGN_OR_RETURN(auto pg_store, store_->Prefixed("g" + std::to_string(gen_) + "/pg", opt_.collective_timeout));
    ARYL_ASSIGN_OR_RETURN(comm_, CreateGlooCommunicator(pg_store, rank, size, opt_.gloo_host, opt_.collective_timeout));
    return Status::Ok();
  }

  // Step 5: picks the source of truth and moves the state to whoever lacks it.
  Status SyncState(ElasticState& state) {
    std::vector<double> info(2 * size_t(world_), 0.0);
    info[2 * rank_] = has_state_ ? 1.0 : 0.0;
    info[2 * rank_ + 1] = double(state.step());
    BufferView v{info.data(), info.size(), DataType::kFloat64};
    ARYL_RETURN_IF_ERROR(comm_->AllReduceSum({&v, 1}));
    int root = -1;
    bool everyone_current = true;
    for (int r = 0; r < world_; ++r) {
      if (info[2 * r] > 0 && (root < 0 || info[2 * r + 1] > info[2 * root + 1])) root = r;
    }
    if (root < 0) {
      // A fresh start: rank 0 brings the state.
      root = 0;
      if (rank_ == 0) ARYL_RETURN_IF_ERROR(RestoreCheckpoint(state));
      everyone_current = world_ == 1;
    } else {
      for (int r = 0; r < world_; ++r) {
        if (info[2 * r] == 0 || info[2 * r + 1] != info[2 * root + 1]) everyone_current = false;
      }
    }
    last_transfer_bytes_ = 0;
    if (everyone_current) {
      has_state_ = true;
      return Status::Ok();
    }
    // Metadata first (receivers create optimizer state from it), then the
    // tensors in place.
    std::string meta;
    if (rank_ == root) {
      ARYL_ASSIGN_OR_RETURN(meta, state.SerializeMetadata());
    }
    int64_t size = int64_t(meta.size());
    BufferView sv{&size, 1, DataType::kInt64};
    ARYL_RETURN_IF_ERROR(comm_->Broadcast(sv, root));
    meta.resize(size_t(size));
    BufferView mv{meta.data(), meta.size(), DataType::kUInt8};
    ARYL_RETURN_IF_ERROR(comm_->Broadcast(mv, root));
    if (rank_ != root) ARYL_RETURN_IF_ERROR(state.DeserializeMetadata(meta));
    ARYL_ASSIGN_OR_RETURN(int64_t bytes, BroadcastTensors(state.TransferTensors(), root));
    last_transfer_bytes_ = size + bytes;
    has_state_ = true;
    return Status::Ok();
  }

  // Broadcasts tensors from `root` in place: float32 ones coalesced into
  // buckets of bucket_bytes, others one by one. Returns the bytes moved.
  Result<int64_t> BroadcastTensors(const std::vector<torch::Tensor>& tensors, int root) {
    torch::NoGradGuard no_grad;
    int64_t moved = 0;
    std::vector<torch::Tensor> pending;
    size_t pending_bytes = 0;
    auto flush = [&]() -> Status {
      if (pending.empty()) return Status::Ok();
      std::vector<torch::Tensor> flat_parts;
      for (auto& t : pending) flat_parts.push_back(t.reshape({-1}));
      auto flat = rank_ == root ? torch::cat(flat_parts) : torch::empty({int64_t(pending_bytes / 4)}, torch::kFloat32);
      BufferView v{flat.data_ptr(), size_t(flat.numel()), DataType::kFloat32};
      ARYL_RETURN_IF_ERROR(comm_->Broadcast(v, root));
      if (rank_ != root) {
        int64_t off = 0;
        for (auto& t : pending) {
          t.copy_(flat.narrow(0, off, t.numel()).view_as(t));
          off += t.numel();
        }
      }
      moved += int64_t(pending_bytes);
      pending.clear();
      pending_bytes = 0;
      return Status::Ok();
    };
    for (const auto& t : tensors) {
      if (t.scalar_type() == torch::kFloat32 && t.device().is_cpu()) {
        pending.push_back(t);
        pending_bytes += size_t(t.numel()) * 4;
        if (pending_bytes >= opt_.bucket_bytes) ARYL_RETURN_IF_ERROR(flush());
        continue;
      }
      DataType dtype;
      switch (t.scalar_type()) {
        case torch::kFloat32: dtype = DataType::kFloat32; break;
        case torch::kFloat64: dtype = DataType::kFloat64; break;
        case torch::kInt64: dtype = DataType::kInt64; break;
        case torch::kUInt8: dtype = DataType::kUInt8; break;
        default:
          return Status::InvalidArgument(std::string("state transfer: unsupported tensor type ") +
                                         c10::toString(t.scalar_type()));
      }
      auto c = t.contiguous();
      BufferView v{c.data_ptr(), size_t(c.numel()), dtype};
      ARYL_RETURN_IF_ERROR(comm_->Broadcast(v, root));
      if (c.data_ptr() != t.data_ptr()) t.copy_(c);
      moved += int64_t(v.bytes());
    }
    ARYL_RETURN_IF_ERROR(flush());
    return moved;
  }

  // Loads the newest valid checkpoint, if any, reporting the corrupt ones skipped.
  Status RestoreCheckpoint(ElasticState& state) {
    if (!ckpt_) return Status::Ok();
    // First the fence: once it is raised no stale copy commits another
    // checkpoint, so the one loaded below is the last before this generation.
    FenceAs(gen_);
    ARYL_RETURN_IF_ERROR(ckpt_->RaiseFence());
    auto loaded = ckpt_->LoadLatest();
    if (!loaded.ok()) {
      if (!loaded.status().IsNotFound()) return loaded.status();
      if (loaded.status().message().find("skipped") != std::string::npos) {
        spdlog::error("aryl: {}", loaded.status().ToString());
        std::fprintf(stderr, "aryl: checkpoint skipped: %s\n", loaded.status().ToString().c_str());
      }
      return Status::Ok();
    }
    for (const auto& skipped : loaded->skipped) {
      spdlog::error("aryl: skipping corrupt checkpoint: {}", skipped.ToString());
      std::fprintf(stderr, "aryl: checkpoint skipped: %s\n", skipped.ToString().c_str());
    }
    ARYL_RETURN_IF_ERROR(state.Deserialize(loaded->payload).WithContext(loaded->info.path));
    spdlog::info("aryl: restored {} (step {}, saved at world {}) into world {}", loaded->info.path, loaded->info.step,
                 loaded->info.world_size, world_);
    std::printf("aryl: restored checkpoint step=%lld saved_world=%d world=%d skipped=%zu\n",
                (long long)loaded->info.step, loaded->info.world_size, world_, loaded->skipped.size());
    std::fflush(stdout);
    return Status::Ok();
  }

  // A generation's record: from the agent's announcements, else the store.
  Result<GenerationRecord> Record(int64_t generation) {
    if (auto it = gens_.find(generation); it != gens_.end()) return it->second;
    if (channel_) {
      // Another rank saw the announcement first: ours is on its way, unless
      // the generation came from fault recovery (then it is in the store).
      double deadline = Now() + std::chrono::duration<double>(opt_.rendezvous_timeout).count();
      while (Now() < deadline) {
        for (auto& rec : channel_->Poll().generations) gens_[rec.generation] = rec;
        if (auto it = gens_.find(generation); it != gens_.end()) return it->second;
        auto in_store = store_->Check("gen/" + std::to_string(generation));
        if (in_store.ok() && *in_store) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    return store_->ReadGeneration(generation, opt_.rendezvous_timeout);
  }

  Status PlannedResize(ElasticState& state, int64_t target) {
    ResizeReport rep;
    double t0 = Now();
    rep.planned = true;
    rep.from_generation = gen_;
    rep.from_world = world_;
    rep.step = state.step();
    rep.detect_s = first_seen_time_ > 0 ? std::max(0.0, agree_time_ - first_seen_time_) : 0.0;
    ARYL_ASSIGN_OR_RETURN(auto rec, Record(target));
    double t_rdv = Now();
    rep.rendezvous_s = t_rdv - t0;
    if (std::find(rec.members.begin(), rec.members.end(), opt_.worker_id) == rec.members.end()) {
      if (channel_) channel_->Leave(target, state.step());
      left_ = true;
      spdlog::info("aryl: {} leaves at step {} (not in generation {})", opt_.worker_id, state.step(), target);
      std::printf("aryl: left generation=%lld step=%lld\n", (long long)target, (long long)state.step());
      std::fflush(stdout);
      comm_.reset();
      finished_ = true;
      return Status::Ok();
    }
    ARYL_RETURN_IF_ERROR(Enter(rec));
    double t_comm = Now();
    rep.communicator_s = t_comm - t_rdv;
    ARYL_RETURN_IF_ERROR(SyncState(state));
    rep.transfer_s = Now() - t_comm;
    rep.to_generation = gen_;
    rep.to_world = world_;
    rep.total_s = Now() - t0;
    Report(rep);
    return Status::Ok();
  }

  // Fault recovery, retried while members keep failing (bounded).
  Status RecoverLoop(ElasticState& state, Status cause) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      Status s = Recover(state, cause);
      if (s.ok() || !s.IsRetryable() || waited_out_) return s;  // a bounded wait already ran out
      cause = s;
      fail_time_ = Now();
    }
    return cause.WithContext("giving up after 5 recovery attempts");
  }

  Status Recover(ElasticState& state, const Status& cause) {
    ResizeReport rep;
    rep.planned = false;
    rep.from_generation = gen_;
    rep.from_world = world_;
    rep.step = state.step();
    double t0 = Now();
    rep.detect_s = fail_time_ > 0 ? t0 - fail_time_ : 0.0;
    if (comm_) comm_->Abort();
    comm_.reset();
    if (!store_) return cause.WithContext("no rendezvous store to recover with");
    const std::string base = "g" + std::to_string(gen_) + "/fail/";
    ARYL_RETURN_IF_ERROR(store_->Set(base + "member/" + opt_.worker_id, std::to_string(state.step())));
    ARYL_ASSIGN_OR_RETURN(int64_t arrival, store_->Add(base + "count", 1));
    if (arrival == 1) {
      // The first survivor decides who is in: everyone, or whoever arrived
      // before the arrivals settled.
      int64_t last_count = 1;
      double last_change = Now();
      double deadline = Now() + std::chrono::duration<double>(opt_.rendezvous_timeout).count();
      const double settle = std::chrono::duration<double>(opt_.fault_settle).count();
      while (true) {
        ARYL_ASSIGN_OR_RETURN(int64_t count, store_->Add(base + "count", 0));
        if (count != last_count) {
          last_count = count;
          last_change = Now();
        }
        double quiet = Now() - last_change;
        if (count >= world_ || (count == world_ - 1 && quiet > std::min(0.1, settle)) || quiet > settle ||
            Now() > deadline) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::vector<std::string> survivors;
      for (const auto& id : members_) {
        ARYL_ASSIGN_OR_RETURN(bool in, store_->Check(base + "member/" + id));
        if (in) survivors.push_back(id);
      }
      // The one decider for gen_ numbers its successor (aryl/protocol/generation.h):
      // never from a counter shared with the planner, so a plan made for this
      // fault (a replacement) always outranks it.
      ARYL_ASSIGN_OR_RETURN(int64_t g, protocol::FaultSuccessor(gen_));
      ARYL_RETURN_IF_ERROR(store_->PublishAs(GenerationRecord{g, gen_, survivors}));
      ARYL_RETURN_IF_ERROR(store_->Set(base + "decided", std::to_string(g)));
      spdlog::warn("aryl: gen {} failed ({}); survivors {} form gen {}", gen_, cause.ToString(), survivors.size(), g);
    }
    ARYL_ASSIGN_OR_RETURN(std::string decided, store_->Wait(base + "decided", opt_.rendezvous_timeout));
    int64_t target = 0;
    if (auto [p, ec] = std::from_chars(decided.data(), decided.data() + decided.size(), target);
        ec != std::errc() || p != decided.data() + decided.size()) {
      return Status::Corruption(store_->Key(base + "decided") + ": '" + decided + "' is not a generation number");
    }
    ARYL_ASSIGN_OR_RETURN(auto rec, store_->ReadGeneration(target, opt_.rendezvous_timeout));
    double t_rdv = Now();
    rep.rendezvous_s = t_rdv - t0;
    if (std::find(rec.members.begin(), rec.members.end(), opt_.worker_id) == rec.members.end()) {
      // Too late for the survivors' generation (this worker was slow to see
      // the fault). The planner still counts it as alive and includes it in
      // its next plan (a replacement, say): wait for a generation with it.
      spdlog::warn("aryl: {} arrived after generation {} formed without it; waiting for one with it",
                   opt_.worker_id, target);
      return WaitForGeneration(
          state, opt_.rendezvous_timeout, "generation with worker '" + opt_.worker_id + "'",
          [&](const GenerationRecord& r) {
            return std::find(r.members.begin(), r.members.end(), opt_.worker_id) != r.members.end();
          });
    }
    ARYL_RETURN_IF_ERROR(Enter(rec));
    double t_comm = Now();
    rep.communicator_s = t_comm - t_rdv;
    ARYL_RETURN_IF_ERROR(SyncState(state));
    rep.transfer_s = Now() - t_comm;
    rep.to_generation = gen_;
    rep.to_world = world_;
    rep.total_s = Now() - t0 + rep.detect_s;
    rep.step = state.step();
    Report(rep);
    agreed_gen_ = std::max(agreed_gen_, gen_);
    if (world_ < opt_.min_workers) return WaitForWorkers(state);
    return Status::Ok();
  }

  // Below min_workers: checkpoint, then wait (bounded) for a generation with
  // enough members and move into it.
  Status WaitForWorkers(ElasticState& state) {
    spdlog::warn("aryl: world {} < min_workers {}: checkpointing and waiting", world_, opt_.min_workers);
    if (Status c = CheckpointNow(state); CheckpointManager::IsFenced(c)) return c;
    return WaitForGeneration(state, opt_.wait_for_workers,
                             "generation of at least " + std::to_string(opt_.min_workers) + " workers",
                             [&](const GenerationRecord& r) { return int(r.members.size()) >= opt_.min_workers; });
  }

  // Waits (bounded) for a generation newer than gen_ that satisfies `wanted`,
  // then moves into it as a planned change (or leaves, when not a member).
  template <typename Wanted>
  Status WaitForGeneration(ElasticState& state, std::chrono::milliseconds timeout, const std::string& what,
                           Wanted wanted) {
    double deadline = Now() + std::chrono::duration<double>(timeout).count();
    while (Now() < deadline) {
      int64_t latest = 0;
      if (channel_) {
        for (auto& rec : channel_->Poll().generations) gens_[rec.generation] = rec;
        if (!gens_.empty()) latest = gens_.rbegin()->first;
      }
      ARYL_ASSIGN_OR_RETURN(int64_t in_store, store_->Latest());
      latest = std::max(latest, in_store);
      if (latest > gen_) {
        ARYL_ASSIGN_OR_RETURN(auto rec, Record(latest));
        if (wanted(rec)) return PlannedResize(state, latest);
      }
      std::this_thread::sleep_for(opt_.poll_interval);
    }
    waited_out_ = true;
    return Status::Unavailable("no " + what + " after generation " + std::to_string(gen_) + " (world " +
                               std::to_string(world_) + ") within " + std::to_string(timeout.count()) + " ms");
  }

  void Report(const ResizeReport& rep) {
    reports_.push_back(rep);
    spdlog::info("aryl: {} {}", opt_.worker_id, rep.ToString());
    if (rank_ == 0) {
      std::printf("aryl: %s\n", rep.ToString().c_str());
      std::fflush(stdout);
      if (store_ && opt_.elastic()) (void)store_->Set("report/" + std::to_string(rep.to_generation), rep.ToString());
      if (channel_) channel_->ReportResize(rep);
    }
    first_seen_time_ = 0;
  }

  // Step-boundary polls, never waiting for the store: the agent's pushes
  // (drained without blocking) and what the StorePoller's thread last read.
  void PollControl() {
    if (!store_ || !opt_.elastic()) return;
    double now = Now();
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

  bool Fail(Status s) {
    status_ = std::move(s);
    finished_ = true;
    spdlog::error("aryl: {}: {}", opt_.worker_id, status_.ToString());
    std::fprintf(stderr, "aryl: fatal: %s\n", status_.ToString().c_str());
    return false;
  }

  enum class LastStep { kNone, kOk, kFailed };

  RuntimeOptions opt_;
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
  double last_sync_s_ = -1;  // the last all-reduce's time
  int64_t total_steps_ = 0;  // ARYL_TOTAL_STEPS or SetTotalSteps; 0 = unknown
  int64_t gen_ = 0;
  std::vector<std::string> members_;
  int rank_ = 0;
  int world_ = 1;
  bool started_ = false;
  bool has_state_ = false;
  bool waited_out_ = false;  // WaitForGeneration ran out: fault recovery stops retrying  // holds the job's state (false until the first state sync)
  bool finished_ = false;
  LastStep last_ = LastStep::kNone;
  Status fail_status_;
  Status status_;
  double fail_time_ = 0;
  int64_t seen_gen_ = 0;
  int64_t agreed_gen_ = 0;
  bool agreed_ckpt_ = false;
  bool agreed_stop_ = false;
  bool left_ = false;        // not a member of the newest generation: it left
  int64_t last_step_ = 0;    // the step of the last Step() call
  bool ckpt_wanted_ = false;
  bool stop_wanted_ = false;
  int64_t ckpt_seen_ = 0;
  double last_poll_ = 0;
  std::unique_ptr<StorePoller> poller_;  // elastic mode: the store's reads and writes at step boundaries
  double first_seen_time_ = 0;
  double agree_time_ = 0;
  int64_t last_transfer_bytes_ = 0;
  std::vector<ResizeReport> reports_;
  friend class Runtime;
};

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
int Runtime::ExitCode() const { return impl_->status_.ok() ? 0 : (impl_->status_.IsRetryable() ? 3 : 1); }
const std::vector<ResizeReport>& Runtime::Resizes() const { return impl_->reports_; }
Communicator* Runtime::communicator() { return impl_->comm_.get(); }
Status Runtime::CheckpointNow(const ElasticState& state) { return impl_->CheckpointNow(state); }
void Runtime::RequestStop() { impl_->stop_wanted_ = true; }
void Runtime::ReportLoss(double loss) { impl_->last_loss_ = loss; }
void Runtime::ReportLocalBatch(double samples) { impl_->timer_.set_local_batch(samples); }
void Runtime::SetTotalSteps(int64_t steps) { impl_->total_steps_ = std::max<int64_t>(0, steps); }

}  // namespace aryl
