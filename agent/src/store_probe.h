// StoreProbe: runs the agent's rendezvous-store queries (StoreRelay::Ready,
// Report) on a thread of its own, so that a store that stopped answering (its
// agent crashed or is cut off) never stalls the agent's loop: heartbeats,
// reaping and every other job go on while a query waits out its timeout.
//
// The loop asks under a key ("<job>/ready/<G>") and takes the answer on a later
// tick; one query per key is in flight at a time, and queries run in the
// order asked.
//
// Thread safety: Ask, Take and the destructor are called from one thread (the
// agent's loop); the relay is used only on the probe's thread after Start.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "aryl/agent/store_relay.h"
#include "aryl/result.h"

namespace aryl::agent {

class StoreProbe {
 public:
  using Query = std::function<Result<bool>(StoreRelay&)>;

  explicit StoreProbe(std::shared_ptr<StoreRelay> relay) : relay_(std::move(relay)), thread_([this] { Loop(); }) {}
  ~StoreProbe() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  StoreProbe(const StoreProbe&) = delete;
  StoreProbe& operator=(const StoreProbe&) = delete;

  // Queues `q` under `key` unless a query of that key is queued, running or
  // has an answer not yet taken.
  void Ask(const std::string& key, Query q) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!busy_.insert(key).second) return;
      queue_.emplace_back(key, std::move(q));
    }
    cv_.notify_one();
  }
  // The answer of the query asked under `key`, once it finished.
  std::optional<Result<bool>> Take(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = done_.find(key);
    if (it == done_.end()) return std::nullopt;
    Result<bool> r = std::move(it->second);
    done_.erase(it);
    busy_.erase(key);
    return r;
  }
  // Forgets `key`: an answer still to come is dropped.
  // Drops the query of `key`: its answer, or the answer it will have. A key
  // never asked, or already taken, leaves nothing behind.
  void Cancel(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    bool answered = done_.erase(key) > 0;
    if (busy_.erase(key) && !answered) cancelled_.insert(key);  // queued or running
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      auto [key, q] = std::move(queue_.front());
      queue_.pop_front();
      if (cancelled_.erase(key)) continue;  // cancelled before it ran
      lock.unlock();
      Result<bool> r = q(*relay_);
      lock.lock();
      if (!cancelled_.erase(key)) done_.insert_or_assign(key, std::move(r));
    }
  }

  std::shared_ptr<StoreRelay> relay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, Query>> queue_;
  std::set<std::string> busy_, cancelled_;
  std::map<std::string, Result<bool>> done_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace aryl::agent
