// MakePolicy: policy names to implementations.
#include <functional>
#include <map>

#include "aryl/sched/policy.h"
#include "aryl/sched/scheduler.h"
#include "policies.h"

namespace aryl::sched {
namespace {

using Factory = std::function<std::unique_ptr<Policy>(const SchedulerConfig&, ReclaimStrategy)>;

const std::map<std::string, Factory>& Registry() {
  static const auto* registry = new std::map<std::string, Factory>{
      {"aryl", policy::MakeAryl},
      {"baseline", policy::MakeBaseline},
      {"loan-only", policy::MakeLoanOnly},
      {"elastic-only", policy::MakeElasticOnly},
      {"optimus", policy::MakeOptimus},
      {"afs", policy::MakeAfs},
      {"tiresias", policy::MakeTiresias},
  };
  return *registry;
}

}  // namespace

std::vector<std::string> PolicyNames() {
  return {"aryl", "baseline", "loan-only", "elastic-only", "optimus", "afs", "tiresias"};
}

std::vector<std::string> ReclaimStrategyNames() {
  return {"greedy", "random", "fewest-gpus", "exact"};
}

Result<std::unique_ptr<Policy>> MakePolicy(const std::string& name, const SchedulerConfig& config) {
  std::string base = name;
  ReclaimStrategy strategy = ReclaimStrategy::kGreedy;
  if (auto colon = name.find(':'); colon != std::string::npos) {
    base = name.substr(0, colon);
    ARYL_ASSIGN_OR_RETURN(strategy, ParseReclaimStrategy(name.substr(colon + 1)));
  }
  auto it = Registry().find(base);
  if (it == Registry().end()) {
    std::string known;
    for (const auto& n : PolicyNames()) known += (known.empty() ? "" : ", ") + n;
    return Status::NotFound("unknown policy '" + base + "' (known: " + known + ")");
  }
  return it->second(config, strategy);
}

}  // namespace aryl::sched
