// Daemon::Impl: the scheduler daemon's state and the functions that change it.
// Parts with one job each, their own state and their own tests, that it holds:
//   node_registry.h     NodeRegistry: the nodes, their server ids, the workers
//                       on each, agent liveness on the watch clock
//   job_table.h         JobTable: the live jobs, their owners and checkpoint
//                       records; the one place a job's workers change
//   converger.h         PlanConverge: a job's workers for a placement (pure)
//   job_machine.h       JobMachine: a job's life cycle, one transition table
// The rest is split by responsibility across the files of this folder:
//   daemon.cc           setup (state file, metrics), the public Daemon class
//   core_journal.cc     rebuilding the core by replaying its journal
//   outbox.h            Outbox: a durable step's messages, held until its
//                       store writes commit
//   plan.cc             the one path from a core event to executed actions:
//                       Transaction, Feed, Execute, SaveJob
//   converge.cc         a job's placement -> its workers and generations
//                       (Converge, the forming rule, Restart, StopJobWorkers)
//   agents.cc           agent registration, heartbeats, reconciliation, and
//                       failing the nodes NodeRegistry finds silent
//   job_lifecycle.cc    worker reports (exits, progress, resizes) and job ends
//   client_handlers.cc  requests from aryl / aryl-run / inference managers
//   status.cc           listings, the status summary and gauges
//   inference.cc        loans, reclaims and the inference demand source
//   journal.cc          the event journal's rows (Journal) and what describe
//                       reads back from them; describe job/node, events
//   logs.cc             aryl logs: the relay from client to agent and back
//   speed.cc            measured speed: samples, fits, their journal rows
//   tick.cc             the periodic work, in order
//   teams.cc            queues: a submission's queue, aryl queues, their series
//
// Thread safety: everything here runs on the protocol::Server thread (its
// handler and its tick); only status_snapshot is read by the HTTP thread,
// under snapshot_mu, and speed fits run on SpeedFitter's thread, on copies.
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "aryl/agent/process.h"
#include "aryl/daemon/cluster_series.h"
#include "aryl/daemon/daemon.h"
#include "aryl/daemon/demand_control.h"
#include "aryl/daemon/http_server.h"
#include "aryl/daemon/metrics.h"
#include "aryl/daemon/prometheus_demand.h"
#include "aryl/daemon/leadership.h"
#include "aryl/daemon/message_port.h"
#include "aryl/daemon/state_store.h"
#include "aryl/duration.h"
#include "aryl/port_range.h"
#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"
#include "aryl/sched/queues.h"
#include "aryl/sched/scheduler.h"
#include "aryl/sched/speed_models.h"
#include "aryl/sched/state.h"
#include "aryl/sched/throughput.h"
#include "aryl/sim/demand.h"
#include "authz.h"
#include "live_job.h"
#include "pending_snapshot.h"
#include "start_confirm.h"
#include "aryl/daemon/converger.h"
#include "aryl/daemon/job_machine.h"
#include "daemon_constants.h"
#include "job_table.h"
#include "master_ports.h"
#include "node_registry.h"
#include "outbox.h"
#include "secrets.h"
#include "speed_fitter.h"

namespace aryl::daemon {

namespace p = aryl::protocol;
namespace s = aryl::sched;
using json = nlohmann::json;

// "node:n,node:n" ("-" when empty), for logs and the event journal.
std::string PlacementString(const std::map<std::string, int>& placement);

// The scheduler's generation (the one `aryl jobs` shows) of a runtime (store)
// generation (protocol/generation.h: plan * 1000, + n for the n-th fault
// recovery since); jobs without a rendezvous store number their generations
// like the scheduler (journal.cc).
std::int64_t PlanOfStore(std::int64_t g);

// A worker's end as the job life cycle sees it (job_lifecycle.cc).
enum class ExitKind {
  kCompleted,  // the program finished its work (the runtime's "completed", or exit 0 without the runtime)
  kLeft,       // it was not a member of the newest generation
  kLost,       // killed, interrupted or stopped without being asked: the job goes on without it
  kFailed,     // the program failed (exit code, its report, an exec error): the job fails
};
// `planned_stop`: the job's whole group is being stopped to start it again
// (restart elasticity); an exit then is not the job's end, whatever its code.
ExitKind ClassifyExit(const p::WorkerExited& m, bool planned_stop = false);

// A WorkerEnd in a job's workers_json (plan.cc); nullopt for a missing or
// malformed one (state of an older version).
json WorkerEndJson(const p::WorkerEnd& e);
std::optional<p::WorkerEnd> WorkerEndFromJson(const json& j);

class Daemon::Impl {
 public:
  // A job, node, worker and reclaim as the daemon holds them (live_job.h).
  using Node = LiveNode;
  using Worker = LiveWorker;
  using Job = LiveJob;
  using PendingReclaim = LivePendingReclaim;

  DaemonOptions opt;
  // The daemon's time (DaemonOptions::clock): every decision and record reads it.
  const Clock* clock = WallClock::Default();
  double WallNow() const { return clock->NowSeconds(); }
  PortRange ports;  // opt.port_range, parsed in Start
  // Per-user submission limits (client_handlers.cc, UserLimitRefusal): each
  // owner's live job ids (JobTable::OwnedBy) and each owner's token bucket.
  // Memory only.
  struct Bucket {
    double tokens = 0;
    double at = -1;  // steady seconds of the last refill; < 0: full
  };
  std::map<std::string, Bucket> submit_buckets;
  std::optional<Status> UserLimitRefusal(const std::string& owner);
  std::unique_ptr<StateStore> store;
  // HA (leadership.h): null with SQLite. While it cannot decide the daemon is
  // frozen: heartbeats are acked, everything else refused with "retry".
  std::shared_ptr<Leadership> leadership;
  bool Frozen() const { return leadership && !leadership->CanDecide(); }
  std::optional<p::Message> WhileFrozen(const p::ReplyTo& from, const p::Message& msg);
  bool was_frozen = false;
  std::uint64_t unavailable_writes = 0;  // transactions the store refused as Unavailable
  // Where replies and commands go (message_port.h): the ZeroMQ server's adapter
  // (owned_port), or the driver's (StartDriven: no `server`, no thread).
  MessagePort* port = nullptr;
  std::unique_ptr<MessagePort> owned_port;
  std::unique_ptr<p::Server> server;
  std::unique_ptr<HttpServer> http;
  Metrics metrics;
  std::string public_key;
  std::optional<KeyRoles> roles;  // with CURVE (authz.h)
  bool peer_credentials = false;  // keyless ipc://: callers told apart by uid
  mutable std::map<std::uint32_t, Identity> local_identities;  // by uid (Caller)
  std::string store_key;          // the cluster's rendezvous-store key (store.h)

  double epoch = 0;              // wall time of core time 0
  double last_core_time = 0;
  std::unique_ptr<s::Scheduler> core;
  std::shared_ptr<s::ThroughputCatalog> measured;  // optional tables
  std::shared_ptr<const s::QueueConfig> queues;     // --queues; null: no teams
  // The nodes, their worker index and liveness (node_registry.h); the live
  // jobs (queued or running), their owners and checkpoints, and the one place
  // their workers change (job_table.h).
  NodeRegistry registry;
  JobTable table{registry};
  std::map<std::string, Node>& nodes = registry.nodes();
  std::map<s::JobId, Job>& jobs = table.jobs();
  std::vector<PendingReclaim> reclaims;
  // Reclaimed servers the core leaves jobs to finish on, by core server id:
  // still loaned until the core returns them (then in `reclaims`, with the
  // reclaim's own start and deadline).
  std::map<s::ServerId, PendingReclaim> draining;
  double started_at = 0;
  double last_tick = 0;
  double last_demand_check = 0;
  std::optional<sim::DemandCurve> demand;
  int demand_servers = -1;
  std::optional<DemandController> demand_control;
  std::unique_ptr<PrometheusDemandPoller> demand_poller;  // with a prometheus: source
  std::unique_ptr<ClusterSeries> cluster_series;          // per-job, node and pool series
  std::uint64_t scheduler_epoch = 0;
  std::uint64_t term = 0;  // fencing token on every message to agents (DaemonOptions::term)

  std::atomic<bool> ready{false};  // /readyz: set once Start has finished
  std::mutex snapshot_mu;
  std::string status_snapshot = "{}";


  // Set by the reclaim in progress (inference.cc), read by Execute.
  double current_reclaim_deadline = 120;
  // Jobs whose workers changed outside a plan; converged on the next tick.
  std::set<p::JobId> pending_converge;

  // --- daemon.cc: setup
  Status Init();
  // Nodes and live jobs as the store holds them (Init, and after a failed
  // write); what only memory knows (connections, watchers, progress) is kept.
  Status LoadState();
  Status Reload();
  Status SetUpCurve(p::Server::Options& so);  // authz.cc: keys, role lists, exposure check
  void DeclareMetrics();
  double CoreNow();
  std::shared_ptr<const s::ThroughputCatalog> Catalog();

  // --- core_journal.cc
  Status RebuildCore(std::optional<s::ServerId> recovering);
  // A new node's server joins the running core (O(1) in the journal's length).
  Status AddServer(const Node& n);
  Status JoinCore(std::unique_ptr<s::Scheduler>& into, const s::ServerSpec& spec, double t);
  Status AppendCoreRow(double t, const std::string& body);  // counts journal_rows
  // Replaces the journal with a snapshot of the core (core_journal.h).
  // At once, on the serving thread (a GPU type new to the cluster).
  Status SnapshotCore();
  // Once journal_rows reach the option: the core's image is taken here and
  // encoded on a helper thread; PollSnapshot saves it, a slice per call,
  // once it is encoded (with `wait`: all of it now).
  void MaybeSnapshot();
  void PollSnapshot(bool wait = false);
  // One slice of the save: pieces for up to snapshot_slice_ms, or the commit.
  Status SaveSnapshotSlice(PendingSnapshot& ps, bool wait);
  std::int64_t journal_rows = 0;    // core_events rows since the snapshot
  std::size_t snapshot_bytes = 0;   // size of the last snapshot written
  std::optional<PendingSnapshot> pending_snapshot;  // dropping it cancels its encoding
  // The last image, emptied by its encoder: the next is copied into its memory (serving thread, none pending).
  std::shared_ptr<s::Scheduler::Image> snapshot_image;
  static s::ServerSpec CoreSpec(const Node& n);
  s::SchedulerConfig CoreConfig() const;

  // --- plan.cc
  // Runs `body` as one durable step (outbox.h): its store writes in one transaction, its messages to agents
  // and clients (Send) held back until that transaction commits. When it fails (a full disk, an I/O error)
  // none of it happened: the messages are dropped and memory is reloaded from the store. Nested calls are
  // part of the outermost one.
  Status Transaction(const std::string& what, const std::function<Status()>& body);
  void Send(const std::string& identity, const p::Message& msg) { outbox.Send(identity, msg); }
  // Over `port`: to an agent's route, a command stamped with this daemon's term (and start confirmation's seqs).
  void SendNow(const std::string& identity, const p::Message& msg);
  template <typename M> void StampStartConfirmation(Node& n, M& m);
  Outbox outbox{[this](const std::string& identity, const p::Message& msg) { SendNow(identity, msg); }};
  // Applies an event to the core and executes its plan; the policy's round
  // follows in RoundTick (round = true: this is that round's Tick).
  Status Feed(s::EventBody body, const std::string& why, bool round = false);
  // One event into `into` (Handle with the round, else Apply) with the speed
  // models' part of it (SpeedBefore / SpeedAfter): the one path of Feed and of
  // the journal's replay, so both build the same models.
  Result<s::Plan> CoreStep(s::Scheduler& into, const s::Event& ev, bool round);
  void RoundTick();
  // Notes the servers the core drains (`draining`), forgets those it no
  // longer does; after every plan and every tick (a restart rebuilds them).
  void NoteDraining();
  bool Draining(const Node& n) const;  // the core drains its server
  bool round_due = false;  // events were applied since the last round
  std::map<std::string, int> ToNodePlacement(const s::Placement& placement);
  int PickMasterPort(Job& j, const std::string& master_host);
  Status Execute(const s::Action& a);
  Status SaveNode(const Node& n);
  Status SaveJob(Job& j);
  // --- converge.cc
  std::set<int> FreeSlots(const Node& n);
  // Whether `desired` (node -> workers) fits now: on every node, the free
  // slots plus the job's own workers that stay there.
  bool Fits(const Job& j, const std::map<std::string, int>& desired);
  // Marks the job's workers beyond `desired` (node -> count) as leaving,
  // highest ranks first, and returns them; sends nothing.
  std::vector<p::WorkerId> MarkLeavers(Job& j, const std::map<std::string, int>& desired);
  // Node -> jobs waiting out its agent's lease (Job::lease): a
  // registration looks at those, not at every live job. Entries may be stale
  // (readers check Job::lease). The jobs' MASTER_PORTs by host
  // (PickMasterPort, master_ports.h). Both rebuilt by IndexWaits.
  std::map<std::string, std::set<p::JobId>> lease_waits;
  MasterPorts master_ports;
  void IndexWaits();
  // Carries out PlanConverge (converger.h) for the job and `desired`.
  Status Converge(Job& j, const std::map<std::string, int> desired, const std::string& reason);
  ConvergeInput ConvergeInputOf(const Job& j, const std::map<std::string, int>& desired) const;
  static ConvergeWorker ConvergeWorkerOf(const Worker& w);
  Status StartGeneration(Job& j, const ConvergeResult& plan, const std::string& reason);
  Status Restart(Job& j, const std::string& reason, bool planned = true);  // stop all workers, then start them again
  // Records a life-cycle transition's outcome: a refused one (no row in
  // JobMachine's table) is a bug, logged with the job and the phase.
  void Phase(const Job& j, bool ok, std::string_view what);
  // Stops the unformed joiners of a generation the forming rule abandoned
  // (converger.h, C4) at once, with a journal row.
  void StopUnformed(Job& j, const std::vector<std::int64_t>& joiners);
  Status MarkRuntime(Job& j);  // the program links the runtime (SubmitJob::elastic)
  // Every worker of `j` leaves: StopWorkers to each agent (SIGTERM, SIGKILL
  // after `grace` seconds; < 0: the configured stop grace).
  // grace < 0: StopGraceOn each agent.
  void StopJobWorkers(Job& j, bool checkpoint_first, const std::string& reason, double grace = -1);
  // The job's grace (SubmitJob::stop_grace, else --stop-grace) for its workers
  // on `agent`, cut to end before a pending reclaim of that server is enforced.
  double StopGraceOn(const Job& j, const std::string& agent) const;
  void Push(const std::string& agent, const p::Message& msg);
  void Notify(Job& j, p::JobState state, const std::string& message, bool final = false,
              std::vector<std::string> output = {});

  // --- client_handlers.cc (dispatch) and the handlers of every file
  std::optional<p::Message> Handle(const p::ReplyTo& from, p::Message msg);
  static p::Message Err(const Status& st) { return p::Error::FromStatus(st); }
  template <typename T>
  std::optional<p::Message> On(const p::ReplyTo&, T&) {
    metrics.Inc("aryl_bad_requests_total");
    return Err(Status::InvalidArgument(std::string("the scheduler does not accept '") + std::string(T::kType) + "'"));
  }

  // --- authz.cc
  Identity Caller(const p::ReplyTo& from) const;
  std::optional<std::string> JobOwner(p::JobId job);
  // nullopt: allowed (may fill in SubmitJob.owner); else the refusal to answer.
  std::optional<p::Message> Authorize(const p::ReplyTo& from, p::Message& msg);

  // --- agents.cc
  // Operator commands (drain | resume | remove), persisted in the meta table.
  Status NodeCommandFor(const std::string& node, const std::string& action);
  void RestartMeasured(Job& j);
  // Makes the core's cordon of n's server agree with n.drained (a no-op when
  // it does, or when the core does not know the server yet).
  Status SyncCordon(const Node& n);
  // The worker id of rank 0 among the job's staying workers; -1 when none.
  static std::int64_t RankZero(const Job& j);
  std::optional<p::Message> On(const p::ReplyTo& from, p::AgentRegister& m);
  void Reconcile(Node& n, const std::vector<p::RunningWorker>& running, const StartReport& report);
  void ConfirmStarts(const Node& n, const std::set<std::pair<p::JobId, p::WorkerId>>& reported,
                     const StartReport& report);
  static constexpr double kStartConfirmSeconds = 6, kStrayKillEvery = 2;  // watch time
  void WorkerGone(const Node& n, Job& j, p::WorkerId wid, const std::string& why);  // exited unseen, never ran
  std::optional<p::Message> On(const p::ReplyTo& from, p::Heartbeat& m);
  // Fails the nodes the registry's watch clock finds silent (node_registry.h).
  void LivenessTick(double now);
  // A message from the node's agent arrived.
  void Heard(Node& n) { registry.Heard(n, WallNow()); }
  // The agent is gone: its workers are lost; jobs whose rendezvous store it
  // hosted restart from their latest checkpoint.
  Status NodeFailed(const std::string& id, double now);

  // --- job_lifecycle.cc
  Status EndJob(Job& j, JobState state, int exit_code, const std::string& message);
  std::optional<p::Message> On(const p::ReplyTo& from, p::WorkerExited& m);
  Status HandleWorkerExit(const p::WorkerExited& m);
  Status FinishJob(Job& j, int exit_code);
  static std::string FailureReport(const Job& j, int exit_code);
  Status FailJob(Job& j, int code, const std::string& why);
  std::optional<p::Message> On(const p::ReplyTo&, p::ResizeReport& m);
  std::optional<p::Message> On(const p::ReplyTo&, p::JobProgress& m);
  void ConvergeTick(double now);

  // --- client_handlers.cc
  std::optional<p::Message> On(const p::ReplyTo&, p::SubmitJob& m);
  std::optional<p::Message> On(const p::ReplyTo& from, p::ListJobs& m);
  std::optional<p::Message> On(const p::ReplyTo&, p::JobStatus& m);
  std::optional<p::Message> On(const p::ReplyTo&, p::CancelJob& m);
  std::optional<p::Message> On(const p::ReplyTo&, p::ListNodes&);
  std::optional<p::Message> On(const p::ReplyTo&, p::NodeCommand& m);
  std::optional<p::Message> On(const p::ReplyTo&, p::PoolOffer& m);
  std::optional<p::Message> On(const p::ReplyTo&, p::PoolReclaim& m);
  std::optional<p::Message> On(const p::ReplyTo& from, p::WatchJob& m);
  std::optional<p::Message> On(const p::ReplyTo&, p::StatusRequest&);

  // --- status.cc
  p::JobRow Row(const JobRecord& rec, const Job* live);
  // A job's submission: the live job's decoded spec, else `rec`'s stored one
  // decoded into `stored`; null when that does not decode.
  static const p::SubmitJob* SpecOf(const JobRecord& rec, const Job* live, std::optional<p::SubmitJob>& stored);
  // Slots held by staying workers, per node, in one pass over the jobs.
  std::map<std::string, std::set<int>> SlotsInUse() const;
  // Why queued jobs without workers wait, as squeue's REASON: a cause word,
  // then the detail in slots and nodes. First what only the daemon knows
  // (LeaseWait: a lost node's lease must run out before a fresh start;
  // Starting: the core placed it, its workers are being started), then the
  // core's answer (sched/pending.h; its NoServer is GpuType for a job that
  // named a GPU type, NoNode otherwise; MinSize, Gang, Capacity, Priority).
  // One core query for them all; "" for a job that does not wait.
  std::vector<std::string> PendingReasons(const std::vector<const Job*>& waiting) const;
  std::string PendingReason(const Job& j) const { return PendingReasons({&j}).at(0); }
  // Sets pending_reason on the rows of live queued jobs without workers.
  void FillPendingReasons(std::vector<p::JobRow>& rows) const;
  std::vector<p::NodeRow> NodeRows();
  json Summary();
  // Builds the /status snapshot and the gauges: O(nodes + live jobs). The
  // handlers only mark it dirty; the tick publishes (see tick.cc).
  void PublishSnapshot();
  void PublishClusterSeries();  // the per-job, node and pool series (cluster_series.h)
  bool snapshot_dirty = false;
  double publish_seconds = 0;  // what the last PublishSnapshot cost

  // --- inference.cc
  Status Offer(const std::vector<std::string>& names);
  Status ReclaimServers(int count, const std::vector<std::string>& names, double deadline_s);
  void ReclaimTick(double now);
  void DemandTick(double now);

  // --- teams.cc (protocol/queues.h)
  // Q1: sets spec.queue and spec.priority from `m`, or the error to answer.
  Status ResolveQueue(const Identity& who, const p::SubmitJob& m, s::JobSpec& spec) const;
  std::string QueueOf(const p::SubmitJob& m) const;  // its queue's name; "" without queues
  std::vector<p::QueueRow> QueueRows() const;
  std::vector<QueueSeries> QueueSeriesNow() const;
  std::optional<p::Message> On(const p::ReplyTo&, p::ListQueues&);
  std::optional<p::Message> On(const p::ReplyTo&, p::ReloadQueues&);
  std::optional<p::Message> On(const p::ReplyTo&, p::UsageRequest& m);  // usage.h
  Result<std::shared_ptr<const s::QueueConfig>> ReadQueues() const;  // --queues, parsed

  // --- serving.cc (protocol/serving.h)
  std::optional<p::Message> On(const p::ReplyTo& from, p::ServingReport& m);
  // Sends each node in serving_sync the state its serving side should be in.
  void ServingTick(double now);
  void SendServing(const Node& n, bool lend);
  // The warm-up to allow a node's serving side: measured, else --serving-warmup; 0 without one.
  double WarmupOf(const Node& n) const;
  // What a reclaim of `n` keeps back from its deadline for the serving side
  // to start: the warm-up with kServingMargin (a warm-up varies with load),
  // 0 without a serving side.
  double ServingBudget(const Node& n) const;
  // The loan of a node whose serving side stopped (S4).
  Status FinishLend(Node& n);
  // --serving-hook with the event (bounded; never blocks the loop).
  void ServingHook(const std::string& event, const Node& n, const std::string& detail);
  std::set<std::string> serving_sync;  // registered since: send their ServingCommand
  std::unique_ptr<agent::ProcessLauncher> hooks;  // --serving-hook runs
  std::map<pid_t, double> hook_deadlines;
  // The Prometheus source (Init): poller and controller; InvalidArgument for a bad spec.
  Status StartDemandSource();

  // --- journal.cc: journal rows with their nodes and facts (data), and the
  // inspection requests of protocol/inspect.h that read them.
  Status Journal(std::uint64_t job, const std::string& kind, const std::string& detail,
                 json data = json::object(), std::vector<std::string> nodes = {});
  // A start or resize into `members` (rank order), with the reason.
  Status JournalPlacement(Job& j, const std::string& kind, const std::vector<p::WorkerId>& members,
                          const std::string& reason);
  static std::vector<std::string> JobNodes(const Job& j);
  std::optional<p::Message> On(const p::ReplyTo& from, p::DescribeJob& m);
  std::optional<p::Message> On(const p::ReplyTo& from, p::DescribeNode& m);
  std::optional<p::Message> On(const p::ReplyTo& from, p::ListEvents& m);
  std::optional<p::Message> On(const p::ReplyTo& from, p::CheckpointReport& m);

  // --- logs.cc (protocol/inspect.h, steps 4-7)
  std::optional<p::Message> On(const p::ReplyTo& from, p::JobLogs& m);
  std::optional<p::Message> On(const p::ReplyTo& from, p::LogReadReply& m);
  void LogRelayTick(double now);  // answers Timeout for reads the agent left unanswered
  struct PendingLog {
    p::ReplyTo to;
    std::string agent;
    p::LogChunk chunk;  // filled in but for data and size
    double deadline = 0;
  };
  std::map<std::uint64_t, PendingLog> pending_logs;
  std::uint64_t next_log_request = 1;

  // --- speed.cc: every job's speed, fitted online from rank 0's step-time
  // summaries (docs/scheduler.md, "Measured speed"). The models are an input
  // of the core like its events: each summary and each finished fit is a
  // core-journal row (core_journal.h, SpeedSampleRow, SpeedFitRow) applied in
  // order on replay, and the journal's snapshot carries the models (its text,
  // core_journal.h), so a restarted scheduler decides on exactly the curves
  // it had. Fits run on `fitter`'s thread.
  std::shared_ptr<s::SpeedModels> speed;  // CoreConfig().speed
  std::string speed_reference;            // the GPU type speeds are relative to
  std::unique_ptr<SpeedFitter> fitter;    // with `speed`; its fits are of this `speed`
  // A new, empty SpeedModels (no snapshot) or the snapshot's (`in_snapshot`,
  // else meta); before every core build (fits of the models it replaces are
  // dropped). The reference GPU type is fixed at the first (meta).
  Status ResetSpeed(bool from_snapshot, std::optional<std::string_view> in_snapshot = {});
  s::SpeedModelOptions SpeedOptions(const std::string& reference) const;
  // An event's part in the models: a submitted job gets its model (and prior)
  // before the core sees it; an ended job's fit joins the cluster's priors after.
  void SpeedBefore(const s::EventBody& body);
  void SpeedAfter(const s::EventBody& body);
  // Rank 0's summary: one journaled sample; the core reads a changed fit.
  Status AddStepStats(Job& j, const p::StepStats& st);
  // A sample of an older journal, fitted inline (replay only).
  Status ApplySpeedSample(double t, s::JobId job, const s::StepSample& sample, s::Scheduler& into);
  // A deferred sample: recorded, its fit (if due) left to the caller.
  Status RecordSpeedSample(s::JobId job, const s::StepSample& sample);
  // The one code path of a fit, live (SpeedFitTick) and in replay.
  Status ApplySpeedFit(double t, s::JobId job, const s::FitResult& fit, s::Scheduler& into);
  // Every tick: the fitter's finished fits journaled, applied, a round due.
  void SpeedFitTick();
  // A fit the job's recorded samples call for, to the fitter (SpeedModels::DueFit).
  void SubmitDueFit(s::JobId job);
  void SubmitDueFits();  // for every live job (after a rebuild)
  // The type and server size a job's speed is read at: its placement's
  // slowest type (by its model), else the type it asked for, else the reference.
  std::pair<std::string, int> SpeedTypeFor(const Job& j) const;
  double PredictedRate(const Job& j) const;  // at its live size; 0 without a model
  std::optional<p::JobSpeed> DescribeSpeed(const Job& j) const;

  // --- tick.cc
  void Tick();
  std::uint64_t rejected_counted = 0;  // transport rejections already in aryl_bad_requests_total
  std::uint64_t leader_changes_counted = 0;  // leader changes already in aryl_leader_changes_total
};

}  // namespace aryl::daemon
