// GlooCommunicator: Communicator over libtorch's c10d::ProcessGroupGloo (CPU).
// Internal to the runtime; the process group's rendezvous runs over `store`
// (already prefixed per generation by the caller).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "aryl/communicator.h"
#include "aryl/result.h"


namespace aryl {

// Blocks until all `size` ranks connected or `timeout` passed (Timeout).
// `host` is the address this rank's peers connect to. Sets `store`'s timeout
// to `timeout`: give it a store handle of its own (JobStore::Prefixed).
//
// Bounds of its own, not only Gloo's: every collective returns within
// `timeout` plus a margin (Timeout) even if Gloo's internal timeout does not
// fire; buffers are copied in and out, so an operation still running after
// that never writes to the caller's memory. The destructor waits for the
// process group's threads no longer than that bound either: a group whose
// operations have not ended is released on a thread of its own when they do.
Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                             int rank, int size, const std::string& host,
                                                             std::chrono::milliseconds timeout);

// Maps an exception text from Gloo/c10d to a Status: "Timed out" -> Timeout,
// anything else from a peer -> IoError (both retryable).
Status GlooErrorToStatus(const std::string& what, std::string_view op);

}  // namespace aryl
