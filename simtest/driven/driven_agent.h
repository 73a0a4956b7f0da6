// DrivenAgent: one agent of the driven cluster (driven_cluster.h), as the
// cluster keeps it: aryl-agent's AgentCore and its in-memory workers, and
// aryl-agent's SessionCore (its standing with the scheduler), and the
// harness's state around them (the wire's cuts, the process).
//
// Thread safety: none; the cluster's one thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent_core.h"
#include "aryl/clock.h"
#include "aryl/protocol/messages.h"
#include "lease.h"
#include "memory_workers.h"
#include "session_core.h"

namespace aryl::daemon::testing {

namespace p = aryl::protocol;

// One agent: aryl-agent's own AgentCore (agent/src/agent_core.h) deciding
// what to do on every command, on the lease and on every worker's end, over
// in-memory workers (memory_workers.h), and its own SessionCore
// (agent/src/session_core.h) deciding when to register and heartbeat, what
// renews the lease, which scheduler messages are fenced off and what an
// Error means; around them the harness's wire to the daemon (the ZeroMQ
// client's part in the binary) and its faults.
struct DrivenAgent {
  p::AgentRegister reg;  // who it is (its workers and exits are the core's)
  std::vector<p::Message> received;  // every command, in order
  // Cut off: a crashed or partitioned agent (silent) sends nothing and hears
  // nothing; a one-way partition loses only what it sends (mute) or only
  // what it is sent (deaf).
  bool silent = false;
  bool mute = false;
  bool deaf = false;
  // The agent's process is dead (CrashAgent) until set false again: a new
  // process then registers.
  bool down = false;
  bool Sends() const { return !silent && !mute && !down; }
  bool Hears() const { return !silent && !deaf && !down; }
  // The wire client's matching of answers to requests: the newest
  // registration's correlation (an answer to an older try is dropped, as the
  // ZeroMQ client drops it).
  std::string register_correlation;

  // The agent's process: its workers, its standing with the scheduler (the
  // lease the core checks is the session's), its link to the wire and its
  // logic.
  std::unique_ptr<MemoryWorkers> host;
  std::unique_ptr<agent::SessionCore> session;
  std::unique_ptr<agent::SchedulerLink> link;
  std::unique_ptr<agent::AgentCore> core;
  int in_core = 0;  // inside a call of the core: exits wait to be reaped (InCore)

  // A new process (the first, or one after a crash, of instance
  // reg.instance): its session (unregistered), core, link and workers, none
  // running. `send` puts a message on the wire to the daemon;
  // `on_term` is what a worker does with its SIGTERM.
  void StartProcess(const Clock& clock, MemoryWorkers::OnTerm on_term, std::function<void(const p::Message&)> send);

  // The workers it runs and the exits not yet acknowledged (the core's).
  std::vector<p::RunningWorker> Workers() const { return core->workers().Running(); }
  const agent::ExitBook& exits() const { return core->exits(); }
};

// A call into an agent's core: the exits its workers make meanwhile wait to
// be reaped until it returns (the core's tables are not changed under it).
class InCore {
 public:
  explicit InCore(DrivenAgent& a) : a_(a) { ++a_.in_core; }
  ~InCore() { --a_.in_core; }
  InCore(const InCore&) = delete;
  InCore& operator=(const InCore&) = delete;

 private:
  DrivenAgent& a_;
};

}  // namespace aryl::daemon::testing
