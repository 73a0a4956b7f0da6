// PendingSnapshot: a core snapshot whose encoding runs on a helper thread
// (Daemon::Impl::MaybeSnapshot, core_journal.cc) until a tick saves it.
//
// Dropping one (a newer snapshot, a reload of the state, the daemon's end)
// cancels the encoding and waits for the helper, which stops at its next job
// or server: a few microseconds of work, not the whole encoding. Before this,
// a scheduler that stopped while a 50 MB snapshot was being encoded waited
// for that encoding (seconds) before it exited, and so did a restart.
//
// Thread safety: owned by the serving thread; the helper shares only `cancel`
// and the copies it was given.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <utility>

#include "aryl/result.h"

namespace aryl::daemon {

struct PendingSnapshot {
  PendingSnapshot() = default;
  PendingSnapshot(PendingSnapshot&&) = default;
  PendingSnapshot& operator=(PendingSnapshot&&) = delete;  // never over one under way
  ~PendingSnapshot() {
    if (cancel) cancel->store(true, std::memory_order_relaxed);
    // `text` is destroyed next: it waits for the helper, now stopping.
  }

  // Set when the snapshot is dropped; the helper gives up (Status::Cancelled).
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  // SnapshotToJson of the image, and the speed models' JSON as they were.
  std::future<Result<std::pair<std::string, std::string>>> text;
  std::int64_t upto = 0;  // the last core_events row it covers
  std::int64_t rows = 0;  // journal rows it replaces
  std::chrono::steady_clock::time_point taken;
  double image_ms = 0;  // serving-thread time at the image
};

}  // namespace aryl::daemon
