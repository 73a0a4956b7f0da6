// NcclCommunicator: Communicator over NCCL on raw device pointers and a CUDA
// stream of its own, written against NcclApi (nccl_api.h, whose numbered rules
// it follows) so that its state machine is tested in CI against a double.
// No libtorch at all: with nccl_api_cuda.cc it is aryl_comm_nccl, a library
// of its own that needs only CUDA and NCCL (stage 1 of the GPU check,
// bench/runtime/gpu-check.sh); the runtime reaches it through
// nccl_register.cc, which adapts its JobStore to NcclIdStore.
//
// Generation changes (step 4 of the protocol in aryl/runtime.h):
//  - growth or a fresh group: rank 0 creates an ncclUniqueId and publishes it
//    (hex) at "<job>/<prefix>/id"; everyone calls CommInitRank;
//  - a pure planned shrink: CommShrink(parent, excluded ranks), no new id;
//  - a fault: the failed communicator is aborted, then a fresh group.
//
// States of one communicator, and what moves it:
//   kCreating --ready (init/shrink polled to kSuccess)--> kReady
//   kCreating --error, timeout, Abort()--> kAborted (CommAbort; parent too for a shrink)
//   kReady --collective polled to kSuccess and its stream drained--> kReady
//   kReady --NCCL error, timeout, Abort() seen--> kAborted (CommAbort)
//   kReady --sticky CUDA error--> kAborted with no NCCL or CUDA call (context lost)
//   kReady --destructor--> Finalize polled to kSuccess, Destroy; or CommAbort at the deadline
// Every wait polls CommGetAsyncError (and the stream) to one deadline, the
// communicator's timeout, and returns Timeout past it.
//
// Errors: NCCL's invalid argument / usage are InvalidArgument (fatal); other
// NCCL errors and timeouts are retryable (rebuild the group); a sticky CUDA
// error is Internal (fatal: the CUDA context is lost, the process must exit).
//
// Threads: one thread issues collectives. Abort() may come from any thread:
// it only raises a flag when a collective is in progress, and the collective
// thread, the one inside NCCL, aborts (rule 5); otherwise it aborts at once.
//
// Internal to the runtime; built only when ARYL_HAVE_NCCL.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "aryl/communicator.h"
#include "aryl/result.h"
#include "comm/nccl/nccl_api.h"

namespace aryl {

// Where rank 0 publishes a group's unique id and the other ranks wait for
// it: the job's store in the runtime, a folder in gpu_check, a map in tests.
// Keys are relative ("<prefix>/id"). Wait returns within its timeout.
class NcclIdStore {
 public:
  virtual ~NcclIdStore() = default;
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  virtual Result<std::string> Wait(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

// What the NCCL communicators of one process share.
struct NcclContext {
  NcclApi* api = nullptr;
  int device = 0;  // this process's CUDA device (SelectCudaDevice)
  // Bootstrap root threads that may still wait for ranks of a failed
  // generation (rule 6); past kMaxLeakedRoots rank 0 refuses to start more.
  std::atomic<int> leaked_roots{0};
};

inline constexpr int kMaxLeakedRoots = 4;

// The device of a worker with `local_rank` (LOCAL_RANK, the slot on this
// host) among `device_count` visible devices: one each, wrapping around when
// there are more ranks than devices (NCCL refuses two ranks of one
// communicator on one device: "Duplicate GPU detected"). A worker the agent pins with
// CUDA_VISIBLE_DEVICES sees one device and gets it.
int SelectCudaDevice(int local_rank, int device_count);

Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(NcclContext& context,
                                                             NcclIdStore& store,
                                                             const std::string& prefix, int rank,
                                                             int size,
                                                             std::chrono::milliseconds timeout);

// Fails with InvalidArgument when `parent` is not a live NCCL communicator.
// `excluded` are parent ranks. On failure the parent is aborted too.
Result<std::unique_ptr<Communicator>> ShrinkNcclCommunicator(Communicator* parent,
                                                             const std::vector<int>& excluded,
                                                             std::chrono::milliseconds timeout);

}  // namespace aryl
