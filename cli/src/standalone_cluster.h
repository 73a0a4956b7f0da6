// The one-machine cluster of `aryl-run --standalone` (like torchrun
// --standalone): a scheduler and agents embedded in this process.
//
//   1. Start() makes the work dir, a fresh 0700 directory for the scheduler's
//      socket (only this account reaches it), a fresh state file unless one is
//      given (the previous run's logs move to logs.N), starts the scheduler
//      with fast heartbeats, then a training agent with `slots` slots and,
//      with `loan_slots`, an inference agent whose slots are loaned to
//      training when inference demand is low. Each agent runs on a thread.
//   2. WaitForAgents() holds the submission until every agent is connected
//      (10 s at most), so a job that needs all of them is not refused for a
//      size the cluster is about to have.
//   3. Stop() (also the destructor) stops the agents, joins their threads,
//      stops the scheduler and removes the socket's directory.
//
// A bad work dir (or no temporary directory) is a usage error: Start() prints
// it and exits, as aryl-run does for a bad flag. A scheduler or agent that
// does not start is Start()'s error.
//
// Thread safety: one thread calls Start(), WaitForAgents() and Stop(); the
// agents' threads are this object's own.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "aryl/result.h"

namespace aryl::agent {
class Agent;
}
namespace aryl::daemon {
class Daemon;
}
namespace aryl::protocol {
class SchedulerClient;
}

namespace aryl::cli {

struct StandaloneOptions {
  std::string work_dir = "aryl-run";  // logs (work_dir/logs) and the default state file
  std::string state_path;             // empty: a fresh work_dir/state.db
  int http_port = -1;                 // metrics/status port (-1: off)
  std::string inference_demand;       // the inference agent's demand curve (FILE or daily:...)
  double demand_time_scale = 1;       // demand-curve seconds per wall second
  int slots = 0;                      // the training agent's slots (>= 1)
  int loan_slots = 0;                 // the loanable inference agent's slots (0: none)
  std::string gpu_type;               // the agents' GPU type (empty: "cpu")
  // --log-level or $ARYL_LOG chose a level: keep it (else warnings and errors only).
  bool log_level_chosen = false;
  bool quiet = false;  // no lines about the cluster itself
};

class StandaloneCluster {
 public:
  // `program` prefixes the lines printed to stderr.
  StandaloneCluster(std::string program, StandaloneOptions options);
  ~StandaloneCluster();  // Stop()
  StandaloneCluster(const StandaloneCluster&) = delete;
  StandaloneCluster& operator=(const StandaloneCluster&) = delete;

  Status Start();
  // Returns once every agent is connected, after 10 s, or once `interrupts`
  // is non-zero (a signal asked to stop); each request waits up to `per_try`.
  void WaitForAgents(protocol::SchedulerClient& client, std::chrono::milliseconds per_try,
                     const std::atomic<int>& interrupts) const;
  void Stop();

  const std::string& endpoint() const;                  // the scheduler's (after Start())
  const std::string& log_dir() const { return log_dir_; }  // the agents' log dir

 private:
  Status AddAgent(const std::string& id, const std::string& pool, int slots);

  const std::string program_;
  const StandaloneOptions options_;
  std::unique_ptr<daemon::Daemon> daemon_;
  std::vector<std::unique_ptr<agent::Agent>> agents_;
  std::vector<std::thread> agent_threads_;
  std::string log_dir_;
  std::string socket_dir_;  // holds the scheduler's socket; removed by Stop()
  bool stopped_ = false;
};

}  // namespace aryl::cli
