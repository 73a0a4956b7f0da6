// FakeCommunicator: an in-process Communicator whose ranks are threads.
// Behavioural, not a mock: it really sums and broadcasts, honours the timeout
// (a rank alone in a collective gets Timeout) and Abort(). For fast unit tests.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "aryl/communicator.h"

namespace aryl {

class FakeWorld;

// Ranks calling with the same `key` and `size` share one world.
std::unique_ptr<Communicator> CreateFakeCommunicator(const std::string& key, int rank, int size,
                                                     std::chrono::milliseconds timeout);

}  // namespace aryl
