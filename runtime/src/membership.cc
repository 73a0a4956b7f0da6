// Joining generations: the first start, building a generation's
// communicator, moving the state to the members that lack it, and planned
// resizes (aryl/runtime.h, resize protocol steps 3-5).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "comm/fake/fake_communicator.h"
#if ARYL_HAVE_GLOO
#include "comm/gloo/gloo_communicator.h"
#endif
#include "comm/registry.h"
#include "runtime_impl.h"

namespace aryl {

// The first Step() (kStarting): joins the starting generation and takes the
// job's state; kTraining on success.
Status Runtime::Impl::Start(ElasticState& state) {
  double t0 = RuntimeNow();
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
  double t_rdv = RuntimeNow();
  ARYL_RETURN_IF_ERROR(Enter(rec));
  double t_comm = RuntimeNow();
  // Nobody in a fresh generation has state: SyncState then makes rank 0
  // the source (its initialization or the newest valid checkpoint). A
  // joiner brings none and receives it from a stayer.
  ARYL_RETURN_IF_ERROR(SyncState(state));
  Go(WorkerEvent::kJoin);
  spdlog::info(
      "aryl: {} started in gen {} as rank {}/{} at step {} (rendezvous {:.3f}s comm {:.3f}s state "
      "{:.3f}s)",
      opt_.worker_id, gen_, rank_, world_, state.step(), t_rdv - t0, t_comm - t_rdv,
      RuntimeNow() - t_comm);
  return Status::Ok();
}

// Builds the communicator of `rec` (step 4).
Status Runtime::Impl::Enter(const GenerationRecord& rec) {
  auto it = std::find(rec.members.begin(), rec.members.end(), opt_.worker_id);
  if (it == rec.members.end()) {
    return Status::FailedPrecondition("worker '" + opt_.worker_id +
                                      "' is not a member of generation " +
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
      return Status::InvalidArgument(
          "ARYL_BACKEND=" + opt_.backend +
          ": this program does not link that communicator (link Aryl::runtime_nccl, "
          "from find_package(Aryl COMPONENTS nccl), to a runtime built with NCCL)");
    }
    if (!store_) {
      return Status::InvalidArgument(
          "ARYL_BACKEND=" + opt_.backend +
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
      spdlog::warn("aryl: {} shrink failed ({}); building a fresh group", opt_.backend,
                   shrunk.status().ToString());
    }
  }
  if (comm_) comm_->Abort();
  comm_.reset();
  gen_ = rec.generation;
  members_ = rec.members;
  rank_ = rank;
  world_ = size;
  if (opt_.backend == "fake") {
    comm_ = CreateFakeCommunicator(opt_.job_id + "/g" + std::to_string(gen_), rank, size,
                                   opt_.collective_timeout);
    return Status::Ok();
  }
  if (external) {
    ARYL_ASSIGN_OR_RETURN(
        comm_, external->create(*store_, "g" + std::to_string(gen_) + "/" + opt_.backend, rank,
                                size, opt_.collective_timeout));
    return Status::Ok();
  }
  if (size == 1 && !store_) {
    comm_ = CreateFakeCommunicator(opt_.job_id + "/solo/" + std::to_string(::getpid()), 0, 1,
                                   opt_.collective_timeout);
    return Status::Ok();
  }
  // Its own store handle: the communicator sets its timeout on it, which
  // must not change the job store's (c10d's PrefixStore would pass it down).
#if ARYL_HAVE_GLOO
  ARYL_ASSIGN_OR_RETURN(
      auto pg_store, store_->Prefixed("g" + std::to_string(gen_) + "/pg", opt_.collective_timeout));
  ARYL_ASSIGN_OR_RETURN(
      comm_, CreateGlooCommunicator(pg_store, rank, size, opt_.gloo_host, opt_.collective_timeout));
  return Status::Ok();
#else
  return Status::FailedPrecondition(
      "backend '" + opt_.backend +
      "': this build has no Gloo backend (the libtorch it was built against ships no Gloo "
      "headers); use ARYL_BACKEND=nccl");
#endif
}

// Step 5: picks the source of truth and moves the state to whoever lacks it.
Status Runtime::Impl::SyncState(ElasticState& state) {
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
Result<int64_t> Runtime::Impl::BroadcastTensors(const std::vector<torch::Tensor>& tensors,
                                                int root) {
  torch::NoGradGuard no_grad;
  int64_t moved = 0;
  std::vector<torch::Tensor> pending;
  size_t pending_bytes = 0;
  auto flush = [&]() -> Status {
    if (pending.empty()) return Status::Ok();
    std::vector<torch::Tensor> flat_parts;
    for (auto& t : pending) flat_parts.push_back(t.reshape({-1}));
    auto flat = rank_ == root ? torch::cat(flat_parts)
                              : torch::empty({int64_t(pending_bytes / 4)}, torch::kFloat32);
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
      case torch::kFloat32:
        dtype = DataType::kFloat32;
        break;
      case torch::kFloat64:
        dtype = DataType::kFloat64;
        break;
      case torch::kInt64:
        dtype = DataType::kInt64;
        break;
      case torch::kUInt8:
        dtype = DataType::kUInt8;
        break;
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

// A generation's record: from the agent's announcements, else the store.
Result<GenerationRecord> Runtime::Impl::Record(int64_t generation) {
  if (auto it = gens_.find(generation); it != gens_.end()) return it->second;
  if (channel_) {
    // Another rank saw the announcement first: ours is on its way, unless
    // the generation came from fault recovery (then it is in the store).
    // A worker whose hello reached the agent after the announcement was
    // pushed never gets that push: every 200 ms it asks the agent, which
    // answers a WorkerHello with any generation it announced (agent.h).
    double deadline = RuntimeNow() + std::chrono::duration<double>(opt_.rendezvous_timeout).count();
    double next_ask = RuntimeNow() + 0.2;
    while (RuntimeNow() < deadline) {
      for (auto& rec : channel_->Poll().generations) gens_[rec.generation] = rec;
      if (auto it = gens_.find(generation); it != gens_.end()) return it->second;
      if (RuntimeNow() >= next_ask) {
        next_ask = RuntimeNow() + 0.2;
        if (auto asked = channel_->Hello(generation, std::chrono::milliseconds(500)); asked.ok()) {
          gens_[asked->generation] = *asked;
          if (asked->generation == generation) return *asked;
        }
      }
      auto in_store = store_->Check("gen/" + std::to_string(generation));
      if (in_store.ok() && *in_store) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return store_->ReadGeneration(generation, opt_.rendezvous_timeout);
}

// Moves into generation `target` (kSwitching), as a stayer or a joiner, or
// leaves when not one of its members.
Status Runtime::Impl::PlannedResize(ElasticState& state, int64_t target) {
  Go(WorkerEvent::kResize);
  ResizeReport rep;
  double t0 = RuntimeNow();
  rep.planned = true;
  rep.from_generation = gen_;
  rep.from_world = world_;
  rep.step = state.step();
  rep.detect_s = first_seen_time_ > 0 ? std::max(0.0, agree_time_ - first_seen_time_) : 0.0;
  ARYL_ASSIGN_OR_RETURN(auto rec, Record(target));
  double t_rdv = RuntimeNow();
  rep.rendezvous_s = t_rdv - t0;
  if (std::find(rec.members.begin(), rec.members.end(), opt_.worker_id) == rec.members.end()) {
    if (channel_) channel_->Leave(target, state.step());
    spdlog::info("aryl: {} leaves at step {} (not in generation {})", opt_.worker_id, state.step(),
                 target);
    std::printf("aryl: left generation=%lld step=%lld\n", (long long)target,
                (long long)state.step());
    std::fflush(stdout);
    comm_.reset();
    Go(WorkerEvent::kLeave);
    return Status::Ok();
  }
  ARYL_RETURN_IF_ERROR(Enter(rec));
  double t_comm = RuntimeNow();
  rep.communicator_s = t_comm - t_rdv;
  ARYL_RETURN_IF_ERROR(SyncState(state));
  rep.transfer_s = RuntimeNow() - t_comm;
  rep.to_generation = gen_;
  rep.to_world = world_;
  rep.total_s = RuntimeNow() - t0;
  Report(rep);
  Go(WorkerEvent::kJoin);
  return Status::Ok();
}

void Runtime::Impl::Report(const ResizeReport& rep) {
  reports_.push_back(rep);
  spdlog::info("aryl: {} {}", opt_.worker_id, rep.ToString());
  if (rank_ == 0) {
    std::printf("aryl: %s\n", rep.ToString().c_str());
    std::fflush(stdout);
    if (store_ && opt_.elastic())
      (void)store_->Set("report/" + std::to_string(rep.to_generation), rep.ToString());
    if (channel_) channel_->ReportResize(rep);
  }
  first_seen_time_ = 0;
}

}  // namespace aryl
