// One agent of the driven cluster (driven_agent.h).
#include "driven_agent.h"

#include "aryl/agent/agent.h"

namespace aryl::daemon::testing {

namespace {

// The core's link to the daemon: the driven agent's session (its standing
// and lease) and wire (SchedulerSession's part in the binary).
class AgentLink final : public agent::SchedulerLink {
 public:
  AgentLink(DrivenAgent& a, std::function<void(const p::Message&)> send) : a_(a), send_(std::move(send)) {}
  bool registered() const override { return a_.session->registered(); }
  void Send(const p::Message& m) override { send_(m); }
  agent::SchedulerLease& lease() override { return a_.session->lease(); }

 private:
  DrivenAgent& a_;
  std::function<void(const p::Message&)> send_;
};

}  // namespace

void DrivenAgent::StartProcess(const Clock& clock, MemoryWorkers::OnTerm on_term,
                               std::function<void(const p::Message&)> send) {
  host = std::make_unique<MemoryWorkers>(clock, std::move(on_term));
  // One scheduler: no failover. A registration waits aryl-agent's request timeout.
  session = std::make_unique<agent::SessionCore>(reg.instance, /*several_schedulers=*/false,
                                                 agent::AgentOptions{}.request_timeout);
  register_correlation.clear();
  link = std::make_unique<AgentLink>(*this, std::move(send));
  core = std::make_unique<agent::AgentCore>(reg, agent::AgentOptions{}.leave_timeout, clock, *link, *host);
}

}  // namespace aryl::daemon::testing
