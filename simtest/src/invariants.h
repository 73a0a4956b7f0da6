// The invariants of live_sim.h (I1-I6), as code: Check() after every event,
// CheckReclaim() once a reclaim's stops have surely arrived, and Violate()
// for whatever else a part of the simulation finds wrong ("T": a transition
// the JobMachine refused). Only the first violation of each invariant in a
// run is kept; the later ones follow from it.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "aryl/simtest/live_sim.h"

namespace aryl::simtest {

class Network;
class Workers;
struct JobTruth;

class InvariantChecker {
 public:
  InvariantChecker(Network& net, const JobTruth& job, const Workers& workers)
      : net_(net), job_(job), workers_(workers) {}

  // I1-I4, after every event.
  void Check();
  // I5: no worker started before `started_before` is still alive on `agent`
  // (the server a reclaim returned).
  void CheckReclaim(int agent, std::int64_t started_before);
  // I6, once the run is over without a violation.
  void CheckEnded(double horizon);

  void Violate(const std::string& invariant, const std::string& what);

  std::size_t count() const { return violations_.size(); }
  std::vector<Violation> TakeViolations() { return std::move(violations_); }

 private:
  Network& net_;
  const JobTruth& job_;
  const Workers& workers_;
  std::vector<Violation> violations_;
  std::set<std::string> violated_;
  std::map<std::int64_t, std::int64_t> max_gen_seen_;  // per worker (I1)
};

}  // namespace aryl::simtest
