#include "comm/nccl/nccl_communicator.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

namespace aryl {
namespace {

using Clock = std::chrono::steady_clock;

std::string HexNcclId(const NcclUniqueId& id) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char b : id.bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

bool UnhexNcclId(const std::string& text, NcclUniqueId* id) {
  if (text.size() != 2 * sizeof(id->bytes)) return false;
  auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < sizeof(id->bytes); ++i) {
    id->bytes[i] = static_cast<unsigned char>(nib(text[2 * i]) << 4 | nib(text[2 * i + 1]));
  }
  return true;
}

bool Accepted(NcclResult r) { return r == NcclResult::kSuccess || r == NcclResult::kInProgress; }

Status FromNccl(NcclApi& api, NcclResult r, std::string_view op) {
  std::string msg = "nccl " + std::string(op) + ": " + api.ErrorString(r);
  if (r == NcclResult::kInvalidArgument || r == NcclResult::kInvalidUsage)
    return Status::InvalidArgument(msg);
  return Status::IoError(msg);  // remote, system, internal, unhandled CUDA: rebuild the group
}

Status FromCuda(const CudaResult& r, std::string_view op) {
  std::string msg = "cuda " + std::string(op) + ": " + r.what;
  if (r.kind == CudaResult::kSticky) {
    return Status::Internal(
        msg + " (a sticky error: the CUDA context is lost and this process must exit)");
  }
  return Status::Unavailable(msg);
}

// Spins briefly (a small all-reduce is done in microseconds), then sleeps so
// that a long wait does not take a core from the ranks it waits for.
class Backoff {
 public:
  void Wait() {
    if (++polls_ < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  int polls_ = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(NcclContext& context, std::chrono::milliseconds timeout)
      : ctx_(context), api_(*context.api), timeout_(timeout) {}

  ~NcclCommunicator() override {
    std::lock_guard lock(mu_);
    if (!lost_context_) (void)api_.SetDevice(ctx_.device);  // rule 12
    if (Handle()) {
      if (abort_requested_ || state_ != State::kReady) {
        AbortLocked();
      } else {
        FinalizeLocked();
      }
    }
    if (lost_context_) return;
    if (event_) api_.EventDestroy(event_);
    if (stream_) api_.StreamDestroy(stream_);
  }

  NcclContext& context() const { return ctx_; }
  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  std::string_view Backend() const override { return "nccl"; }

  Status AllReduceSum(std::span<const BufferView> in) override {
    return Collective(in, "allreduce", [&](const std::vector<BufferView>& buffers) {
      if (NcclResult r = api_.GroupStart(); r != NcclResult::kSuccess) return r;
      for (const auto& b : buffers) {
        NcclResult r = api_.AllReduceSum(b.data, b.count, b.dtype, Handle(), stream_);
        if (!Accepted(r)) {
          api_.GroupEnd();
          return r;
        }
      }
      return api_.GroupEnd();
    });
  }

  Status Broadcast(BufferView buffer, int root) override {
    if (root < 0 || root >= size_) {
      return Status::InvalidArgument("nccl broadcast: root " + std::to_string(root) +
                                     " is not in [0, " + std::to_string(size_) + ")");
    }
    return Collective({&buffer, 1}, "broadcast", [&](const std::vector<BufferView>& buffers) {
      return api_.Broadcast(buffers[0].data, buffers[0].count, buffers[0].dtype, root, Handle(),
                            stream_);
    });
  }

  void Abort() override {
    abort_requested_ = true;
    // A thread inside a collective holds mu_: it sees the flag within one
    // poll and aborts itself, so that no thread is inside NCCL while
    // CommAbort runs (nccl_api.h rule 5).
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    if (!lost_context_) (void)api_.SetDevice(ctx_.device);  // rule 12
    AbortLocked();
  }

  // kCreating -> kReady, or kAborted with the error.
  Status Init(const NcclUniqueId& id, int rank, int size, Clock::time_point deadline) {
    std::lock_guard lock(mu_);
    if (Status s = PrepareDevice(); !s.ok()) return FailLocked(s);
    NcclResult r = api_.CommInitRank(cell_.get(), size, id, rank);
    if (!Accepted(r)) return FailLocked(FromNccl(api_, r, "init rank"));
    if (Status s = Poll(Handle(), deadline, "init rank"); !s.ok()) return FailLocked(s);
    return ReadyLocked("init rank");
  }

  // kCreating -> kReady, or both this and `parent` kAborted with the error.
  Status ShrinkFrom(NcclCommunicator& parent, std::span<const int> excluded,
                    Clock::time_point deadline) {
    std::scoped_lock lock(parent.mu_, mu_);
    if (parent.state_ != State::kReady || parent.abort_requested_) {
      return Status::InvalidArgument("nccl shrink: the parent communicator is not live");
    }
    Status s = PrepareDevice();
    if (s.ok()) {
      // NCCL writes the child's handle into *cell_ from its own thread (rule
      // 3); the cell outlives this call even when the shrink fails.
      NcclResult r = api_.CommShrink(parent.Handle(), excluded, cell_.get());
      s = Accepted(r) ? PollShrink(parent, deadline) : FromNccl(api_, r, "shrink");
    }
    if (!s.ok()) {
      parent.AbortLocked();  // ends NCCL's job for the child before the child goes
      if (!Handle()) Orphan();
      return FailLocked(s);
    }
    return ReadyLocked("shrink");
  }

 private:
  enum class State { kCreating, kReady, kAborted };

  // A CUDA error as a Status; after a sticky one no NCCL or CUDA call is made
  // again (the context is lost; NCCL's teardown could hang on it).
  Status Cuda(const CudaResult& r, std::string_view op) {
    if (r.kind == CudaResult::kSticky) lost_context_ = true;
    return FromCuda(r, op);
  }

  NcclComm Handle() const {
    return std::atomic_ref<NcclComm>(*cell_).load(std::memory_order_acquire);
  }

  Status PrepareDevice() {
    // Before the stream and the communicator: both belong to the device
    // current at their creation.
    if (CudaResult r = api_.SetDevice(ctx_.device); !r.ok()) {
      return Cuda(r, "set device " + std::to_string(ctx_.device));
    }
    if (CudaResult r = api_.StreamCreate(&stream_); !r.ok()) return Cuda(r, "stream create");
    if (CudaResult r = api_.EventCreate(&event_); !r.ok()) return Cuda(r, "event create");
    return Status::Ok();
  }

  Status ReadyLocked(std::string_view op) {
    int device = -1;
    NcclResult r = api_.CommUserRank(Handle(), &rank_);
    if (r == NcclResult::kSuccess) r = api_.CommCount(Handle(), &size_);
    if (r == NcclResult::kSuccess) r = api_.CommCuDevice(Handle(), &device);
    if (r != NcclResult::kSuccess) return FailLocked(FromNccl(api_, r, op));
    if (device != ctx_.device) {
      return FailLocked(Status::Internal(
          "nccl " + std::string(op) + ": the communicator is on cuda:" + std::to_string(device) +
          ", this process selected cuda:" + std::to_string(ctx_.device)));
    }
    state_ = State::kReady;
    return Status::Ok();
  }

  // Polls `comm` out of kInProgress (rule 1) to the deadline.
  Status Poll(NcclComm comm, Clock::time_point deadline, std::string_view op) {
    for (Backoff backoff;; backoff.Wait()) {
      NcclResult async = NcclResult::kSuccess;
      NcclResult r = api_.CommGetAsyncError(comm, &async);
      if (r != NcclResult::kSuccess) return FromNccl(api_, r, op);
      if (async == NcclResult::kSuccess) return Status::Ok();
      if (async != NcclResult::kInProgress) return FromNccl(api_, async, op);
      if (Status s = Interrupted(deadline, op); !s.ok()) return s;
    }
  }

  // Polls the parent and, once NCCL has written it, the child until both
  // have left kInProgress (rule 3): the parent reports the shrink's errors.
  Status PollShrink(NcclCommunicator& parent, Clock::time_point deadline) {
    auto state = [&](NcclComm comm, NcclResult* async) {
      NcclResult r = api_.CommGetAsyncError(comm, async);
      if (r != NcclResult::kSuccess) return FromNccl(api_, r, "shrink");
      if (*async != NcclResult::kSuccess && *async != NcclResult::kInProgress)
        return FromNccl(api_, *async, "shrink");
      return Status::Ok();
    };
    for (Backoff backoff;; backoff.Wait()) {
      NcclResult of_parent = NcclResult::kInProgress, of_child = NcclResult::kInProgress;
      if (Status s = state(parent.Handle(), &of_parent); !s.ok()) return s;
      if (NcclComm child = Handle()) {
        if (Status s = state(child, &of_child); !s.ok()) return s;
      }
      if (of_parent == NcclResult::kSuccess && of_child == NcclResult::kSuccess)
        return Status::Ok();
      if (Status s = Interrupted(deadline, "shrink"); !s.ok()) return s;
    }
  }

  Status Interrupted(Clock::time_point deadline, std::string_view op) const {
    if (abort_requested_) return Status::Unavailable("nccl " + std::string(op) + ": aborted");
    if (Clock::now() > deadline) {
      return Status::Timeout("nccl " + std::string(op) + ": timed out after " +
                             std::to_string(timeout_.count()) + " ms");
    }
    return Status::Ok();
  }

  // Runs one collective: after the producer's kernels (an event from its
  // stream), on device copies of host buffers (async copies on this stream),
  // with GroupEnd's kInProgress waited out before any stream call (rule 2).
  // The copies back to the (pageable) host buffers are queued only once the
  // collective has drained from the stream: queued behind a collective that
  // never ends they would block this thread, under mu_, past the deadline
  // and out of Abort()'s reach (rule 9).
  template <typename Launch>
  Status Collective(std::span<const BufferView> in, std::string_view op, Launch launch) {
    std::lock_guard lock(mu_);
    if (state_ != State::kReady)
      return Status::Unavailable("nccl " + std::string(op) + ": communicator aborted");
    if (abort_requested_)
      return FailLocked(Status::Unavailable("nccl " + std::string(op) + ": aborted"));
    // Rule 12: this thread's device is the communicator's (staging buffers
    // are allocated on it).
    if (CudaResult r = api_.SetDevice(ctx_.device); !r.ok())
      return FailLocked(Cuda(r, "set device " + std::to_string(ctx_.device)));
    auto deadline = Clock::now() + timeout_;
    std::vector<BufferView> buffers;
    std::vector<std::pair<BufferView, void*>> staged;  // host buffer, its device copy
    Status s = Stage(in, &buffers, &staged);
    if (s.ok()) {
      NcclResult r = launch(buffers);
      s = Accepted(r) ? Poll(Handle(), deadline, op) : FromNccl(api_, r, op);
    }
    if (s.ok()) s = Drain(deadline, op);
    for (size_t i = 0; s.ok() && i < staged.size(); ++i) {
      auto& [host, device] = staged[i];
      CudaResult r =
          api_.MemcpyAsync(host.data, device, host.bytes(), MemcpyKind::kDeviceToHost, stream_);
      if (!r.ok()) s = Cuda(r, "copy to the host");
    }
    if (s.ok() && !staged.empty()) s = Drain(deadline, op);
    if (lost_context_) {
      *cell_ = nullptr;  // abandoned: the process exits
      state_ = State::kAborted;
      return s;
    }
    if (!s.ok() && !s.IsInvalidArgument()) AbortLocked();
    for (auto& [host, device] : staged) api_.Free(device);
    return s;
  }

  Status Stage(std::span<const BufferView> in, std::vector<BufferView>* buffers,
               std::vector<std::pair<BufferView, void*>>* staged) {
    if (CudaResult r = api_.RecordOnProducerStream(event_); !r.ok()) return Cuda(r, "event record");
    if (CudaResult r = api_.StreamWaitEvent(stream_, event_); !r.ok())
      return Cuda(r, "stream wait event");
    for (const auto& b : in) {
      int device = -1;
      if (CudaResult r = api_.PointerDevice(b.data, &device); !r.ok())
        return Cuda(r, "pointer attributes");
      if (device >= 0) {
        if (device != ctx_.device) {
          return Status::InvalidArgument(
              "nccl: a buffer is on cuda:" + std::to_string(device) +
              " but the communicator is on cuda:" + std::to_string(ctx_.device));
        }
        buffers->push_back(b);
        continue;
      }
      // The runtime's small control buffers live in host memory.
      void* d = nullptr;
      if (CudaResult r = api_.Malloc(&d, b.bytes()); !r.ok()) return Cuda(r, "staging allocation");
      staged->push_back({b, d});
      CudaResult r = api_.MemcpyAsync(d, b.data, b.bytes(), MemcpyKind::kHostToDevice, stream_);
      if (!r.ok()) return Cuda(r, "copy to the device");
      buffers->push_back({d, b.count, b.dtype});
    }
    return Status::Ok();
  }

  Status Drain(Clock::time_point deadline, std::string_view op) {
    for (Backoff backoff;; backoff.Wait()) {
      CudaResult q = api_.StreamQuery(stream_);
      if (q.ok()) return Status::Ok();
      if (q.kind != CudaResult::kNotReady) return Cuda(q, "stream of " + std::string(op));
      NcclResult async = NcclResult::kSuccess;
      NcclResult r = api_.CommGetAsyncError(Handle(), &async);
      if (r != NcclResult::kSuccess) return FromNccl(api_, r, op);
      if (async != NcclResult::kSuccess && async != NcclResult::kInProgress)
        return FromNccl(api_, async, op);
      if (Status s = Interrupted(deadline, op); !s.ok()) return s;
    }
  }

  // Finalize polled to the deadline, then Destroy (rule 4); Abort otherwise.
  void FinalizeLocked() {
    NcclResult r = api_.CommFinalize(Handle());
    if (Accepted(r) && Poll(Handle(), Clock::now() + timeout_, "finalize").ok() &&
        api_.CommDestroy(Handle()) == NcclResult::kSuccess) {
      *cell_ = nullptr;
      state_ = State::kAborted;
      return;
    }
    AbortLocked();
  }

  void AbortLocked() {
    if (NcclComm comm = Handle()) api_.CommAbort(comm);
    *cell_ = nullptr;
    state_ = State::kAborted;
  }

  // A shrink that failed before NCCL wrote the child: NCCL may still write
  // it, so the cell stays alive for the life of the process.
  void Orphan() {
    std::lock_guard lock(orphans_mu_);
    orphans_.push_back(std::move(cell_));
    cell_ = std::make_shared<NcclComm>(nullptr);
  }

  Status FailLocked(Status s) {
    AbortLocked();
    return s;
  }

  static inline std::mutex orphans_mu_;
  static inline std::vector<std::shared_ptr<NcclComm>> orphans_;

  NcclContext& ctx_;
  NcclApi& api_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<NcclComm> cell_ =
      std::make_shared<NcclComm>(nullptr);  // the handle, where NCCL writes it
  CudaStream stream_ = nullptr;
  CudaEvent event_ = nullptr;
  int rank_ = 0, size_ = 0;
  std::mutex mu_;  // held by the thread inside NCCL on this communicator
  State state_ = State::kCreating;
  std::atomic<bool> abort_requested_{false};
  bool lost_context_ = false;  // under mu_
};

}  // namespace

int SelectCudaDevice(int local_rank, int device_count) {
  if (device_count <= 0) return 0;
  return std::max(local_rank, 0) % device_count;
}

Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(NcclContext& context,
                                                             NcclIdStore& store,
                                                             const std::string& prefix, int rank,
                                                             int size,
                                                             std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;  // one deadline for the id and the init
  NcclUniqueId id;
  if (rank == 0) {
    if (context.leaked_roots >= kMaxLeakedRoots) {
      return Status::Internal(
          "nccl: " + std::to_string(context.leaked_roots.load()) +
          " bootstrap root threads of failed generations may still wait for their ranks (NCCL "
          "cannot stop them); this process must exit and be replaced");
    }
    NcclResult r = context.api->GetUniqueId(&id);
    if (r != NcclResult::kSuccess) return FromNccl(*context.api, r, "get unique id");
    if (Status s = store.Set(prefix + "/id", HexNcclId(id)); !s.ok()) {
      ++context.leaked_roots;  // nobody will connect to this root
      return s;
    }
  } else {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    ARYL_ASSIGN_OR_RETURN(std::string text,
                          store.Wait(prefix + "/id", std::max(left, std::chrono::milliseconds(1))));
    if (!UnhexNcclId(text, &id))
      return Status::Corruption("nccl unique id at " + prefix + "/id is malformed");
  }
  auto comm = std::make_unique<NcclCommunicator>(context, timeout);
  if (Status s = comm->Init(id, rank, size, deadline); !s.ok()) {
    if (rank == 0) ++context.leaked_roots;  // not every rank connected to the root, perhaps
    return s;
  }
  return std::unique_ptr<Communicator>(std::move(comm));
}

Result<std::unique_ptr<Communicator>> ShrinkNcclCommunicator(Communicator* parent,
                                                             const std::vector<int>& excluded,
                                                             std::chrono::milliseconds timeout) {
  auto* p = dynamic_cast<NcclCommunicator*>(parent);
  if (!p)
    return Status::InvalidArgument(
        "ShrinkNcclCommunicator: the parent is not an NCCL communicator");
  // The child shares the parent's context (one per process).
  auto child = std::make_unique<NcclCommunicator>(p->context(), timeout);
  ARYL_RETURN_IF_ERROR(child->ShrinkFrom(*p, excluded, Clock::now() + timeout));
  return std::unique_ptr<Communicator>(std::move(child));
}

}  // namespace aryl
