// LocalCoordinator: plays the agent's part for one job on one machine.
//
// It serves the job's rendezvous store (a c10d TCPStore on loopback, in this
// process, so it outlives every worker), launches workers as real processes
// (fork/exec, ARYL_* environment plus torchrun's RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_RUN_ID as of the worker's start;
// own log file each; each gets SIGKILL when
// the coordinator's thread dies, PR_SET_PDEATHSIG) and announces
// generations exactly as the agent does (see the protocol in aryl/runtime.h),
// numbering its plans as the scheduler does (aryl/protocol/generation.h).
// Used by the runtime tests, the benchmarks and aryl-rt-launch.
//
// Thread safety: not thread-safe; one driver thread.
#pragma once

#include <sys/types.h>

#include <mutex>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl {

class JobStore;

struct CoordinatorOptions {
  std::string job_id = "local";
  std::vector<std::string> worker_argv;        // program and arguments
  std::map<std::string, std::string> env;      // extra environment for every worker
  std::string log_dir;                         // "<log_dir>/<worker>.log"; empty: inherit stdout/stderr
  std::string backend = "gloo";
  std::string checkpoint_dir;
  // Where the rendezvous store is served: the project's store over ZeroMQ
  // ("tcp://127.0.0.1:*", the agent's kind) or, with "c10d", a c10d TCPStore.
  std::string store = "tcp://127.0.0.1:*";
  // Non-empty: connect to this running store (the project's, "tcp://...")
  // instead of serving one in this process (tests of a store that dies).
  std::string external_store;
  std::chrono::milliseconds timeout{60000};    // store and readiness waits
  // Agent mode: also serve the worker <-> agent messages on an ipc:// endpoint
  // (ARYL_AGENT_ENDPOINT): answer WorkerHello, push GenerationAnnounce, collect
  // reports. Announcements then travel only as messages, not as store keys.
  // Worker and job ids are numeric in this mode (job_id must be a number).
  bool agent = false;
};

// What the agent side received from workers (agent mode).
struct AgentMessageCounts {
  int hellos = 0;
  int resize_reports = 0;
  int progress = 0;
  int leaves = 0;
};

class LocalCoordinator {
 public:
  static Result<std::unique_ptr<LocalCoordinator>> Start(CoordinatorOptions options);
  ~LocalCoordinator();  // SIGKILLs workers still running

  // A fresh generation (prev = 0) of `world` new workers.
  Status Launch(int world);
  // A planned change to `world` workers: joiners are started and awaited
  // (ready keys) before the announcement; leavers are the last members.
  // Returns the new generation.
  Result<int64_t> Resize(int world);
  // What the scheduler does when a worker is lost: a planned generation of
  // the other members plus one joiner (started here), whether or not the
  // survivors already regrouped without `worker`. Returns the new generation.
  Result<int64_t> Replace(const std::string& worker);
  Status Kill(const std::string& worker, int signal);
  // Sends `signal` to every running worker; returns how many it reached.
  int SignalAll(int signal);
  Result<pid_t> Pid(const std::string& worker) const;
  Status RequestCheckpoint();
  Status RequestStop();
  Status ClearStop();

  // Committed steps reported by rank 0 (-1 before the first).
  int64_t Progress();
  Status WaitProgress(int64_t step, std::chrono::milliseconds timeout);
  // Reaps exited workers without blocking; true when none is left running.
  bool Reap();
  // Waits until every worker exited; exit codes by worker id (128+signal when killed).
  Status WaitAll(std::chrono::milliseconds timeout);
  const std::map<std::string, int>& exit_codes() const { return exit_codes_; }
  // Running workers' process ids by worker id.
  const std::map<std::string, pid_t>& running() const { return running_; }
  // Members of the newest generation.
  Result<std::vector<std::string>> Members();
  const std::string& store_endpoint() const;
  JobStore& store() { return *store_; }
  std::string LogPath(const std::string& worker) const;
  AgentMessageCounts agent_counts() const;

 private:
  LocalCoordinator(CoordinatorOptions options, std::unique_ptr<JobStore> store);
  Result<int64_t> Plan(int world, const std::string& lost);
  Status Spawn(const std::string& worker, const struct GenerationRecord& rec);
  std::string NewWorkerId();
  Status StartAgent();
  Status Announce(const struct GenerationRecord& rec, const std::vector<std::string>& to);
  struct Agent;
  std::unique_ptr<Agent> agent_;

  CoordinatorOptions opt_;
  std::unique_ptr<JobStore> store_;
  std::map<std::string, pid_t> running_;
  std::map<std::string, int> exit_codes_;
  int next_worker_ = 0;
  int64_t master_port_gen_ = -1;  // MASTER_PORT is chosen once per generation
  int master_port_ = 0;
  int64_t plans_ = 0;  // this coordinator numbers the plans (aryl/protocol/generation.h)
};

}  // namespace aryl
