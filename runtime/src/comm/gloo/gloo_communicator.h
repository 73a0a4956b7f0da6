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
// `host` is the address this rank's peers connect to.
Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                             int rank, int size, const std::string& host,
                                                             std::chrono::milliseconds timeout);

// Maps an exception text from Gloo/c10d to a Status: "Timed out" -> Timeout,
// anything else from a peer -> IoError (both retryable).
Status GlooErrorToStatus(const std::string& what, std::string_view op);

}  // namespace aryl
