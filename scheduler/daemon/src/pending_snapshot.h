// PendingSnapshot: a core snapshot whose encoding runs on a helper thread
// (Daemon::Impl::MaybeSnapshot, core_snapshot_save.cc), then saved piece by piece,
// a slice of the serving thread's time per tick (PollSnapshot), until its
// commit makes it the one in force.
//
// Dropping one (a newer snapshot, a reload of the state, the daemon's end)
// cancels the encoding and waits for the helper, which stops at its next job
// or server: a few microseconds of work, not the whole encoding. The image
// it was given stays whole (the next snapshot is assigned into it, job by
// job, reusing its memory). Before this, a scheduler that stopped while a 50 MB snapshot was
// being encoded waited for that encoding (seconds) before it exited, and so
// did a restart.
//
// Pieces already saved when it is dropped stay in the store, read by nobody,
// until the next snapshot begins or the store is opened again (state_store.h).
//
// Thread safety: owned by the serving thread; the helper shares only `cancel`
// and what it was given: copies (the core's image, the speed models) and the
// replaced policy, which the serving thread no longer touches. The image is
// Daemon::Impl::snapshot_image, which the serving thread touches again only
// once no snapshot is pending (after the helper's result, or its wait here).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
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
  // The snapshot's text (core_journal.h: SnapshotToJson of the image, then
  // the speed models' JSON as they were, when there are models).
  std::future<Result<std::string>> text;
  bool models = false;  // the text holds speed models: the commit empties meta's copy
  std::int64_t upto = 0;  // the last core_events row it covers
  std::int64_t rows = 0;  // journal rows it replaces
  std::chrono::steady_clock::time_point taken;
  double image_ms = 0;  // serving-thread time at the image

  // Once encoded (PollSnapshot): the text, saved a slice at a time.
  std::optional<std::string> encoded;
  std::int64_t id = 0;     // the store's snapshot (BeginCoreSnapshot); 0: not begun
  std::size_t saved = 0;   // bytes of *encoded appended
  std::chrono::steady_clock::time_point next_slice;  // no slice before
  int slices = 0;
  double save_ms = 0;       // serving-thread time in slices, in all
  double longest_ms = 0;    // ... in the longest one
  double commit_ms = 0;
  bool committed = false;
  double compact_ms = 0;  // deleting what it replaced, after the commit
  bool compacted = false;
};

}  // namespace aryl::daemon
