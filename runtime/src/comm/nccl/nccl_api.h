// NcclApi: the raw NCCL and CUDA calls the NCCL communicator makes, one
// virtual function each, so that the communicator's state machine
// (nccl_communicator.h) runs against NCCL 2.28 and the CUDA runtime in a
// program (nccl_api_cuda.cc, the only file that includes nccl.h and
// cuda_runtime.h) and against a test double in CI, where there is no GPU.
// Handles are opaque and NcclResult mirrors ncclResult_t, so this header
// needs neither NCCL nor CUDA headers.
//
// The rules of NCCL's non-blocking communicators that the communicator obeys
// (NCCL user guide: Communicator Creation, Group Calls > Nonblocking Group
// Operation, Fault Tolerance, and the ncclCommGetAsyncError reference):
//  1. Every communicator is non-blocking (config.blocking = 0). CommInitRank,
//     CommShrink, CommFinalize and GroupEnd may return kInProgress: the work
//     goes on in NCCL's own thread, and CommGetAsyncError says kInProgress
//     until it is done, then kSuccess or the error.
//  2. Until a communicator is out of kInProgress, no other NCCL call on it and
//     no CUDA work on its stream: NCCL checks readiness first and fails the
//     call, and after a GroupEnd that returned kInProgress the kernels are not
//     on the stream yet (a stream query can find it empty).
//  3. CommShrink (and split) involve two communicators: NCCL writes the
//     child's handle into *child from its own thread (the storage must outlive
//     the call), and every communicator involved is queried with
//     CommGetAsyncError until all have left kInProgress: the parent carries
//     the shrink's errors, the child its readiness.
//  4. CommFinalize is local (NCCL 2.28): it completes once this rank's
//     outstanding work has, without waiting for the peers; CommDestroy only
//     once Finalize's state is kSuccess. CommAbort tears down locally,
//     whatever the state, and also ends a communicator whose creation did
//     not finish.
//  5. CommAbort must not run while another thread is inside an NCCL call on
//     the same communicator.
//  6. GetUniqueId on rank 0 starts a bootstrap root thread that ends only when
//     all ranks of the group have connected to it; nothing can stop it.
//  7. After a sticky CUDA error (an illegal address, a failed launch) the CUDA
//     context is unusable until the process exits.
//  8. Group calls are per thread: GroupEnd launches the operations this
//     thread queued since its GroupStart, nobody else's.
//  9. A copy between device memory and pageable host memory is synchronous
//     for the host: cudaMemcpyAsync returns only once the stream's earlier
//     work is done. Queued behind a collective whose peer died, it blocks the
//     thread for good; so the stream drains (polled, to a deadline) first.
// 10. Two ranks of one communicator on one device of one host are refused
//     (ncclInvalidUsage, "Duplicate GPU detected"); NCCL_HOSTID, which only
//     renames the host, is not a supported way around it.
// 11. A peer killed mid-collective shows only as a network error
//     (kRemoteError, kSystemError) or as a collective that never completes:
//     nothing tells the survivors; the deadline and CommAbort end their wait.
// 12. The current device is per thread (cudaSetDevice), and cudaMalloc
//     allocates on it: a collective, an abort or the teardown may come from
//     another thread than the one that made the communicator, so each sets the
//     communicator's device first. NCCL refuses a buffer of another device
//     (ncclInvalidArgument).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "aryl/communicator.h"

namespace aryl {

enum class NcclResult : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

using NcclComm = struct NcclCommOpaque*;
using CudaStream = struct CudaStreamOpaque*;
using CudaEvent = struct CudaEventOpaque*;

struct NcclUniqueId {
  unsigned char bytes[128] = {};  // NCCL_UNIQUE_ID_BYTES
};

// The outcome of a CUDA call: kSticky means the context is lost (rule 7).
struct CudaResult {
  enum Kind { kOk, kNotReady, kError, kSticky };
  Kind kind = kOk;
  std::string what;  // cudaGetErrorString, or what the call was doing
  bool ok() const { return kind == kOk; }
};

enum class MemcpyKind { kHostToDevice, kDeviceToHost };

class NcclApi {
 public:
  virtual ~NcclApi() = default;

  // NCCL. Every communicator these create is non-blocking (rule 1).
  virtual NcclResult GetUniqueId(NcclUniqueId* id) = 0;
  virtual NcclResult CommInitRank(NcclComm* comm, int nranks, const NcclUniqueId& id, int rank) = 0;
  virtual NcclResult CommShrink(NcclComm parent, std::span<const int> excluded,
                                NcclComm* child) = 0;
  virtual NcclResult CommGetAsyncError(NcclComm comm, NcclResult* async) = 0;
  virtual NcclResult CommFinalize(NcclComm comm) = 0;
  virtual NcclResult CommDestroy(NcclComm comm) = 0;
  virtual NcclResult CommAbort(NcclComm comm) = 0;
  virtual NcclResult CommUserRank(NcclComm comm, int* rank) = 0;
  virtual NcclResult CommCount(NcclComm comm, int* count) = 0;
  virtual NcclResult CommCuDevice(NcclComm comm, int* device) = 0;
  virtual NcclResult GroupStart() = 0;
  virtual NcclResult GroupEnd() = 0;
  // In place: sum / root's copy into `data` on every rank.
  virtual NcclResult AllReduceSum(void* data, std::size_t count, DataType dtype, NcclComm comm,
                                  CudaStream stream) = 0;
  virtual NcclResult Broadcast(void* data, std::size_t count, DataType dtype, int root,
                               NcclComm comm, CudaStream stream) = 0;
  virtual std::string ErrorString(NcclResult r) = 0;

  // CUDA.
  virtual CudaResult DeviceCount(int* count) = 0;
  virtual CudaResult SetDevice(int device) = 0;
  // *device: the device of device or managed memory; -1 for host memory.
  virtual CudaResult PointerDevice(const void* p, int* device) = 0;
  virtual CudaResult StreamCreate(CudaStream* stream) = 0;  // on the current device
  virtual CudaResult StreamDestroy(CudaStream stream) = 0;
  virtual CudaResult StreamQuery(
      CudaStream stream) = 0;  // kOk when idle, kNotReady while work is queued
  virtual CudaResult EventCreate(CudaEvent* event) = 0;
  virtual CudaResult EventDestroy(CudaEvent event) = 0;
  // Records `event` on the stream the training code's kernels run on: the
  // legacy default stream, which is torch's current stream unless the program
  // switched streams (the runtime builds without torch's CUDA headers).
  virtual CudaResult RecordOnProducerStream(CudaEvent event) = 0;
  virtual CudaResult StreamWaitEvent(CudaStream stream, CudaEvent event) = 0;
  virtual CudaResult Malloc(void** p, std::size_t bytes) = 0;
  virtual CudaResult Free(void* p) = 0;
  virtual CudaResult MemcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                                 CudaStream stream) = 0;
};

// NCCL and the CUDA runtime (nccl_api_cuda.cc; only in aryl_runtime_nccl).
NcclApi& CudaNcclApi();

}  // namespace aryl
