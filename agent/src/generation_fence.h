// GenerationFence: the newest scheduler generation this agent has seen per
// job. A StartWorkers or NewGeneration for an older one was overtaken (a
// message queued from before a restart elsewhere, or a late copy of one) and
// is refused (docs/architecture.md, "Leases and fencing").
//
// Pure. Thread safety: none; AgentCore (agent_core.h) keeps one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "aryl/protocol/messages.h"

namespace aryl::agent {

class GenerationFence {
 public:
  // Whether `generation` of `job` is older than one seen here (then `*newest`,
  // when given, is the newest seen); otherwise remembers it.
  bool Stale(protocol::JobId job, std::int64_t generation, std::int64_t* newest = nullptr) {
    auto [it, fresh] = newest_.try_emplace(job, generation);
    if (!fresh && generation < it->second) {
      if (newest) *newest = it->second;
      return true;
    }
    it->second = generation;
    if (newest_.size() > kMaxJobs) newest_.erase(newest_.begin());
    return false;
  }

 private:
  static constexpr std::size_t kMaxJobs = 100000;
  std::map<protocol::JobId, std::int64_t> newest_;
};

}  // namespace aryl::agent
