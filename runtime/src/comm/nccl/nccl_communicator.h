// NcclCommunicator: Communicator over NCCL on raw device pointers and a CUDA
// stream of its own (no torch CUDA headers, so it builds against Debian's
// CPU-only libtorch wherever CUDA and NCCL are present).
//
// Generation changes (step 4 of the protocol in aryl/runtime.h):
//  - growth or a fresh group: rank 0 creates an ncclUniqueId and publishes it
//    (hex) at "<job>/<prefix>/id"; everyone calls ncclCommInitRankConfig;
//  - a pure planned shrink: ncclCommShrink(parent, excluded ranks) with no
//    new unique id;
//  - a fault: ncclCommAbort on the failed communicator, then a fresh group.
// Communicators are non-blocking (config.blocking = 0): every call polls
// ncclCommGetAsyncError and the stream until done or the timeout, then aborts.
// Internal to the runtime; built only when ARYL_HAVE_NCCL, into its own
// library aryl_runtime_nccl (nccl_register.cc adds it to comm/registry.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "aryl/communicator.h"
#include "aryl/result.h"

namespace aryl {

class JobStore;

Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(JobStore& store, const std::string& prefix, int rank,
                                                             int size, std::chrono::milliseconds timeout);

// Null when `parent` is not an NCCL communicator. `excluded` are parent ranks.
Result<std::unique_ptr<Communicator>> ShrinkNcclCommunicator(Communicator* parent, const std::vector<int>& excluded,
                                                             std::chrono::milliseconds timeout);

}  // namespace aryl
