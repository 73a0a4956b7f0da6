// Daemon: the live scheduler (aryl-scheduler). It owns a protocol::Server
// (ROUTER) for agents and clients, drives the scheduling core with real
// events and a real clock, executes the core's plans by commanding agents, and
// keeps everything that must survive a crash in a StateStore.
//
// How a decision is made durable (event sourcing):
//  1. Every input to the core (job submitted/finished/cancelled, progress,
//     servers loaned, reclaim, server failed/recovered) is first appended to the
//     core journal in SQLite, with its time (seconds since the daemon's epoch,
//     stored once in the state file).
//  2. The core handles it and returns a plan; the daemon executes the plan
//     (start, resize, preempt, return server) and records the jobs' new state,
//     placements and workers, all in one transaction per event.
//  3. On restart the daemon rebuilds the core by replaying the journal (the core
//     is deterministic: the same events give the same plans), so the core's
//     state after a crash is exactly the state before it. Agents reconnect and
//     report the workers they run; the daemon reconciles: workers it does not
//     know are stopped, workers it expected but that are gone count as exits,
//     and each job is converged to the core's placement.
// A node that registers for the first time also rebuilds the core: the journal
// is replayed with the new server present but failed from time 0, then the
// server recovers now. Nodes are never forgotten: a node that stops
// heartbeating fails (its jobs shrink or are requeued) and recovers when its
// agent comes back.
//
// Thread safety: all state lives on the protocol::Server thread (its handler
// and tick); Run() only waits. The HTTP endpoint reads a snapshot published
// under a mutex.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "aryl/clock.h"
#include "aryl/protocol/transport.h"
#include "aryl/result.h"

namespace aryl::daemon {

class Leadership;
class MessagePort;
class StateStore;

struct DaemonOptions {
  // A local ipc:// socket by default, its callers told apart by uid; tcp://
  // needs CURVE keys or `insecure` (docs/security.md).
  std::string endpoint = protocol::kDefaultSchedulerEndpoint;
  std::string state_path = "aryl-state.db";  // ":memory:" for tests without restarts
  std::string http_address = "127.0.0.1";
  int http_port = -1;                    // -1: no HTTP endpoint; 0: any free port
  std::string policy = "aryl";
  double heartbeat_interval = 0.5;       // seconds, told to agents
  double agent_timeout = 3.0;            // no heartbeat for this long: the node failed
  // How long an agent's workers may run without a HeartbeatAck. A job that lost
  // workers on a failed node starts afresh elsewhere only once that node's lease
  // has surely run out (docs/architecture.md, "Leases and fencing"); a pause of
  // the scheduler longer than this stops the workers (checkpoint first).
  double agent_lease = 60.0;
  double restart_grace = 3.0;            // after a restart, wait this long for agents
  // The fencing token stamped on every command to agents (protocol/messages.h,
  // "Term fencing"); 0: the daemon takes the next value of the state store's
  // 'term' counter.
  std::uint64_t term = 0;
  double rescale_pause = 2.0;            // core cost model (seconds)
  double restart_pause = 5.0;
  double checkpoint_interval = 60.0;
  // The core's resize rule (aryl/sched/resize_rule.h; SchedulerConfig's
  // defaults): a grow's gain is counted over this horizon (s), it must beat
  // the job's measured pause plus the margin (s), and a job keeps its size
  // for the dwell (s) after a resize unless a forced change moves it.
  double resize_horizon = 600.0;
  double resize_dwell = 60.0;
  double resize_margin = 10.0;
  // Teams (docs/operations.md, "Teams"): the queues file (CSV: queue,
  // quota_gpus, weight, gpu_type and optional users, cohort, borrow_limit,
  // lend_limit); empty: one implicit queue, no quotas. A job is not
  // preempted to give quota back within quota_min_runtime of its start unless
  // the job waiting for it has waited quota_reclaim_deadline (s).
  std::string queues_file;
  double quota_min_runtime = 300.0;
  double quota_reclaim_deadline = 600.0;
  double stop_grace = 10.0;              // SIGTERM..SIGKILL for stops (s)
  double max_stop_grace = 600.0;         // the most a job may ask for (SubmitJob::stop_grace)
  int max_worker_failures = 3;           // unexpected worker exits before a job fails
  int journal_snapshot_rows = 10000;     // core journal rows between snapshots (0: never)
  // A snapshot is saved a slice at a time: pieces for at most
  // snapshot_slice_ms of the serving thread (a piece's transaction takes about
  // a millisecond; 0: one piece a slice), then at least snapshot_gap_ms for
  // requests and heartbeats before the next slice.
  double snapshot_slice_ms = 20;
  double snapshot_gap_ms = 20;
  std::string throughput_dir;            // optional measured tables (data/throughput)
  // "learned": every job's speed is fitted from the step times its runtime
  // reports (docs/scheduler.md, "Measured speed"); "linear": the tables, else
  // throughput = workers (no learning; for comparison).
  std::string speed = "learned";
  // Ports jobs listen on: each start's MASTER_PORT (torchrun's TCPStore, the
  // runtime's job store) is one of these, not held by another live job of
  // this scheduler (aryl/port_range.h; "LO-HI").
  std::string port_range = "20000-32767";
  // Per-user limits on submissions (a user key that is not an operator's;
  // docs/security.md): live (queued or running) jobs, and a token bucket of
  // submit_rate per second holding up to submit_burst. 0: no limit.
  int max_jobs_per_user = 10000;
  // /status and the status summary list at most this many live jobs (0: all).
  int status_max_jobs = 1000;
  double submit_rate_per_user = 100;
  int submit_burst_per_user = 1000;
  // FILE or daily:... (aryl-sim's format), or prometheus:URL?query=PROMQL
  // (demand_control.h); empty: none.
  std::string inference_demand;
  double demand_time_scale = 1.0;        // demand-curve seconds per wall second
  double demand_reclaim_deadline = 10;   // seconds a demand-driven reclaim allows
  // The serving side of inference servers (protocol/serving.h): the warm-up
  // assumed for a server whose agent has measured none yet (s), and a command
  // run (sh -c, 10 s at most) on each loan start, serving side ready after a
  // reclaim, and serving-side failure, with ARYL_EVENT, ARYL_NODE, ARYL_DETAIL.
  double serving_warmup = 30;
  std::string serving_hook;
  // A job that finishes before a reclaim's deadline (by the core's estimate,
  // with time to spare for a checkpoint) is left to finish on the reclaimed
  // server, which returns when it empties or when the job must leave
  // (SchedulerConfig::reclaim_lets_jobs_finish). false: every reclaimed server
  // is emptied at once.
  bool reclaim_lets_jobs_finish = true;
  // The Prometheus source only (demand_control.h: the mapping).
  double demand_step = 5;                // seconds between queries
  double demand_per_server = 1;          // load one inference server carries
  int demand_headroom = 0;               // servers kept beyond the load
  double demand_hysteresis = 0.2;        // fraction of kept servers to spare before an offer
  double demand_hold = 30;               // seconds a lower demand must last before an offer
  std::string curve_secret_key;          // scheduler .key file; empty: no CURVE
  std::string curve_allow;               // allow-list: directory of .pub or file of keys
  std::string curve_agents;              // role lists (authz.h): directory of NAME.pub
  std::string curve_users;               //   or a file of "NAME KEY" lines
  std::string curve_operators;
  bool insecure = false;                 // allow a non-loopback endpoint without CURVE
  std::string cluster_id = "default";    // agents must register with the same id
  std::string env_deny, env_allow;       // job env policy at submit (protocol/env_policy.h)
  std::string log_dir;                   // where agents put worker logs (informational)
  // The daemon's time: seconds since the Unix epoch. Null: WallClock (the
  // system's); tests pass a ManualClock to move it themselves. Outlives the daemon.
  const Clock* clock = nullptr;
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  // With a store already open (the etcd backend: options.state_path is not
  // read) and the leadership it decides under (leadership.h): the daemon
  // decides only while leadership->CanDecide(), and Run returns once it is
  // Deposed().
  static Result<std::unique_ptr<Daemon>> Start(DaemonOptions options, std::unique_ptr<StateStore> store,
                                               std::shared_ptr<Leadership> leadership);
  // Driven: no socket, no HTTP endpoint and no thread of the daemon's own.
  // The caller delivers every message (Deliver), calls Tick() every 50 ms of
  // options.clock, and finds the replies it returns and what the daemon
  // pushes or replies later on `port` (message_port.h), all on one thread:
  // the same handlers and the same tick as the binary's, in the caller's
  // order, so a test or a simulation replays them exactly. Store: null opens
  // options.state_path (":memory:" for a daemon that never restarts).
  // Learned speed fits run on a thread of their own; pass speed "linear" for
  // a run that must be reproducible. `port` outlives the daemon.
  static Result<std::unique_ptr<Daemon>> StartDriven(DaemonOptions options, MessagePort& port);
  static Result<std::unique_ptr<Daemon>> StartDriven(DaemonOptions options, MessagePort& port,
                                                      std::unique_ptr<StateStore> store);
  std::optional<protocol::Message> Deliver(const protocol::ReplyTo& from, protocol::Message msg);
  void Tick();

  ~Daemon();  // Stop()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  const std::string& endpoint() const;  // bound endpoint (port resolved)
  int http_port() const;                // -1 when off
  // The public key clients need (empty without CURVE).
  const std::string& public_key() const;

  // Blocks until `stop` becomes true (checked every 100 ms), Stop(), or the
  // leadership it was started with is lost.
  void Run(const std::atomic<bool>& stop);
  void Stop();

  class Impl;

 private:
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace aryl::daemon
