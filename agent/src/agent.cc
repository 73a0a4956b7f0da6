// The agent's loop (agent.h). Agent::Impl owns the workers it started
// (local_workers.h) and coordinates the parts that each do one job: the
// scheduler session (scheduler_session.h), the worker channel
// (worker_channel.h), the launch of workers (launch_spec.h), exit reports
// (exit_book.h), progress (progress_relay.h) and generations announced through
// the store (generation_announcer.h). It turns the scheduler's commands into
// process launches and stops, and the workers' ends into reports.
//
// Thread safety: Run() owns everything; Stop() and running_workers() may be
// called from any thread (agent.h).
#include "aryl/agent/agent.h"

#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <set>

#include "agent_options.h"
#include "agent_security.h"
#include "aryl/agent/process.h"
#include "aryl/agent/store_relay.h"
#include "aryl/clock.h"
#include "aryl/protocol/messages.h"
#include "aryl/protocol/scheduler_client.h"
#include "aryl/protocol/store.h"
#include "exit_book.h"
#include "generation_announcer.h"
#include "launch_spec.h"
#include "local_workers.h"
#include "log_reader.h"
#include "progress_relay.h"
#include "run_as.h"
#include "scheduler_session.h"
#include "serving_side.h"
#include "stop_notice.h"
#include "store_probe.h"
#include "worker_channel.h"

static_assert(std::string_view(aryl::protocol::kDefaultSchedulerEndpoint) == "ipc:///run/aryl/scheduler.sock",
              "AgentOptions::scheduler's default is the scheduler's");

namespace aryl::agent {

namespace p = aryl::protocol;
namespace fs = std::filesystem;
using std::chrono::milliseconds;

namespace {
double Now() { return SystemClock::Default()->NowSeconds(); }
}  // namespace

class Agent::Impl {
 public:
  static constexpr double kShutdownGraceSeconds = 5;  // SIGTERM..SIGKILL when the agent stops

  AgentOptions opt;
  std::unique_ptr<SchedulerSession> session;  // registration, heartbeats, lease, fencing
  ProcessLauncher launcher;
  LocalWorkers workers;
  std::atomic<bool> stop{false};
  std::atomic<int> running{0};
  p::Pool pool = p::Pool::kTraining;
  bool gpus = false;
  std::shared_ptr<StoreRelay> relay;
  std::string store_endpoint;  // this agent's store; empty without a relay
  std::optional<UserMap> user_map;  // --run-as: workers run as their owner's account
  std::function<bool(const std::string&)> worker_env;  // --worker-env (null: all)
  std::unique_ptr<WorkerChannel> channel;  // ARYL_AGENT_ENDPOINT (protocol steps 12-16)
  GenerationAnnouncer announcer;           // the jobs' generations in flight here
  ProgressRelay progress;                  // rank 0's progress, to the scheduler
  ExitBook exits;                          // exits the scheduler has not acknowledged
  std::optional<StopNotices> notices;      // ARYL_STOP_NOTICE files (stop_notice.h)
  std::unique_ptr<ServingSide> serving;    // --serving-start (protocol/serving.h)
  double started = 0;                      // when Run began
  double log_free_checked = -10;
  std::int64_t log_free = -1;

  ~Impl() { channel.reset(); }  // no worker is heard once the agent goes

  bool UsesStore(const std::string& endpoint) const {
    return relay && !endpoint.empty() && endpoint != "none";
  }

  // Pushes `m` to this agent's running workers of the job start `key`.
  void PushToWorkers(p::JobId job, const std::string& key, const p::Message& m,
                     const std::set<p::WorkerId>& only = {}) {
    for (const LocalWorker* w : workers.Of(job, only)) {
      if (w->identity.empty() || (!key.empty() && w->store_key != key)) continue;
      Status st = channel->Push(w->identity, m);
      if (!st.ok()) spdlog::warn("job {} worker {}: push {}: {}", job, w->id, p::TypeName(m), st.ToString());
    }
  }

  // What this agent is, runs and has to report (protocol step 1).
  p::AgentRegister RegisterMessage() const {
    p::AgentRegister m;
    m.agent_id = opt.id;
    m.host = opt.host;
    m.pool = pool;
    m.gpu_type = opt.gpu_type;
    m.slots = opt.slots;
    m.workers = workers.Running();
    m.store_endpoint = store_endpoint;
    m.exited = exits.Unacked();
    m.cluster_id = opt.cluster_id;
    if (serving) m.serving = serving->Status();
    return m;
  }

  // Protocol step 2: free slots, the workers and the log disk's free space.
  p::Heartbeat HeartbeatMessage() {
    p::Heartbeat hb;
    hb.agent_id = opt.id;
    hb.free_slots = workers.FreeSlots(opt.slots);
    hb.workers = workers.Running();
    hb.log_free_bytes = LogFreeBytes();
    return hb;
  }

  // Whether workers may run as other accounts than the agent's (the worker
  // channel's socket must then be reachable by them).
  bool WorkersMayRunAsOthers() const { return user_map.has_value() || ::geteuid() == 0; }

  void OnStart(const p::StartWorkers& m) {
    Status v = m.Validate();
    if (!v.ok()) {
      spdlog::error("start_workers for job {}: {}", m.job, v.ToString());
      return;
    }
    if (!session->lease().held() || session->lease().Expired(Now())) {
      // Only a message queued from before the lease ran out can get here: the
      // scheduler sends starts after a registration, which grants a lease.
      spdlog::warn("job {}: start_workers refused: this agent holds no lease from the scheduler", m.job);
      return;
    }
    if (session->Stale(m.job, m.generation, "start_workers")) return;
    // A refused environment fails every worker's start, like an exec error.
    Status env_ok = CheckJobEnv(m.env, opt.env_deny, opt.env_allow);
    WorkerLaunchContext ctx;
    if (env_ok.ok()) {
      auto a = WorkerAccount(user_map ? &*user_map : nullptr, m.owner, m.owner_uid);
      if (a.ok()) {
        ctx.account = *a;
      } else {
        env_ok = a.status();
      }
    }
    ctx.job_dir = fs::path(opt.log_dir) / ("job-" + std::to_string(m.job));
    if (Status d = MakePrivateDir(ctx.job_dir); !d.ok()) spdlog::error("job {}: {}", m.job, d.ToString());
    ctx.agent_id = opt.id;
    ctx.host = opt.host;
    ctx.worker_endpoint = channel->endpoint();
    ctx.inherit = worker_env;
    ctx.gpus = gpus;
    ctx.use_store = UsesStore(m.store_endpoint);
    ctx.store_key = p::ProcessStoreAuth().key;
    ctx.account_home_exists = ctx.account && m.cwd.empty() && fs::is_directory(ctx.account->home);
    // Fresh workers and joiners ask for their generation in WorkerHello:
    // the record exists before any of them starts.
    if (ctx.use_store)
      channel->Remember(AnnounceOf(m.job, StartGeneration(m, true), m.members, m.store_endpoint, m.store_prefix));
    for (const auto& wp : m.workers) {
      if (workers.Runs(m.job, wp.worker)) continue;
      // The channel identity's random part (worker_channel.h, step 4).
      auto nonce = p::NewStoreKey();
      WorkerLaunch launch =
          BuildWorkerLaunch(m, wp, ctx, nonce.ok() ? std::optional(nonce->substr(0, 32)) : std::nullopt);
      notices->Remove(m.job, wp.worker);
      launch.spec.env["ARYL_STOP_NOTICE"] = notices->PathOf(m.job, wp.worker);
      if (nonce.ok()) {
        channel->Issue(launch.channel_id, m.job, ctx.account ? ctx.account->credentials.uid : channel->self_uid());
      } else if (env_ok.ok()) {
        env_ok = nonce.status();
      }
      auto pid = env_ok.ok() ? launcher.Launch(launch.spec) : Result<pid_t>(env_ok);
      if (!pid.ok()) {
        // The job's failure, not the agent's: its user hears of it through the
        // scheduler (exit 127 and the reason), so an info line here.
        spdlog::info("job {} worker {} could not start: {}", m.job, wp.worker, pid.status().ToString());
        channel->Revoke(launch.channel_id);
        ReportExit(LaunchFailure(opt.id, m.job, wp.worker, m.generation, pid.status().message()));
        continue;
      }
      LocalWorker w;
      w.stdout_path = launch.spec.stdout_path;
      w.job = m.job;
      w.id = wp.worker;
      if (ctx.use_store) w.store_key = m.store_prefix;
      w.identity = launch.channel_id;
      w.generation = m.generation;
      w.rank = wp.rank;
      w.world = static_cast<int>(m.members.size());
      w.slot = wp.local_slot;
      w.pid = *pid;
      if (ctx.account) w.owner = std::pair(ctx.account->credentials.uid, ctx.account->credentials.gid);
      workers.Add(w);
      spdlog::info("job {} worker {} (rank {}, slot {}) started: pid {}", m.job, wp.worker, wp.rank, wp.local_slot,
                   *pid);
    }
    running = static_cast<int>(workers.size());
  }

  void OnNewGeneration(const p::NewGeneration& m) {
    if (session->Stale(m.job, m.generation, "new_generation")) return;
    workers.Apply(m, Now() + opt.leave_timeout);
    spdlog::info("job {}: generation {} with {} members, {} leaving here", m.job, m.generation, m.members.size(),
                 m.leaving.size());
    if (UsesStore(m.store_endpoint)) announcer.Plan(m, Now());
  }

  void OnStop(const p::StopWorkers& m) {
    std::set<p::WorkerId> which(m.workers.begin(), m.workers.end());
    if (m.checkpoint_first) {
      // A preemption notice: the runtime checkpoints and stops at its next
      // step boundary; SIGTERM (which it treats the same) follows as the backstop.
      p::WorkerCheckpointRequest req;
      req.job = m.job;
      req.reason = m.reason;
      req.deadline_seconds = m.grace_seconds;
      req.stop_after = true;
      PushToWorkers(m.job, "", req, which);
    }
    for (LocalWorker* w : workers.Of(m.job, which)) StopWorker(*w, m.grace_seconds, m.reason);
  }

  // worker_life.h b, c, e: without a grace, SIGKILL now; else SIGTERM once
  // and its notice, the SIGKILL at the earliest deadline any stop asked for.
  // A killed worker is asked nothing more.
  void StopWorker(LocalWorker& w, double grace, const std::string& reason) {
    if (grace <= 0) {
      if (!w.life.Kill()) return;  // killed before
      launcher.Signal(w.pid, SIGKILL);
    } else {
      const double now = Now();
      const bool first = w.life.Stop(now, grace);
      if (w.life.state() != WorkerLife::State::kStopping) return;  // killed before
      Notify(w, first ? grace : std::min(grace, w.life.kill_at() - now), reason);
    }
    spdlog::info("job {} worker {}: stopping ({}; grace {} s)", w.job, w.id, reason, grace);
    launcher.RequestStop(w.pid, grace);
  }

  // The worker's stop notice, just before its SIGTERM (stop_notice.h).
  void Notify(const LocalWorker& w, double grace_seconds, const std::string& reason) {
    if (Status st = notices->WriteFor(w.job, w.id, grace_seconds, reason, w.owner); !st.ok())
      spdlog::warn("job {} worker {}: {}", w.job, w.id, st.ToString());
  }

  void OnPush(const p::Message& msg) {
    if (session->FromDeposedLeader(msg)) return;
    if (auto* m = std::get_if<p::StartWorkers>(&msg)) return OnStart(*m);
    if (auto* m = std::get_if<p::NewGeneration>(&msg)) return OnNewGeneration(*m);
    if (auto* m = std::get_if<p::StopWorkers>(&msg)) return OnStop(*m);
    if (auto* m = std::get_if<p::LogRead>(&msg)) return session->Send(ReadWorkerLog(opt.log_dir, opt.id, *m));
    if (auto* a = std::get_if<p::HeartbeatAck>(&msg)) return session->OnHeartbeatAck(*a);
    if (auto* a = std::get_if<p::WorkerExitAck>(&msg)) return exits.Acked(a->job, a->worker);
    if (auto* m = std::get_if<p::WorkerCheckpointRequest>(&msg)) {
      spdlog::info("job {}: checkpoint requested ({})", m->job, m->reason);
      return PushToWorkers(m->job, "", *m);
    }
    if (auto* e = std::get_if<p::Error>(&msg)) return session->OnError(*e);
    if (auto* c = std::get_if<p::ServingCommand>(&msg)) return OnServingCommand(*c);
    spdlog::warn("unexpected push '{}' ignored", p::TypeName(msg));
  }

  // statvfs of the log directory, at most every 5 s (it is on the loop).
  std::int64_t LogFreeBytes() {
    double now = Now();
    if (now - log_free_checked < 5) return log_free;
    log_free_checked = now;
    struct statvfs st {};
    log_free = ::statvfs(opt.log_dir.c_str(), &st) == 0 ? std::int64_t(st.f_bavail) * std::int64_t(st.f_frsize) : -1;
    return log_free;
  }

  // No word from the scheduler for the whole lease: it may already have
  // started this agent's jobs elsewhere. Every worker here checkpoints and
  // stops (SIGTERM, which the runtime turns into a checkpoint and a clean
  // stop), SIGKILL after kLeaseStopGraceSeconds; the agent then waits for the
  // scheduler and registers again, reporting how its workers ended.
  void LeaseTick() {
    SchedulerLease& lease = session->lease();
    double now = Now();
    if (!lease.Expired(now)) return;
    lease.Drop();
    if (workers.empty()) return;
    spdlog::error("no word from the scheduler for {:.1f} s (the lease): stopping the {} workers here",
                  lease.lease_seconds(), workers.size());
    for (p::JobId job : workers.Jobs()) {
      p::WorkerCheckpointRequest req;
      req.job = job;
      req.reason = "the agent lost its lease from the scheduler";
      req.deadline_seconds = p::kLeaseStopGraceSeconds;
      req.stop_after = true;
      PushToWorkers(job, "", req);
    }
    for (auto& [pid, w] : workers) StopWorker(w, p::kLeaseStopGraceSeconds, "the agent lost its lease from the scheduler");
  }

  // What the scheduler learns of a worker's end (exit_book.h), with what its
  // channel said (WorkerHello, WorkerDone).
  p::WorkerExited ExitOf(const LocalWorker& w, const ExitInfo& ex) {
    WorkerChannel::Ending end = channel->TakeEnding(w.identity);
    return ExitReport(opt.id, w.job, w.id, w.generation, ex, end.runtime, end.done);
  }

  // Kept until acknowledged, sent now while registered (exit_book.h).
  void ReportExit(const p::WorkerExited& m) {
    exits.Add(m);
    if (session->registered()) session->Send(m);
  }

  void ResendExits() {
    if (!session->registered()) return;
    for (const auto& m : exits.DueForResend(Now())) session->Send(m);
  }

  void Reap() {
    for (pid_t pid : workers.OverdueLeavers(Now())) launcher.RequestStop(pid, WorkerLife::kOverdueGrace);
    for (const auto& ex : launcher.Poll()) {
      auto it = workers.find(ex.pid);
      if (it == workers.end()) continue;
      LocalWorker& w = it->second;
      w.life.Exit();
      spdlog::info("job {} worker {} {}", w.job, w.id, ex.Describe());
      p::JobId job = w.job;
      ReportExit(ExitOf(w, ex));
      announcer.MemberEnded(job, w.id);
      notices->Remove(job, w.id);
      workers.erase(it);
      Forget(job);
    }
    running = static_cast<int>(workers.size());
  }

  // Drops a job's generation records once none of its workers runs here
  // (a later StartWorkers records its generation again).
  void Forget(p::JobId job) {
    if (workers.Hosts(job)) return;
    announcer.JobEnded(job);
    channel->ForgetJob(job);
  }

  // Takes the worker messages the channel's thread queued (protocol 13, 14, 16).
  void DrainWorkerMessages() {
    for (auto& msg : channel->TakeInbox()) {
      if (auto* r = std::get_if<p::WorkerResizeReport>(&msg)) {
        OnWorkerResizeReport(*r);
      } else if (auto* pr = std::get_if<p::WorkerProgress>(&msg)) {
        progress.OnWorkerProgress(*pr);
      } else if (auto* c = std::get_if<p::CheckpointReport>(&msg)) {
        c->agent_id = opt.id;  // rank 0's checkpoint, relayed (protocol/inspect.h, step 8)
        if (session->registered()) session->Send(*c);
      } else if (auto* l = std::get_if<p::WorkerLeave>(&msg)) {
        spdlog::info("job {} worker {} leaves at step {} (not in generation {})", l->job, l->worker, l->step,
                     l->generation);
      } else {
        spdlog::warn("worker channel: unexpected '{}' ignored", p::TypeName(msg));
      }
    }
  }

  // Rank 0's WorkerResizeReport becomes the scheduler's ResizeReport (protocol 8);
  // it also ends the agent's wait for that change (GenerationQueue, T4).
  void OnWorkerResizeReport(const p::WorkerResizeReport& w) {
    p::ResizeReport r;
    r.job = w.job;
    r.generation = w.generation;
    r.from_workers = w.from_workers;
    r.to_workers = w.to_workers;
    r.planned = w.planned;
    r.phases = w.phases;
    spdlog::info("job {}: {} resize into generation {}: {} -> {} workers, pause {:.3f} s", w.job,
                 w.planned ? "planned" : "fault", w.generation, w.from_workers, w.to_workers, w.phases.total);
    announcer.Reported(w.job, w.generation);
    if (session->registered()) session->Send(r);
  }

  // The first WorkerHello of a job's workers, and rank 0's progress (progress_relay.h).
  void ReportProgress() {
    if (session->registered()) {
      auto hello = [this](const std::string& identity) { return channel->SaidHello(identity); };
      for (const auto& m : progress.RuntimeReports(workers, hello)) session->Send(m);
    }
    for (const auto& m : progress.Tick(Now(), workers, session->registered())) session->Send(m);
  }

  // An agreed generation: kept for WorkerHello and pushed to the job's workers here.
  void Announce(const p::GenerationAnnounce& a) {
    channel->Remember(a);
    PushToWorkers(a.job, a.store_prefix, a);
  }

  // Protocol/serving.h S2: the newest command wins.
  void OnServingCommand(const p::ServingCommand& c) {
    if (!serving) {
      spdlog::warn("serving_command ignored: this agent has no --serving-start");
      return;
    }
    spdlog::info("serving: the scheduler says {}", c.lend ? "lend the server" : "serve");
    serving->Command(c.lend);
  }

  // S1 and S3: the serving side's steps, and a report of each change.
  void ServingTick(double now) {
    if (!serving || !serving->Tick(now, started)) return;
    p::ServingReport r;
    r.agent_id = opt.id;
    r.status = serving->Status();
    spdlog::info("serving: {}{}", r.status.state, r.status.error.empty() ? "" : " (" + r.status.step + ": " + r.status.error + ")");
    if (session->registered()) session->Send(r);
  }

  Status Run() {
    started = Now();
    while (!stop) {
      double now = Now();
      session->FailoverIfQuiet(now);
      if (session->RegisterDue(now)) session->Register(RegisterMessage());
      if (session->HeartbeatDue(now)) session->Heartbeat(HeartbeatMessage(), now);
      auto msg = session->Receive(milliseconds(20));
      if (msg.ok()) OnPush(*msg);
      DrainWorkerMessages();
      LeaseTick();
      Reap();
      ResendExits();
      ReportProgress();
      announcer.Pump(Now(), [this](const p::GenerationAnnounce& a) { Announce(a); });
      ServingTick(Now());
    }
    serving.reset();  // stops the serving process and any hook (bounded)
    spdlog::info("agent {} stopping: {} workers", opt.id, workers.size());
    for (const auto& [pid, w] : workers) Notify(w, kShutdownGraceSeconds, "the agent is stopping");
    for (const auto& ex : launcher.StopAll(kShutdownGraceSeconds)) {
      auto it = workers.find(ex.pid);
      if (it == workers.end()) continue;
      notices->Remove(it->second.job, it->second.id);
      ReportExit(ExitOf(it->second, ex));
      workers.erase(it);
    }
    running = 0;
    session->Close();
    return Status::Ok();
  }
};

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() = default;

Result<std::unique_ptr<Agent>> Agent::Create(AgentOptions given) {
  auto impl = std::make_unique<Impl>();
  ARYL_ASSIGN_OR_RETURN(ResolvedOptions resolved, ResolveAgentOptions(std::move(given)));
  const AgentOptions& options = resolved.options;
  impl->pool = resolved.pool;
  impl->gpus = resolved.gpus;
  ARYL_ASSIGN_OR_RETURN(impl->session, SchedulerSession::Connect(options, resolved.schedulers));
  impl->relay = MakeStoreRelay();
  // The store answers only requests with a job's token, once the scheduler
  // has given this agent the cluster's store key (Register).
  p::SetProcessStoreAuth({p::StoreAuth::Mode::kRequired, ""});
  if (impl->relay) {
    ARYL_ASSIGN_OR_RETURN(impl->store_endpoint, impl->relay->Serve(options.host, options.store_port));
    impl->announcer.UseProbe(std::make_unique<StoreProbe>(impl->relay));
    spdlog::info("rendezvous store on {}", impl->store_endpoint);
  }
  if (!options.run_as.empty()) {
    if (::geteuid() != 0)
      return Status::InvalidArgument("--run-as '" + options.run_as + "' needs aryl-agent to run as root (euid " +
                                     std::to_string(::geteuid()) + ")");
    ARYL_ASSIGN_OR_RETURN(impl->user_map, UserMap::Load(options.run_as));
    spdlog::info("workers run as their owner's account ({} mappings in {})", impl->user_map->size(), options.run_as);
  } else if (::geteuid() == 0) {
    spdlog::warn("running as root without --run-as: a local user's job (keyless ipc:// scheduler) runs as its "
                 "owner's account, every other job's workers run as root (docs/security.md)");
  }
  impl->opt = options;
  impl->notices.emplace(fs::path(options.log_dir) / "notices");
  ARYL_ASSIGN_OR_RETURN(impl->serving, ServingSide::Create(options, resolved.pool));
  ARYL_RETURN_IF_ERROR(impl->notices->Prepare());
  impl->worker_env = WorkerEnvFilter(options.worker_env);
  ARYL_ASSIGN_OR_RETURN(impl->channel,
                        WorkerChannel::Start(options.log_dir, options.id, impl->WorkersMayRunAsOthers()));
  spdlog::info("worker channel on {}", impl->channel->endpoint());
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Status Agent::Run() { return impl_->Run(); }
void Agent::Stop() { impl_->stop = true; }
const AgentOptions& Agent::options() const { return impl_->opt; }
int Agent::running_workers() const { return impl_->running; }

}  // namespace aryl::agent
