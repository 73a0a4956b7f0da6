// NcclDouble: a test double of NcclApi (runtime/src/comm/nccl/nccl_api.h)
// for ranks as threads of one process, with host memory standing in for
// device memory. It follows NCCL 2.28's rules (the numbered ones of
// nccl_api.h), not the communicator's, and counts every breach instead of
// crashing:
//  - CommInitRank, CommShrink, CommFinalize and GroupEnd return kInProgress;
//    CommGetAsyncError says kInProgress until the work is done: an init until
//    every rank has joined, a group's kernels until `launch_polls` polls
//    later, when they reach the stream;
//  - two ranks of one group on one device are refused: the init ends in
//    kInvalidUsage (rule 10; the double is one host, so each rank of a group
//    needs a device of its own);
//  - a shrink: the child's handle is written into the caller's storage once
//    every survivor has called it, and the child is then in progress for
//    `launch_polls` polls of its own; the parent stays in progress until it is
//    queried after that, and FailNextShrink() puts the error on the parent
//    only (rule 3). Using the child while its parent is in progress is a breach;
//  - CommFinalize is local (rule 4): done once this rank's own queued work is,
//    whatever the peers do; CommDestroy before that fails (and leaks);
//  - GroupEnd launches only what the calling thread queued since its
//    GroupStart (rule 8);
//  - a copy from device to host memory (pageable: the double has no pinned
//    memory) blocks the caller until the stream's earlier work is done (rule
//    9); one that would block for good gives up after `kBlockedCopyLimit` and
//    counts a breach; a copy from host memory reads it at the call;
//  - Kill(device) is a SIGKILL of the process on that device: its calls stop,
//    nothing of it is aborted, and its peers see only what a socket shows
//    (KillMode::kSocketError: kRemoteError on their next poll of a collective
//    that involves it) or nothing at all (kSilent: their work never ends);
//  - a call on a communicator that is not ready fails (ncclCommEnsureReady);
//  - CommAbort while another thread is inside a call on the same
//    communicator is a breach (the polls linger inside to widen the window);
//  - a collective whose stream did not wait for the producer's last kernel,
//    a free of memory a queued copy or kernel still uses, and a stream query
//    that finds a sticky error are what the double can be told to check.
// Streams run only when queried (or under a blocking copy): a collective
// executes when it heads the stream of every rank of its group. A test
// fixture, not a backend (nccl_double.cc: the NCCL half;
// nccl_double_cuda.cc: the CUDA half).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/nccl/nccl_api.h"

namespace aryl::testing {

class NcclDouble final : public NcclApi {
 public:
  explicit NcclDouble(int devices = 1, int launch_polls = 3);
  ~NcclDouble() override;

  // What the world does.
  void ProducerLaunched(int device);  // the training code queued a kernel on its stream
  void InjectStickyError();           // the next stream query finds the CUDA context lost
  enum class KillMode { kSocketError, kSilent };
  // SIGKILL of the process whose communicators are on `device`.
  void Kill(int device, KillMode mode = KillMode::kSocketError);
  void FailNextShrink();  // the next shrink fails on the parent, not the child

  static constexpr int kBlockedCopyLimitMs = 3000;

  // Device memory of this double (PointerDevice reports `device` for it).
  void* DeviceAlloc(int device, std::size_t bytes);

  // What the communicator did.
  struct Breaches {
    int abort_while_inside = 0;
    int call_on_dead_handle = 0;
    int destroy_while_finalizing = 0;
    int unordered_collective = 0;  // a collective on a stream that did not wait for the producer
    int stream_use_in_progress = 0;
    int free_while_queued = 0;
    int blocked_host_copy = 0;         // a device-to-host copy that never could finish
    int child_used_before_parent = 0;  // the shrink's parent was still in progress
    int buffer_on_another_device = 0;  // a collective's buffer is not on its communicator's device
  };
  Breaches breaches() const;
  int LiveComms() const;  // handles neither destroyed nor aborted (a dead rank's excluded)
  int LiveRoots() const;  // bootstrap roots still waiting for ranks
  int LiveDeviceBuffers() const;
  int DeviceOf(NcclComm comm) const;

  NcclResult GetUniqueId(NcclUniqueId* id) override;
  NcclResult CommInitRank(NcclComm* comm, int nranks, const NcclUniqueId& id, int rank) override;
  NcclResult CommShrink(NcclComm parent, std::span<const int> excluded, NcclComm* child) override;
  NcclResult CommGetAsyncError(NcclComm comm, NcclResult* async) override;
  NcclResult CommFinalize(NcclComm comm) override;
  NcclResult CommDestroy(NcclComm comm) override;
  NcclResult CommAbort(NcclComm comm) override;
  NcclResult CommUserRank(NcclComm comm, int* rank) override;
  NcclResult CommCount(NcclComm comm, int* count) override;
  NcclResult CommCuDevice(NcclComm comm, int* device) override;
  NcclResult GroupStart() override;
  NcclResult GroupEnd() override;
  NcclResult AllReduceSum(void* data, std::size_t count, DataType dtype, NcclComm comm,
                          CudaStream stream) override;
  NcclResult Broadcast(void* data, std::size_t count, DataType dtype, int root, NcclComm comm,
                       CudaStream stream) override;
  std::string ErrorString(NcclResult r) override;

  CudaResult DeviceCount(int* count) override;
  CudaResult SetDevice(int device) override;
  CudaResult PointerDevice(const void* p, int* device) override;
  CudaResult StreamCreate(CudaStream* stream) override;
  CudaResult StreamDestroy(CudaStream stream) override;
  CudaResult StreamQuery(CudaStream stream) override;
  CudaResult EventCreate(CudaEvent* event) override;
  CudaResult EventDestroy(CudaEvent event) override;
  CudaResult RecordOnProducerStream(CudaEvent event) override;
  CudaResult StreamWaitEvent(CudaStream stream, CudaEvent event) override;
  CudaResult Malloc(void** p, std::size_t bytes) override;
  CudaResult Free(void* p) override;
  CudaResult MemcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                         CudaStream stream) override;

 private:
  struct Group;
  struct Comm;
  struct Stream;
  struct Op;
  struct Event {
    long epoch = 0;
  };

  Comm* Live(NcclComm handle);
  NcclResult Query(NcclComm comm, const std::function<void(const Comm&)>&
                                      read);  // null (and a breach) for a dead handle; under mu_
  NcclResult Enqueue(Op op, NcclComm comm, CudaStream stream);
  void Progress(Comm& c);     // under mu_: launches, shrinks, finalizes, failures
  void RunStream(Stream& s);  // under mu_
  bool Uses(const Stream& s, const void* p) const;

  const int devices_;
  const int launch_polls_;
  mutable std::mutex mu_;
  std::deque<std::unique_ptr<Group>> groups_;
  std::deque<std::unique_ptr<Comm>> comms_;
  std::deque<std::unique_ptr<Stream>> streams_;
  std::deque<std::unique_ptr<Event>> events_;
  std::map<std::string, Group*> by_id_;
  std::map<const char*, std::pair<std::size_t, int>> device_memory_;  // start -> bytes, device
  int DeviceOfLocked(const void* p) const;                            // -1: host memory
  std::vector<long> producer_epoch_;
  long next_id_ = 1;
  bool sticky_ = false;
  bool fail_next_shrink_ = false;
  std::map<int, KillMode> killed_;  // device -> how its process died
  Breaches breaches_;
};

}  // namespace aryl::testing
