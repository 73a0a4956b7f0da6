// Agent: one per server (aryl-agent). Registers its GPUs (or CPU slots) and
// pool with the scheduler, heartbeats, launches and stops workers, and reports
// how they end.
//
// Agent ↔ scheduler, numbered as in protocol/messages.h:
//  1. AgentRegister {id, host, pool, gpu type, slots, workers already running}
//     until AgentRegistered arrives (retried every second; requests time out).
//     With several schedulers (--scheduler tcp://a:7117,tcp://b:7117) it goes
//     through protocol::SchedulerClient: a standby's answer names the leader,
//     a dead one is passed over for the next. A leader whose HeartbeatAcks stop
//     for max(3 heartbeat intervals, 2 s) is left the same way (the workers
//     keep running meanwhile, bounded by the lease); each move is logged as
//     "scheduler tcp://a:7117 -> tcp://b:7117 (reason)".
//  2. Heartbeat every AgentRegistered.heartbeat_interval_seconds. An Error push
//     (the scheduler restarted and does not know us) means: register again,
//     reporting the workers that run. Workers are never touched by a reconnect,
//     but the agent holds a lease (lease.h): with no HeartbeatAck for the
//     lease, it stops every worker (checkpoint first, SIGKILL after
//     kLeaseStopGraceSeconds), since the scheduler may have started them
//     elsewhere. StartWorkers and NewGeneration of an older generation of a
//     job than one seen here are refused (fencing), and so is every command,
//     acknowledgement or registration of a lower scheduler term than one seen
//     here (a deposed leader; messages.h, "Term fencing").
//  3. StartWorkers: fork/exec each worker (process.h) with the ARYL_* contract
//     of docs/runtime.md: ARYL_JOB_ID, ARYL_WORKER_ID, ARYL_GENERATION,
//     ARYL_RANK, ARYL_WORLD_SIZE, ARYL_MIN_WORKERS, ARYL_MAX_WORKERS,
//     ARYL_MASTER_ADDR/PORT, ARYL_CHECKPOINT_DIR, ARYL_AGENT_ENDPOINT and
//     CUDA_VISIBLE_DEVICES (GPU agents; CPU agents set ARYL_LOCAL_SLOT);
//     stdout/stderr go to <log dir>/job-<job>/worker-<id>.{out,err}.
//  4. NewGeneration: relayed to the job's local workers as GenerationAnnounce
//     over the worker channel (below) once every member is ready; leavers
//     must exit by themselves at the switch step, or are stopped after
//     leave_timeout.
//  5. StopWorkers: with checkpoint_first, WorkerCheckpointRequest (stop
//     after) to those workers first; then SIGTERM to each worker's process
//     group, SIGKILL after the grace period. 6. WorkerCheckpointRequest from
//     the scheduler is relayed to the job's local workers. 7. WorkerExited
//     for every worker that ends, with its exit code or signal. 8/9. Rank 0's
//     WorkerResizeReport and WorkerProgress become ResizeReport and
//     JobProgress (loss from rank 0's stdout when the message has none).
//
// Worker channel (messages.h steps 12-16): a ROUTER on
// ipc://<log dir>/agent-<id>.sock (ARYL_AGENT_ENDPOINT); workers connect as
// "worker-<ARYL_JOB_ID>-<ARYL_WORKER_ID>". WorkerHello is answered on the
// channel's thread with the generation the worker was started for; all other
// worker messages are handed to the Run() thread.
//
// Thread safety: Run() owns everything; Stop() may be called from any thread.
// Run() must stay on one thread for the agent's life (workers are bound to it
// with PR_SET_PDEATHSIG, so they die if the agent dies).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "aryl/result.h"

namespace aryl::agent {

struct ServingOptions {
  std::string start;               // shell command (sh -c)
  std::string stop;                // shell command; empty: SIGTERM the start command's process
  std::string drain;               // shell command; empty: no drain step
  std::string ready_url;           // http://host:port/path answering 2xx when ready; empty: ready once started
  double start_timeout = 600;      // start hook plus readiness (s)
  double drain_timeout = 120;      // s
  double stop_timeout = 60;        // s
  std::string log_path;            // hooks' output; empty: <log dir>/serving.log
};

struct AgentOptions {
  // One endpoint or a comma list of every scheduler (protocol::ParseSchedulerEndpoints).
  std::string scheduler = "ipc:///run/aryl/scheduler.sock";  // protocol::kDefaultSchedulerEndpoint
  std::string id;                 // default: the host name
  std::string host;               // address peers use to reach this server; default: the route to the scheduler
  std::string pool = "training";  // training | inference
  int slots = 0;                  // 0: discover GPUs
  std::string gpu_type;           // with slots: e.g. "cpu"
  std::string log_dir = "aryl-logs";
  double leave_timeout = 30;      // a leaver still running after this is stopped (s)
  double request_timeout = 2;     // per request to the scheduler (s)
  int store_port = 0;             // the agent's rendezvous store (libtorch builds); 0: any free port
  // CURVE: this agent's key pair (.key) and the scheduler's public key (.pub).
  std::string curve_key;
  std::string curve_server_key;
  std::string cluster_id = "default";  // must equal the scheduler's --cluster-id
  // Job environment policy (agent_security.h): comma lists of names or "PREFIX*".
  std::string env_deny;   // empty: the default list (LD_*, PYTHONPATH, ...); "none": nothing
  std::string env_allow;  // exceptions to env_deny
  // Which of the agent's own variables workers inherit (agent_security.h):
  // comma list of NAME or PREFIX*; empty: kDefaultWorkerEnv; "all": every one.
  std::string worker_env;
  // Run-as-user (agent as root): file of "<owner> <account>" lines; empty: workers
  // run as the agent's own user.
  std::string run_as;
  // The serving side of an inference server (protocol/serving.h,
  // docs/operations.md "The serving side of a loan"). serving_start empty:
  // none. Without serving_stop the start command is the serving process
  // itself, kept by the agent (stopped by SIGTERM, SIGKILL after
  // serving_stop_timeout); with it, start and stop are commands that return
  // (systemctl start/stop, kubectl scale) and must exit 0 in time.
  ServingOptions serving;
};

class Agent {
 public:
  static Result<std::unique_ptr<Agent>> Create(AgentOptions options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs until Stop(); then stops every worker (bounded by their grace period).
  Status Run();
  void Stop();
  const AgentOptions& options() const;
  int running_workers() const;

  class Impl;

 private:
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace aryl::agent
