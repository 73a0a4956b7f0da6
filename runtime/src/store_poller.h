// StorePoller: the runtime's step-boundary reads and writes of the job store,
// off the training thread.
//
// Every poll interval a thread of its own, on a store connection of its own
// whose every call is bounded by a short timeout, stores rank 0's committed
// step ("progress") and reads "gen/latest", the "control/checkpoint" counter
// and "control/stop"; the training thread only reads the newest values
// (atomics) and never waits for the store. After a failed poll the thread
// backs off (1 s doubling to 16 s) and logs once per outage. So a dead or
// stopped store does not stall a single step, however many workers the job
// has (when each worker blocked on it in turn, their stalls added up); only
// membership changes, which need the store anyway, wait for it.
//
// Thread safety: the setters and getters may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rendezvous.h"

namespace aryl {

class StorePoller {
 public:
  // `store`: a connection used by this poller only.
  StorePoller(std::unique_ptr<JobStore> store, std::chrono::milliseconds interval, std::string worker_id);
  ~StorePoller();  // stops the thread (bounded by one store call's timeout)
  StorePoller(const StorePoller&) = delete;
  StorePoller& operator=(const StorePoller&) = delete;

  // What rank 0 stores as "progress"; others pass rank0 = false.
  void SetProgress(bool rank0, int64_t step);
  int64_t latest() const { return latest_; }
  int64_t checkpoint_counter() const { return checkpoint_; }
  bool stop_requested() const { return stop_requested_; }
  // Polls that succeeded so far (tests, diagnostics).
  int64_t polls() const { return polls_; }

 private:
  void Loop();
  Status PollOnce();

  std::unique_ptr<JobStore> store_;
  const std::chrono::milliseconds interval_;
  const std::string worker_id_;
  std::atomic<bool> rank0_{false};
  std::atomic<int64_t> step_{0};
  int64_t stored_step_ = -1;  // poller thread only
  std::atomic<int64_t> latest_{0};
  std::atomic<int64_t> checkpoint_{0};
  std::atomic<bool> stop_requested_{false};
  std::atomic<int64_t> polls_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace aryl
