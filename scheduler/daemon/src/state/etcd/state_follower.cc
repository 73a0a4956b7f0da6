#include "state/etcd/state_follower.h"

#include <chrono>

#include <spdlog/spdlog.h>

namespace aryl::daemon {

Result<std::unique_ptr<StateFollower>> StateFollower::Start(std::shared_ptr<etcd::Client> client,
                                                            EtcdStateStore::Options options) {
  std::unique_ptr<StateFollower> f(new StateFollower());
  f->client_ = client;
  f->prefix_ = options.prefix;
  options.term = 0;
  options.on_deposed = nullptr;
  options.on_unavailable = nullptr;
  options.may_write = [] { return false; };  // a follower never writes
  ARYL_ASSIGN_OR_RETURN(f->store_, EtcdStateStore::Open(std::move(client), std::move(options)));
  f->applied_ = f->store_->revision();
  f->thread_ = std::thread([raw = f.get()] { raw->Loop(); });
  return f;
}

StateFollower::~StateFollower() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void StateFollower::Loop() {
  const std::string begin = prefix_ + "s/";
  const std::string end = etcd::PrefixEnd(begin);
  while (!stop_) {
    std::int64_t from;
    {
      std::lock_guard lock(mu_);
      from = applied_ + 1;
    }
    Status w = client_->Watch(
        begin, end, from,
        [&](const std::vector<etcd::WatchEvent>& batch, std::int64_t) {
          std::lock_guard lock(mu_);
          Status st = store_->ApplyWatched(batch);
          if (!st.ok()) {
            broken_ = st;
            cv_.notify_all();
            return false;
          }
          applied_ = store_->revision();
          cv_.notify_all();
          return true;
        },
        stop_, 3600);
    {
      std::lock_guard lock(mu_);
      if (!broken_.ok()) break;
      if (!w.ok() && !w.IsUnavailable() && !w.IsTimeout()) {
        // Compacted past what was applied (OutOfRange): the changes in
        // between are gone.
        broken_ = w.WithContext("following " + begin);
        cv_.notify_all();
        break;
      }
    }
    // etcd away (no quorum, every member down): watch again from the same
    // revision once it answers; nothing is missed while it is away.
    if (!w.ok())
      for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::lock_guard lock(mu_);
  if (!broken_.ok()) spdlog::warn("standby: stopped following the state ({}); a takeover reads it whole",
                                  broken_.ToString());
}

Result<std::unique_ptr<EtcdStateStore>> StateFollower::TakeOver(EtcdStateStore::Options leader, double timeout_s) {
  if (leader.term <= 0) return Status::InvalidArgument("StateFollower::TakeOver: a leader's term is > 0");
  {
    std::lock_guard lock(mu_);
    if (!broken_.ok()) return broken_;
  }
  // The marker: fenced by the new term, so it lands after every write of an
  // earlier leader (3. above).
  etcd::TxnRequest txn;
  etcd::Compare ours;
  ours.key = prefix_ + "leader";
  ours.target = etcd::Compare::Target::kCreate;
  ours.result = etcd::Compare::Result::kEqual;
  ours.number = leader.term;
  txn.compare.push_back(ours);
  txn.success.push_back(etcd::Op::Put(prefix_ + "s/meta/leader_term", std::to_string(leader.term)));
  ARYL_ASSIGN_OR_RETURN(etcd::TxnResult marker, client_->Txn(txn));
  if (!marker.succeeded)
    return Status::FailedPrecondition("the leader key is no longer term " + std::to_string(leader.term) + "'s");
  std::unique_lock lock(mu_);
  const bool caught_up = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    return applied_ >= marker.revision || !broken_.ok();
  });
  if (!broken_.ok()) return broken_;
  if (!caught_up)
    return Status::Timeout("the watch applied revision " + std::to_string(applied_) + " of " +
                           std::to_string(marker.revision) + " within " + std::to_string(timeout_s) + " s");
  stop_ = true;
  lock.unlock();
  if (thread_.joinable()) thread_.join();
  ARYL_RETURN_IF_ERROR(store_->Lead(std::move(leader)));
  return std::move(store_);
}

std::size_t StateFollower::loaded_keys() const {
  std::lock_guard lock(mu_);
  return store_ ? store_->loaded_keys() : 0;
}

std::size_t StateFollower::watched_events() const {
  std::lock_guard lock(mu_);
  return store_ ? store_->watched_events() : 0;
}

}  // namespace aryl::daemon
