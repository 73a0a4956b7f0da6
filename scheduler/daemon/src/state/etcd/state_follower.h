// StateFollower: a standby's copy of the state on etcd, kept current by a
// watch, so that a takeover reads only what changed since the last event it
// applied, not every key (ha.h; docs/architecture.md, "High availability").
//
// Protocol (P is the state prefix):
//  1. Start opens an EtcdStateStore with term 0 (it reads every P/s/ key at
//     one revision R into its index) and watches P/s/ from R + 1 on a thread
//     of its own, applying each batch (EtcdStateStore::ApplyWatched).
//  2. A compacted watch (the changes since the last applied revision are gone)
//     or a batch that cannot be applied stops the following (broken). etcd
//     away (no quorum) is waited out: the watch resumes from the revision after
//     the last applied one, so nothing is missed.
//  3. TakeOver, called once this scheduler won the election with term T,
//     writes P/s/meta/leader_term = T in a transaction fenced by T, at
//     revision M. Every write of an earlier leader was fenced by its own term,
//     which stopped holding at revision T < M, so once the watch has applied
//     revision M the index holds every write any leader made. It waits for
//     that (bounded), stops the watch and hands the store over as the
//     leader's (EtcdStateStore::Lead).
//  4. TakeOver fails (broken, deposed, etcd unavailable, not caught up in
//     time) and the caller reads the state whole (EtcdStateStore::Open), as a
//     scheduler without a follower does.
//
// Thread safety: Start, TakeOver and the destructor from one thread; the
// watch thread is internal. The destructor stops the watch (within ~50 ms).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "aryl/result.h"
#include "aryl/status.h"
#include "state/etcd/etcd_client.h"
#include "state/etcd/etcd_state_store.h"

namespace aryl::daemon {

class StateFollower {
 public:
  // `options.term` is ignored (a follower writes nothing).
  static Result<std::unique_ptr<StateFollower>> Start(std::shared_ptr<etcd::Client> client,
                                                      EtcdStateStore::Options options);
  ~StateFollower();
  StateFollower(const StateFollower&) = delete;
  StateFollower& operator=(const StateFollower&) = delete;

  // 3. above: the store for the leader of `leader.term`, caught up.
  Result<std::unique_ptr<EtcdStateStore>> TakeOver(EtcdStateStore::Options leader, double timeout_s);

  // Keys read at Start and events applied since (for logs and tests).
  std::size_t loaded_keys() const;
  std::size_t watched_events() const;

 private:
  StateFollower() = default;
  void Loop();

  std::shared_ptr<etcd::Client> client_;
  std::string prefix_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<EtcdStateStore> store_;  // under mu_
  std::int64_t applied_ = 0;               // under mu_: the revision the index reflects
  Status broken_;                          // under mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace aryl::daemon
