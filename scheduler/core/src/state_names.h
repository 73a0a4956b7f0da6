// Internal: how ClusterState's errors name jobs, servers and placements
// (state.cc, state_rules.cc).
#pragma once

#include <sstream>
#include <string>

#include "aryl/sched/types.h"

namespace aryl::sched::internal {

inline std::string JobName(JobId id) { return "job " + std::to_string(id); }
inline std::string ServerName(ServerId id) { return "server " + std::to_string(id); }

inline std::string PlacementString(const Placement& p) {
  std::ostringstream os;
  os << "{";
  bool first = true;
  for (const auto& [s, n] : p) {
    os << (first ? "" : ", ") << s << ":" << n;
    first = false;
  }
  os << "}";
  return os.str();
}

}  // namespace aryl::sched::internal
