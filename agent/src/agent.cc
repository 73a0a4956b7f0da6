// The agent's loop (agent.h). What it decides on each command, on the lease
// and on a worker's end is AgentCore's (agent_core.h); Agent::Impl is the
// world that core acts on in the binary: it is the WorkerHost (fork/exec
// through ProcessLauncher, signals, stop notices, the worker channel) and
// wires the scheduler session (scheduler_session.h, the SchedulerLink), the
// launch of workers (launch_spec.h), progress (progress_relay.h) and
// generations announced through the store (generation_announcer.h).
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

#include "agent_core.h"
#include "agent_options.h"
#include "agent_security.h"
#include "aryl/agent/process.h"
#include "aryl/agent/store_relay.h"
#include "aryl/clock.h"
#include "aryl/protocol/messages.h"
#include "aryl/protocol/scheduler_client.h"
#include "aryl/protocol/store.h"
#include "generation_announcer.h"
#include "launch_spec.h"
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

class Agent::Impl final : public WorkerHost {
 public:
  static constexpr double kShutdownGraceSeconds = 5;  // SIGTERM..SIGKILL when the agent stops

  AgentOptions opt;
  std::unique_ptr<SchedulerSession> session;  // registration, heartbeats, lease, term fencing
  ProcessLauncher launcher;
  std::unique_ptr<AgentCore> core;  // what to do on each command, lease and exit (agent_core.h)
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
  std::optional<StopNotices> notices;      // ARYL_STOP_NOTICE files (stop_notice.h)
  std::unique_ptr<ServingSide> serving;    // --serving-start (protocol/serving.h)
  double started = 0;                      // when Run began
  double log_free_checked = -10;
  std::int64_t log_free = -1;
  WorkerLaunchContext start_ctx;  // of the StartWorkers being launched (Starting)
  Status start_ok;

  ~Impl() { channel.reset(); }  // no worker is heard once the agent goes

  bool UsesStore(const std::string& endpoint) const {
    return relay && !endpoint.empty() && endpoint != "none";
  }

  // What this agent is, runs and has to report (protocol step 1).
  p::AgentRegister RegisterMessage() const {
    p::AgentRegister m = core->RegisterMessage();
    if (serving) m.serving = serving->Status();
    return m;
  }

  // Protocol step 2: free slots, the workers and the log disk's free space.
  p::Heartbeat HeartbeatMessage() {
    p::Heartbeat hb = core->HeartbeatMessage();
    hb.log_free_bytes = LogFreeBytes();
    return hb;
  }

  // Whether workers may run as other accounts than the agent's (the worker
  // channel's socket must then be reachable by them).
  bool WorkersMayRunAsOthers() const { return user_map.has_value() || ::geteuid() == 0; }

  // WorkerHost: what all workers of a StartWorkers share. A refused
  // environment or account fails every worker's start, like an exec error.
  void Starting(const p::StartWorkers& m) override {
    start_ok = CheckJobEnv(m.env, opt.env_deny, opt.env_allow);
    start_ctx = WorkerLaunchContext{};
    WorkerLaunchContext& ctx = start_ctx;
    if (start_ok.ok()) {
      auto a = WorkerAccount(user_map ? &*user_map : nullptr, m.owner, m.owner_uid);
      if (a.ok()) {
        ctx.account = *a;
      } else {
        start_ok = a.status();
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
  }

  // WorkerHost: one worker's fork/exec with its channel identity and stop notice.
  Result<StartedWorker> Launch(const p::StartWorkers& m, const p::WorkerPlacement& wp) override {
    const WorkerLaunchContext& ctx = start_ctx;
    Status ok = start_ok;
    // The channel identity's random part (worker_channel.h, step 4).
    auto nonce = p::NewStoreKey();
    WorkerLaunch launch =
        BuildWorkerLaunch(m, wp, ctx, nonce.ok() ? std::optional(nonce->substr(0, 32)) : std::nullopt);
    notices->Remove(m.job, wp.worker);
    launch.spec.env["ARYL_STOP_NOTICE"] = notices->PathOf(m.job, wp.worker);
    if (nonce.ok()) {
      channel->Issue(launch.channel_id, m.job, ctx.account ? ctx.account->credentials.uid : channel->self_uid());
    } else if (ok.ok()) {
      ok = nonce.status();
    }
    auto pid = ok.ok() ? launcher.Launch(launch.spec) : Result<pid_t>(ok);
    if (!pid.ok()) {
      channel->Revoke(launch.channel_id);
      return pid.status();
    }
    StartedWorker w;
    w.pid = *pid;
    w.identity = launch.channel_id;
    w.stdout_path = launch.spec.stdout_path;
    if (ctx.use_store) w.store_key = m.store_prefix;
    if (ctx.account) w.owner = std::pair(ctx.account->credentials.uid, ctx.account->credentials.gid);
    return w;
  }

  void RequestStop(pid_t pid, double grace) override { launcher.RequestStop(pid, grace); }
  void Kill(pid_t pid) override { launcher.Signal(pid, SIGKILL); }

  // The worker's stop notice, just before its SIGTERM (stop_notice.h).
  void Notify(const LocalWorker& w, double grace_seconds, const std::string& reason) override {
    if (Status st = notices->WriteFor(w.job, w.id, grace_seconds, reason, w.owner); !st.ok())
      spdlog::warn("job {} worker {}: {}", w.job, w.id, st.ToString());
  }

  void Push(const LocalWorker& w, const p::Message& m) override {
    Status st = channel->Push(w.identity, m);
    if (!st.ok()) spdlog::warn("job {} worker {}: push {}: {}", w.job, w.id, p::TypeName(m), st.ToString());
  }

  WorkerEnding TakeEnding(const LocalWorker& w) override {
    WorkerChannel::Ending end = channel->TakeEnding(w.identity);
    return {end.runtime, end.done};
  }

  // Drops a job's generation records once none of its workers runs here
  // (a later StartWorkers records its generation again).
  void Ended(const LocalWorker& w, bool last) override {
    announcer.MemberEnded(w.job, w.id);
    notices->Remove(w.job, w.id);
    if (!last) return;
    announcer.JobEnded(w.job);
    channel->ForgetJob(w.job);
  }

  void OnPush(const p::Message& msg) {
    if (session->FromDeposedLeader(msg) || session->Overtaken(msg)) return;
    if (auto* m = std::get_if<p::NewGeneration>(&msg)) {
      if (core->OnNewGeneration(*m) && UsesStore(m->store_endpoint)) announcer.Plan(*m, Now());
      return;
    }
    if (core->OnCommand(msg)) return;
    if (auto* m = std::get_if<p::LogRead>(&msg)) return session->Send(ReadWorkerLog(opt.log_dir, opt.id, *m));
    if (auto* a = std::get_if<p::HeartbeatAck>(&msg)) return session->OnHeartbeatAck(*a);
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

  // Reaps the workers that ended; the core reports them.
  void Reap() {
    for (const auto& ex : launcher.Poll()) core->OnExit(ex);
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
      for (const auto& m : progress.RuntimeReports(core->workers(), hello)) session->Send(m);
    }
    for (const auto& m : progress.Tick(Now(), core->workers(), session->registered())) session->Send(m);
  }

  // An agreed generation: kept for WorkerHello and pushed to the job's workers here.
  void Announce(const p::GenerationAnnounce& a) {
    channel->Remember(a);
    core->PushToWorkers(a.job, a.store_prefix, a);
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
      core->Tick();
      Reap();
      running = static_cast<int>(core->workers().size());
      ReportProgress();
      announcer.Pump(Now(), [this](const p::GenerationAnnounce& a) { Announce(a); });
      ServingTick(Now());
    }
    serving.reset();  // stops the serving process and any hook (bounded)
    spdlog::info("agent {} stopping: {} workers", opt.id, core->workers().size());
    for (const auto& [pid, w] : core->workers()) Notify(w, kShutdownGraceSeconds, "the agent is stopping");
    for (const auto& ex : launcher.StopAll(kShutdownGraceSeconds)) core->OnExit(ex);
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
  p::AgentRegister self;
  self.agent_id = options.id;
  self.host = options.host;
  self.pool = resolved.pool;
  self.gpu_type = options.gpu_type;
  self.slots = options.slots;
  self.store_endpoint = impl->store_endpoint;
  self.cluster_id = options.cluster_id;
  impl->core = std::make_unique<AgentCore>(std::move(self), options.leave_timeout, *SystemClock::Default(),
                                           *impl->session, *impl);
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Status Agent::Run() { return impl_->Run(); }
void Agent::Stop() { impl_->stop = true; }
const AgentOptions& Agent::options() const { return impl_->opt; }
int Agent::running_workers() const { return impl_->running; }

}  // namespace aryl::agent
