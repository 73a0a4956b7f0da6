// The wire between the driven cluster's agents and its daemon, with the faults
// a real network and its reconnections show: a message may be lost, arrive
// twice (a resend whose original was not lost), or arrive late, after messages
// sent behind it. One seed draws every fault, so a run replays bit for bit.
//
// Clients' requests (DrivenCluster::Call) do not cross it.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "aryl/protocol/messages.h"

namespace aryl::daemon::testing {

struct NetworkFaults {
  double loss = 0;       // probability that a message is lost
  double duplicate = 0;  // probability that it arrives twice
  double max_delay = 0;  // s: each copy is late by a uniform [0, max_delay]
  double lag = 0;        // s: a stalled link, the same with [0, lag] where longer
  std::uint64_t seed = 1;
  bool any() const { return loss > 0 || duplicate > 0 || max_delay > 0 || lag > 0; }
  double most_late() const { return max_delay > lag ? max_delay : lag; }
};

class FaultyNetwork {
 public:
  struct Flight {
    bool to_daemon = false;
    std::string agent;        // the sender, or the addressee
    std::string correlation;  // a reply to this request (an agent's registration)
    protocol::Message msg;
    // The agent process's ZeroMQ route ("<id>#<instance>", as AgentRoute's
    // "<id>#<random>"): what the daemon addressed, or the sender's.
    std::string route;
  };

  void Set(const NetworkFaults& f) {
    faults_ = f;
    rng_.seed(f.seed);
  }
  const NetworkFaults& faults() const { return faults_; }

  // The copies of `f` that arrive now (0, 1 or 2); late ones wait in the
  // network until TakeDue.
  std::vector<Flight> Send(Flight f, double now) {
    std::vector<Flight> out;
    if (!faults_.any()) {
      out.push_back(std::move(f));
      return out;
    }
    ++sent_;
    if (Draw() < faults_.loss) {
      ++lost_;
      return out;
    }
    const int copies = Draw() < faults_.duplicate ? 2 : 1;
    duplicated_ += copies - 1;
    for (int i = 0; i < copies; ++i) {
      const double delay = faults_.most_late() > 0 ? Draw() * faults_.most_late() : 0;
      if (delay <= 0) {
        out.push_back(f);
      } else {
        late_.emplace(std::pair(now + delay, ++order_), f);
      }
    }
    return out;
  }

  // The late copies whose time has come, in arrival order.
  std::vector<Flight> TakeDue(double now) {
    std::vector<Flight> out;
    while (!late_.empty() && late_.begin()->first.first <= now + 1e-9) {
      out.push_back(std::move(late_.begin()->second));
      late_.erase(late_.begin());
    }
    return out;
  }

  std::uint64_t sent() const { return sent_; }
  std::uint64_t lost() const { return lost_; }
  std::uint64_t duplicated() const { return duplicated_; }

 private:
  double Draw() { return std::uniform_real_distribution<double>(0, 1)(rng_); }

  NetworkFaults faults_;
  std::mt19937_64 rng_{1};
  std::map<std::pair<double, std::uint64_t>, Flight> late_;  // by arrival time, then send order
  std::uint64_t order_ = 0, sent_ = 0, lost_ = 0, duplicated_ = 0;
};

}  // namespace aryl::daemon::testing
