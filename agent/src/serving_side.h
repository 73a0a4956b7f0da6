// ServingSide: runs the operator's serving hooks for an inference agent, as
// ServingMachine (aryl/agent/serving_machine.h) decides: each hook a child
// process (sh -c) with its timeout, the supervised serving process, and the
// ready URL probed off the agent's loop (one probe in flight, 1 s timeout,
// every 0.5 s). Tick() is called from the agent's loop; it never blocks.
//
// Thread safety: the agent's loop only (the probe runs on its own thread and
// is read back through a future).
#pragma once

#include <future>
#include <memory>
#include <optional>
#include <string>

#include "aryl/agent/agent.h"
#include "aryl/agent/process.h"
#include "aryl/agent/serving_machine.h"
#include "aryl/protocol/messages.h"

namespace aryl::agent {

// Parses http://host[:port][/path]; InvalidArgument names the flag.
struct HttpUrl {
  std::string host;
  int port = 80;
  std::string path = "/";
};
Result<HttpUrl> ParseHttpUrl(const std::string& flag, const std::string& url);

class ServingSide {
 public:
  // The agent's serving side, or null without --serving-start;
  // InvalidArgument names the flag at fault.
  static Result<std::unique_ptr<ServingSide>> Create(const AgentOptions& options, protocol::Pool pool);
  explicit ServingSide(ServingOptions options);
  ~ServingSide();

  // The scheduler's ServingCommand (protocol/serving.h, S2).
  void Command(bool lend);
  // Runs what is due; true when the state changed (a ServingReport to send,
  // S3). Without a command by `started` + kServingUnregisteredStartSeconds,
  // serves (S1).
  bool Tick(double now, double started);
  protocol::ServingStatus Status() const;
  const ServingMachine& machine() const { return machine_; }

 private:
  enum class Running { kNone, kStart, kDrain, kStop };
  void Begin(ServingMachine::Step step, double now);
  void Finish(int exit_code, const std::string& why, double now);
  Result<pid_t> Hook(const std::string& command);

  ServingOptions opt_;
  std::optional<HttpUrl> ready_url_;  // opt_.ready_url, parsed once
  ServingMachine machine_;
  ProcessLauncher launcher_;
  Running running_ = Running::kNone;
  pid_t hook_pid_ = 0;        // the step's hook
  double hook_deadline_ = 0;
  pid_t server_pid_ = 0;      // supervised mode: the serving process
  double start_deadline_ = 0;  // start hook plus readiness
  std::optional<std::future<std::string>> probe_;  // "" when ready, else why not
  double next_probe_ = 0;
  std::string last_probe_error_;
};

}  // namespace aryl::agent
