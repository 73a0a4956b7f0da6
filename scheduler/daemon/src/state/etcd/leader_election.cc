#include "state/etcd/leader_election.h"

#include <unistd.h>

#include <chrono>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace aryl::daemon {

using json = nlohmann::json;

LeaderElection::LeaderElection(std::shared_ptr<etcd::Client> client, ElectionOptions options)
    : client_(std::move(client)), opt_(std::move(options)), leader_key_(opt_.prefix + "leader") {
  keepalive_ = std::thread([this] { KeepAliveLoop(); });
  health_ = std::thread([this] { HealthLoop(); });
}

void LeaderElection::HealthLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    json members = json::array();
    for (const auto& h : client_->Health())
      members.push_back({{"endpoint", h.endpoint}, {"healthy", h.healthy}, {"round_trip_ms", h.round_trip_ms},
                         {"error", h.error}, {"raft_term", h.raft_term}, {"leader", h.leader}});
    lock.lock();
    health_json_ = members.dump();
    cv_.wait_for(lock, std::chrono::seconds(2), [&] { return stopping_; });
  }
}

LeaderElection::~LeaderElection() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
  if (health_.joinable()) health_.join();
}

double LeaderElection::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status LeaderElection::EnsureLease() {
  if (lease_.load() != 0) return Status::Ok();
  double sent = Now();
  ARYL_ASSIGN_OR_RETURN(std::int64_t id, client_->LeaseGrant(opt_.ttl_seconds));
  valid_until_ = sent + static_cast<double>(opt_.ttl_seconds);
  lease_ = id;
  cv_.notify_all();
  return Status::Ok();
}

void LeaderElection::KeepAliveLoop() {
  std::unique_lock lock(mu_);
  const auto every = std::chrono::milliseconds(std::max<std::int64_t>(100, opt_.ttl_seconds * 1000 / 3));
  while (!stopping_) {
    cv_.wait_for(lock, every, [&] { return stopping_ || probe_; });
    if (stopping_) break;
    probe_ = false;
    std::int64_t id = lease_.load();
    if (id == 0) continue;
    lock.unlock();
    double sent = Now();
    auto ttl = client_->LeaseKeepAlive(id);
    lock.lock();
    if (ttl.ok() && *ttl > 0) {
      valid_until_ = sent + static_cast<double>(*ttl);
      if (write_failed_at_.load() >= 0 && sent > write_failed_at_.load()) write_failed_at_ = -1;
      if (!why_.empty() && !deposed_ && write_failed_at_.load() < 0) {
        spdlog::info("etcd answers again: lease {:x} kept", id);
        why_.clear();
      }
    } else if (ttl.ok() || ttl.status().IsNotFound()) {
      // etcd expired the lease: the leader key bound to it is gone.
      std::string why = "the etcd lease " + fmt::format("{:x}", id) + " expired (no keep-alive for its TTL of " +
                        std::to_string(opt_.ttl_seconds) + " s)";
      lease_ = 0;
      if (leading_ && !deposed_) {
        spdlog::error("deposed: {}", why);
        deposed_ = true;
      }
      why_ = why;
    } else if (why_ != ttl.status().ToString()) {
      why_ = ttl.status().ToString();
      spdlog::warn("etcd lease keep-alive failed: {}", why_);
    }
  }
}

Status LeaderElection::Campaign(const std::atomic<bool>& stop,
                                const std::function<void(const std::string&, std::uint64_t)>& on_leader) {
  std::string seen_leader = "\x01";
  std::uint64_t seen_term = 0;
  auto report = [&](const std::string& endpoint, std::uint64_t term) {
    if (endpoint == seen_leader && term == seen_term) return;
    seen_leader = endpoint;
    seen_term = term;
    ++leader_changes_;
    if (on_leader) on_leader(endpoint, term);
  };
  double backoff = 0.1;
  auto pause = [&] {
    for (double t = 0; t < backoff && !stop; t += 0.05) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    backoff = std::min(backoff * 2, 2.0);
  };
  while (!stop) {
    Status st = EnsureLease();
    if (!st.ok()) {
      spdlog::warn("campaign: cannot get an etcd lease: {}", st.ToString());
      report("", 0);
      pause();
      continue;
    }
    json me = {{"endpoint", opt_.endpoint}, {"name", opt_.name}, {"pid", ::getpid()}};
    etcd::TxnRequest txn;
    etcd::Compare absent;
    absent.key = leader_key_;
    absent.target = etcd::Compare::Target::kCreate;
    absent.result = etcd::Compare::Result::kEqual;
    absent.number = 0;
    txn.compare.push_back(absent);
    txn.success.push_back(etcd::Op::Put(leader_key_, me.dump(), lease_.load()));
    txn.failure.push_back(etcd::Op::Get(leader_key_));
    auto r = client_->Txn(txn);
    if (!r.ok()) {
      // An unknown lease (expired while etcd was away) is granted anew.
      if (r.status().IsNotFound() || r.status().message().find("lease not found") != std::string::npos) lease_ = 0;
      spdlog::warn("campaign: {}", r.status().ToString());
      report("", 0);
      pause();
      continue;
    }
    backoff = 0.1;
    if (r->succeeded) {
      term_ = static_cast<std::uint64_t>(r->revision);
      deposed_ = false;
      write_failed_at_ = -1;
      leading_ = true;
      {
        std::lock_guard lock(mu_);
        why_.clear();
      }
      ++leader_changes_;
      spdlog::info("elected leader (term {}) of {}", term_.load(), opt_.prefix);
      return Status::Ok();
    }
    // Someone leads: report it and wait for its key to go.
    std::int64_t from = r->revision + 1;
    if (!r->ranges.empty() && !r->ranges[0].kvs.empty()) {
      const auto& kv = r->ranges[0].kvs[0];
      std::string endpoint;
      try {
        endpoint = json::parse(kv.value).value("endpoint", "");
      } catch (const std::exception&) {
      }
      report(endpoint, static_cast<std::uint64_t>(kv.create_revision));
      from = kv.mod_revision + 1;
    }
    bool gone = false;
    while (!stop && !gone) {
      Status w = client_->Watch(
          leader_key_, "", from,
          [&](const std::vector<etcd::WatchEvent>& events, std::int64_t) {
            for (const auto& e : events) {
              if (e.type == etcd::WatchEvent::Type::kDelete) gone = true;
              from = std::max(from, e.kv.mod_revision + 1);
            }
            return !gone;
          },
          stop, 2.0);
      if (!w.ok()) {
        // Compacted past our revision, or etcd away: read the key again.
        const bool compacted = w.code() == Status::Code::kOutOfRange;
        if (!compacted) spdlog::debug("watch {}: {}", leader_key_, w.ToString());
        if (!compacted) pause();
        break;
      }
    }
  }
  return Status::Cancelled("campaign stopped");
}

void LeaderElection::Resign() {
  std::int64_t id = lease_.load();
  if (leading_ && term_ != 0) {
    etcd::TxnRequest txn;
    etcd::Compare ours;
    ours.key = leader_key_;
    ours.target = etcd::Compare::Target::kCreate;
    ours.result = etcd::Compare::Result::kEqual;
    ours.number = static_cast<std::int64_t>(term_.load());
    txn.compare.push_back(ours);
    txn.success.push_back(etcd::Op::Delete(leader_key_));
    auto r = client_->Txn(txn);
    if (!r.ok()) spdlog::warn("resign: {}", r.status().ToString());
    else if (r->succeeded) spdlog::info("resigned the leadership (term {})", term_.load());
  }
  leading_ = false;
  if (id != 0) {
    Status st = client_->LeaseRevoke(id);
    if (!st.ok()) spdlog::debug("revoke lease: {}", st.ToString());
    lease_ = 0;
  }
}

bool LeaderElection::CanDecide() const {
  if (!leading_ || deposed_ || write_failed_at_.load() >= 0) return false;
  // A margin for the clocks of this host and etcd's leader running apart.
  const double margin = std::max(0.2, 0.1 * static_cast<double>(opt_.ttl_seconds));
  return Now() < valid_until_.load() - margin;
}

void LeaderElection::WriteFailed(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (write_failed_at_.load() < 0) spdlog::warn("a state write failed ({}): not deciding until etcd answers", why);
    write_failed_at_ = Now();
    why_ = why;
    probe_ = true;
    ++write_failures_;
  }
  cv_.notify_all();
}

void LeaderElection::MarkDeposed(const std::string& why) {
  std::lock_guard lock(mu_);
  if (!deposed_) spdlog::error("deposed: {}", why);
  deposed_ = true;
  why_ = why;
}

std::string LeaderElection::Why() const {
  if (CanDecide()) return "";
  std::lock_guard lock(mu_);
  if (deposed_) return "deposed: " + why_;
  if (!leading_) return "not the leader";
  if (write_failed_at_.load() >= 0)
    return "a state write found etcd unavailable " + fmt::format("{:.1f}", Now() - write_failed_at_.load()) +
           " s ago, and etcd has not confirmed this scheduler's lease since" + (why_.empty() ? "" : " (" + why_ + ")");
  return "etcd has not confirmed this scheduler's lease for " +
         fmt::format("{:.1f}", Now() - (valid_until_.load() - static_cast<double>(opt_.ttl_seconds))) + " s" +
         (why_.empty() ? "" : " (" + why_ + ")");
}

double LeaderElection::etcd_round_trip_seconds() const { return client_->last_round_trip_ms() / 1000.0; }

std::string LeaderElection::StandbyMetrics(std::uint64_t leader_term) const {
  return fmt::format(
      "# HELP aryl_leader 1 while this scheduler leads and may decide; 0 frozen (etcd unreachable)\n"
      "# TYPE aryl_leader gauge\naryl_leader 0\n"
      "# HELP aryl_leader_term The leader's term: the etcd leader key's create revision\n"
      "# TYPE aryl_leader_term gauge\naryl_leader_term {}\n"
      "# HELP aryl_leader_changes_total Leader changes this scheduler has seen (as a standby, or by winning)\n"
      "# TYPE aryl_leader_changes_total counter\naryl_leader_changes_total {}\n"
      "# HELP aryl_etcd_round_trip_seconds Round trip of the last successful etcd request\n"
      "# TYPE aryl_etcd_round_trip_seconds gauge\naryl_etcd_round_trip_seconds {}\n",
      leader_term, leader_changes_.load(), etcd_round_trip_seconds());
}

std::string LeaderElection::StatusJson() const {
  json j;
  j["mode"] = deposed_ ? "deposed" : CanDecide() ? "leading" : leading_ ? "frozen" : "standby";
  j["term"] = term_.load();
  j["leader_key"] = leader_key_;
  j["name"] = opt_.name;
  j["endpoint"] = opt_.endpoint;
  j["lease_ttl_seconds"] = opt_.ttl_seconds;
  j["lease_valid_for_seconds"] = std::max(0.0, valid_until_.load() - Now());
  j["why"] = Why();
  j["etcd_round_trip_ms"] = client_->last_round_trip_ms();
  std::lock_guard lock(mu_);
  j["etcd"] = json::parse(health_json_);
  return j.dump();
}

}  // namespace aryl::daemon
