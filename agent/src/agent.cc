#include "aryl/agent/agent.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <set>
#include <thread>

#include "aryl/agent/gpu.h"
#include "aryl/agent/process.h"
#include "aryl/agent/store_relay.h"
#include "aryl/clock.h"
#include "aryl/protocol/generation.h"
#include "aryl/protocol/messages.h"
#include "aryl/protocol/scheduler_client.h"
#include "aryl/protocol/security.h"
#include "aryl/protocol/store.h"
#include "aryl/protocol/transport.h"
#include "aryl/torchrun_env.h"
#include "agent_security.h"
#include "aryl/agent/generation_queue.h"
#include "host_address.h"
#include "lease.h"
#include "store_probe.h"
#include "log_reader.h"
#include "run_as.h"
#include "stdout_progress.h"

static_assert(std::string_view(aryl::protocol::kDefaultSchedulerEndpoint) == "ipc:///run/aryl/scheduler.sock",
              "AgentOptions::scheduler's default is the scheduler's");

namespace aryl::agent {

namespace p = aryl::protocol;
namespace fs = std::filesystem;
using std::chrono::milliseconds;

namespace {
double Now() { return SystemClock::Default()->NowSeconds(); }

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

class Agent::Impl {
 public:
  struct Worker {
    p::JobId job = 0;
    p::WorkerId id = 0;
    std::int64_t generation = 0;
    std::int64_t rank = 0;
    std::int64_t slot = 0;
    pid_t pid = 0;
    double leave_deadline = -1;  // leaver: stop after this time
    std::string store_key;       // the job's key in its store (empty: no store)
    std::string identity;        // its DEALER's routing id on the worker channel
    int world = 0;               // its generation's world size
    std::string stdout_path;
    StdoutProgress progress;     // rank 0's progress lines (stdout_progress.h)
  };

  AgentOptions opt;
  std::unique_ptr<p::SchedulerClient> client;  // the leader among --scheduler's list
  bool several_schedulers = false;             // --scheduler lists more than one
  ProcessLauncher launcher;
  std::map<pid_t, Worker> workers;
  std::atomic<bool> stop{false};
  std::atomic<int> running{0};
  bool registered = false;
  bool ever_registered = false;  // this process has registered with some leader
  double heartbeat_interval = 1.0;
  double last_heartbeat = 0;
  double last_ack = 0;  // the newest registration or HeartbeatAck taken (monotonic)
  double last_register_try = -10;
  double last_progress = 0;
  std::uint64_t seq = 0;
  // This process's identity for the scheduler (AgentRegister::instance).
  std::uint64_t instance = std::random_device{}() * 4294967296ull + std::random_device{}() + 1;
  SchedulerLease lease;  // lease.h: how long workers may run without the scheduler
  // Fencing: the newest scheduler generation seen per job. A StartWorkers or
  // NewGeneration below it was overtaken (a queued message from before a
  // restart elsewhere) and is refused.
  std::map<p::JobId, std::int64_t> newest_generation;
  // Term fencing (messages.h): the highest scheduler term seen here; commands
  // and acknowledgements of a lower one come from a deposed leader.
  std::uint64_t term = 0;
  std::uint64_t scheduler_epoch = 0;
  p::Pool pool = p::Pool::kTraining;
  bool gpus = false;
  std::shared_ptr<StoreRelay> relay;
  std::unique_ptr<StoreProbe> probe;  // the relay's queries, off the loop (store_probe.h)
  std::string store_endpoint;  // this agent's store; empty without a relay
  std::optional<UserMap> user_map;  // --run-as: workers run as their owner's account
  std::function<bool(const std::string&)> worker_env;  // --worker-env (null: all)

  // The worker channel (protocol steps 12-16): a ROUTER on an ipc:// endpoint
  // in the log directory (ARYL_AGENT_ENDPOINT). The server thread answers
  // WorkerHello from `announced`; every other worker message is queued for
  // the loop thread, which owns the rest of the state.
  std::string worker_endpoint;
  std::string worker_socket_path;
  std::unique_ptr<p::Server> worker_server;
  struct Channel {
    std::mutex mu;
    std::map<std::pair<p::JobId, std::int64_t>, p::GenerationAnnounce> announced;  // (job, store generation)
    std::vector<p::Message> inbox;
    // By channel identity: workers that said WorkerHello (they link the
    // runtime) and the WorkerDone each reported before exiting (its outcome
    // and the step it ended at).
    std::set<std::string> hello;
    std::map<std::string, p::WorkerDone> outcome;
    // The identity each worker was told to connect with (ARYL_CHANNEL_ID:
    // "worker-<job>-<worker>-<128 random bits>", unguessable), the job it was
    // started for and the account it runs as. A peer of another uid than the
    // agent's own (SO_PEERCRED; --run-as workers) is heard only under an
    // identity issued to that uid, about that identity's job: it can neither
    // speak for another account's worker nor take its pushes by guessing its
    // identity. Peers of the agent's own uid are not checked: they could
    // ptrace the agent anyway.
    struct Issued {
      p::JobId job = 0;
      uid_t uid = 0;
    };
    uid_t self_uid = ::geteuid();
    std::map<std::string, Issued> issued;
    std::optional<p::Message> Refusal(const p::ReplyTo& from, const p::Message& m) const {
      const auto& uid = from.peer.uid;
      if (!uid || *uid == self_uid) return std::nullopt;
      std::optional<p::JobId> job;
      std::visit([&](const auto& x) {
        if constexpr (requires { x.job; }) job = x.job;
      }, m);
      auto it = issued.find(from.peer.identity);
      if (it != issued.end() && it->second.uid == *uid && (!job || *job == it->second.job)) return std::nullopt;
      return p::Error{Status::Code::kPermissionDenied,
                      "worker channel: uid " + std::to_string(*uid) + " does not run " +
                          (job ? "job " + std::to_string(*job) : std::string("that job")) +
                          " under this identity on this agent"};
    }
  };
  std::shared_ptr<Channel> channel = std::make_shared<Channel>();
  // Rank 0's newest WorkerProgress per job; `fresh` until sent as a JobProgress.
  struct LatestProgress {
    p::WorkerProgress msg;
    bool fresh = false;
  };
  std::map<p::JobId, LatestProgress> worker_progress;
  std::map<p::JobId, double> stdout_loss;  // the newest loss rank 0 printed
  std::set<p::JobId> runtime_reported;     // jobs whose program was seen to link the runtime

  // The job's generations (plans) in flight here: announced to the workers
  // once every member is ready, then waited for until the runtime reports the
  // switch; the newest plan of a job supersedes older ones (generation_queue.h).
  GenerationQueue generations;
  // Worker exits the scheduler has not acknowledged yet, by (job, worker).
  static constexpr double kExitResendSeconds = 2.0;
  std::map<std::pair<p::JobId, p::WorkerId>, p::WorkerExited> unacked_exits;
  double last_exit_resend = 0;

  // torchrun's variables for a worker of `m` (aryl/torchrun_env.h). Local ranks
  // count the workers this message starts here; MASTER_ADDR is the store's host,
  // so env:// rendezvous of a multi-machine job needs rank 0 on that host.
  static TorchrunPlacement TorchrunPlacementOf(const p::StartWorkers& m, const p::WorkerPlacement& wp) {
    TorchrunPlacement t;
    t.rank = int(wp.rank);
    t.world_size = int(m.members.size());
    t.local_world_size = int(m.workers.size());
    int lowest = t.rank;
    for (const auto& other : m.workers) {
      if (other.rank < wp.rank) ++t.local_rank;
      lowest = std::min(lowest, int(other.rank));
    }
    t.group_rank = lowest / std::max(1, t.local_world_size);
    std::string host = m.store_endpoint;
    if (auto s = host.find("://"); s != std::string::npos) host = host.substr(s + 3);
    if (auto c = host.rfind(':'); c != std::string::npos) host = host.substr(0, c);
    t.master_addr = host.empty() || host == "*" || host == "none" ? "127.0.0.1" : host;
    // The scheduler's choice for this start (--port-range); a scheduler that
    // does not send one leaves every agent to derive the same port.
    t.master_port = TorchrunMasterPort(m.job, m.generation, m.store_endpoint);
    if (auto it = m.env.find("ARYL_MASTER_PORT"); it != m.env.end()) {
      int port = 0;
      auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), port);
      if (ec == std::errc() && end == it->second.data() + it->second.size() && port > 0 && port < 65536)
        t.master_port = port;
    }
    t.group_world_size = (t.world_size + t.local_world_size - 1) / std::max(1, t.local_world_size);
    if (auto it = m.env.find("TORCHELASTIC_MAX_RESTARTS"); it != m.env.end()) t.max_restarts = it->second;
    t.run_id = std::to_string(m.job);
    t.restart_count = m.restart_count.value_or(0);
    return t;
  }

  bool UsesStore(const std::string& endpoint) const {
    return relay && !endpoint.empty() && endpoint != "none";
  }

  static std::vector<std::string> Ids(const std::vector<p::WorkerId>& ids) {
    std::vector<std::string> out;
    for (auto id : ids) out.push_back(std::to_string(id));
    return out;
  }

  static p::GenerationAnnounce MakeAnnounce(p::JobId job, std::int64_t generation, const std::vector<p::WorkerId>& members,
                                            const std::string& endpoint, const std::string& key) {
    p::GenerationAnnounce a;
    a.job = job;
    a.generation = generation;
    a.members = members;
    a.store_endpoint = endpoint;
    a.store_prefix = key;
    return a;
  }

  // Workers started for `a.generation` ask for it in their WorkerHello.
  void Remember(const p::GenerationAnnounce& a) {
    std::lock_guard<std::mutex> lock(channel->mu);
    channel->announced[{a.job, a.generation}] = a;
  }

  // Pushes `m` to this agent's running workers of the job start `key`.
  void PushToWorkers(p::JobId job, const std::string& key, const p::Message& m,
                     const std::set<p::WorkerId>* only = nullptr) {
    for (const auto& [pid, w] : workers) {
      if (w.job != job || w.identity.empty() || (!key.empty() && w.store_key != key)) continue;
      if (only && !only->empty() && !only->count(w.id)) continue;
      Status st = worker_server->Push(w.identity, m);
      if (!st.ok()) spdlog::warn("job {} worker {}: push {}: {}", job, w.id, p::TypeName(m), st.ToString());
    }
  }

  Status StartWorkerChannel() {
    ARYL_ASSIGN_OR_RETURN(fs::path path, WorkerSocketPath(opt.log_dir, opt.id, WorkersMayRunAsOthers()));
    std::error_code ec;
    fs::remove(path, ec);  // a socket file left by an agent that died
    p::Server::Options so;
    so.endpoint = "ipc://" + path.string();
    std::shared_ptr<Channel> ch = channel;
    auto server = p::Server::Start(so, [ch](const p::ReplyTo& from, p::Message m) -> std::optional<p::Message> {
      std::lock_guard<std::mutex> lock(ch->mu);
      if (auto refused = ch->Refusal(from, m)) return refused;
      if (auto* d = std::get_if<p::WorkerDone>(&m)) {
        // Answered here, once recorded, so the report cannot race the exit.
        Status v = d->Validate();
        if (!v.ok()) return p::Error::FromStatus(v);
        if (ch->outcome.size() < 100000) ch->outcome[from.peer.identity] = *d;
        return p::Ok{"recorded"};
      }
      if (auto* h = std::get_if<p::WorkerHello>(&m)) {
        ch->hello.insert(from.peer.identity);
        auto it = ch->announced.find({h->job, h->generation});
        if (it == ch->announced.end()) {
          return p::Error{Status::Code::kNotFound, "job " + std::to_string(h->job) + ": generation " +
                                                       std::to_string(h->generation) + " unknown to this agent"};
        }
        return it->second;
      }
      if (ch->inbox.size() < 10000) ch->inbox.push_back(std::move(m));
      return std::nullopt;
    });
    if (!server.ok()) return server.status().WithContext("worker channel " + so.endpoint);
    worker_server = std::move(*server);
    worker_endpoint = worker_server->endpoint();
    worker_socket_path = path.string();
    // Workers of other accounts must reach the socket; who may say what is
    // checked per message (Channel::Refusal).
    if (WorkersMayRunAsOthers()) ARYL_RETURN_IF_ERROR(MakeSocketReachable(path));
    return Status::Ok();
  }

  ~Impl() {
    if (worker_server) {
      worker_server->Close();
      worker_server->Join();
      std::error_code ec;
      fs::remove(worker_socket_path, ec);
      fs::remove(fs::path(worker_socket_path).parent_path(), ec);  // its private directory, if empty
    }
  }

  std::vector<p::RunningWorker> Running() const {
    std::vector<p::RunningWorker> out;
    for (const auto& [pid, w] : workers) out.push_back({w.job, w.id, w.generation, w.rank, w.slot, pid});
    return out;
  }

  void Register() {
    last_register_try = Now();
    p::AgentRegister m;
    m.agent_id = opt.id;
    m.host = opt.host;
    m.pool = pool;
    m.gpu_type = opt.gpu_type;
    m.slots = opt.slots;
    m.workers = Running();
    m.store_endpoint = store_endpoint;
    for (const auto& [key, ex] : unacked_exits) m.exited.push_back(ex);
    m.cluster_id = opt.cluster_id;
    m.instance = instance;
    double sent = Now();  // monotonic (clock.h): the lease's clock too
    auto reply = client->Call<p::AgentRegistered>(m, milliseconds(static_cast<int>(opt.request_timeout * 1000)));
    if (!reply.ok()) {
      if (reply.status().IsTimeout()) spdlog::debug("register: scheduler not reachable yet");
      else if (p::IsStandbyError(reply.status())) spdlog::info("register: {}", reply.status().message());
      else if (p::IsFrozenError(reply.status()) && ever_registered) {
        // The leader is there but cannot decide (etcd unreachable): it still
        // acks the heartbeats of the agents it knows, which keeps the
        // workers' lease. Go on heartbeating; register once it decides again.
        spdlog::warn("register: {}; heartbeating on", reply.status().message());
        registered = true;
        last_ack = Now();
      } else spdlog::error("register refused: {}", reply.status().ToString());
      return;
    }
    if (Deposed(reply->term, "agent_registered")) {
      // A leader that lost its term answered; its successor is elsewhere in the list.
      (void)client->Failover("it answered with the deposed term " + std::to_string(reply->term));
      return;
    }
    registered = true;
    ever_registered = true;
    last_ack = Now();
    lease.Renew(sent, reply->lease_seconds);
    if (!reply->store_key.empty()) p::SetProcessStoreAuth({p::StoreAuth::Mode::kRequired, reply->store_key});
    heartbeat_interval = reply->heartbeat_interval_seconds;
    if (scheduler_epoch != 0 && scheduler_epoch != reply->scheduler_epoch) {
      spdlog::info("scheduler restarted; re-registered with {} running workers", workers.size());
    }
    scheduler_epoch = reply->scheduler_epoch;
    spdlog::info("registered with {} as {} ({} {} x{}, term {})", client->endpoint(), opt.id, opt.pool, opt.gpu_type,
                 opt.slots, reply->term);
    last_heartbeat = 0;
  }

  void Send(const p::Message& m) {
    Status st = client->Send(m, milliseconds(200));
    if (!st.ok()) spdlog::debug("send {}: {}", p::TypeName(m), st.ToString());
  }

  // Fencing (docs/architecture.md, "Leases and fencing"): a command for an
  // older generation of the job than one already seen here is stale.
  bool Stale(p::JobId job, std::int64_t generation, std::string_view what) {
    auto [it, fresh] = newest_generation.try_emplace(job, generation);
    if (!fresh && generation < it->second) {
      spdlog::warn("job {}: {} for generation {} refused: generation {} was seen here (stale)", job, what, generation,
                   it->second);
      return true;
    }
    it->second = generation;
    if (newest_generation.size() > 100000) newest_generation.erase(newest_generation.begin());
    return false;
  }

  // Term fencing (messages.h, "Term fencing"): whether a message of scheduler
  // term `t` comes from a deposed leader. Term 0 (a scheduler that stamps
  // none) passes only while no term was seen. Otherwise remembers `t`.
  bool Deposed(std::uint64_t t, std::string_view what) {
    if (t == 0 ? term == 0 : t >= term) {
      term = std::max(term, t);
      return false;
    }
    if (t == 0)
      spdlog::warn("{} without a term refused: term {} was seen here (a scheduler that stamps no term)", what, term);
    else
      spdlog::warn("{} of term {} refused: term {} was seen here (a deposed scheduler)", what, t, term);
    return true;
  }

  // The term a scheduler → agent message carries; nullopt for messages without one.
  static std::optional<std::uint64_t> TermOf(const p::Message& msg) {
    return std::visit([](const auto& m) -> std::optional<std::uint64_t> {
      if constexpr (requires { m.term; }) return m.term;
      return std::nullopt;
    }, msg);
  }
  static std::string Describe(const p::Message& msg) {
    return std::visit([](const auto& m) {
      std::string what(std::decay_t<decltype(m)>::kType);
      if constexpr (requires { m.job; }) what = "job " + std::to_string(m.job) + ": " + what;
      return what;
    }, msg);
  }

  // Whether workers may run as other accounts than the agent's (the worker
  // channel's socket must then be reachable by them).
  bool WorkersMayRunAsOthers() const { return user_map.has_value() || ::geteuid() == 0; }
  // The account a job's workers run as; nullopt: the agent's own. With
  // --run-as, the one mapped to the job's owner. Without it, a job whose owner
  // the scheduler knows by uid (keyless ipc://) runs as that uid: a root agent
  // switches to it; any other agent runs only its own account's and root's jobs
  // (another account's would gain the agent's rights).
  Result<std::optional<Account>> AccountFor(const p::StartWorkers& m) const {
    if (user_map) {
      ARYL_ASSIGN_OR_RETURN(Account a, user_map->Lookup(m.owner.value_or("local")));
      return std::optional<Account>(a);
    }
    // root's jobs may run with any account's rights, as may the agent's own.
    if (!m.owner_uid || *m.owner_uid == 0 || static_cast<uid_t>(*m.owner_uid) == ::geteuid())
      return std::optional<Account>();
    if (::geteuid() != 0)
      return Status::PermissionDenied("job of uid " + std::to_string(*m.owner_uid) + " ('" +
                                      m.owner.value_or("?") + "'): this agent runs as uid " +
                                      std::to_string(::geteuid()) +
                                      " and cannot start workers as another account (run aryl-agent as root)");
    ARYL_ASSIGN_OR_RETURN(Account a, ResolveAccount(static_cast<uid_t>(*m.owner_uid)));
    return std::optional<Account>(a);
  }
  void OnStart(const p::StartWorkers& m) {
    Status v = m.Validate();
    if (!v.ok()) {
      spdlog::error("start_workers for job {}: {}", m.job, v.ToString());
      return;
    }
    if (!lease.held() || lease.Expired(Now())) {
      // Only a message queued from before the lease ran out can get here: the
      // scheduler sends starts after a registration, which grants a lease.
      spdlog::warn("job {}: start_workers refused: this agent holds no lease from the scheduler", m.job);
      return;
    }
    if (Stale(m.job, m.generation, "start_workers")) return;
    // A refused environment fails every worker's start, like an exec error.
    Status env_ok = CheckJobEnv(m.env, opt.env_deny, opt.env_allow);
    std::optional<Account> account;
    if (env_ok.ok()) {
      auto a = AccountFor(m);
      if (a.ok()) {
        account = *a;
      } else {
        env_ok = a.status();
      }
    }
    fs::path dir = fs::path(opt.log_dir) / ("job-" + std::to_string(m.job));
    if (Status d = MakePrivateDir(dir); !d.ok()) spdlog::error("job {}: {}", m.job, d.ToString());
    bool use_store = UsesStore(m.store_endpoint);
    std::int64_t store_gen = use_store ? p::PlanGeneration(m.generation) : std::max<std::int64_t>(1, m.generation);
    // Fresh workers and joiners ask for their generation in WorkerHello:
    // the record exists before any of them starts.
    if (use_store) Remember(MakeAnnounce(m.job, store_gen, m.members, m.store_endpoint, m.store_prefix));
    for (const auto& wp : m.workers) {
      bool dup = false;
      for (const auto& [pid, w] : workers) dup |= w.job == m.job && w.id == wp.worker;
      if (dup) continue;
      LaunchSpec spec;
      spec.argv = m.argv;
      spec.cwd = m.cwd;
      spec.inherit = worker_env;
      spec.env = m.env;
      spec.env["ARYL_JOB_ID"] = std::to_string(m.job);
      spec.env["ARYL_WORKER_ID"] = std::to_string(wp.worker);
      spec.env["ARYL_GENERATION"] = std::to_string(store_gen);
      spec.env["ARYL_RANK"] = std::to_string(wp.rank);
      spec.env["ARYL_WORLD_SIZE"] = std::to_string(m.members.size());
      spec.env["ARYL_LOCAL_SLOT"] = std::to_string(wp.local_slot);
      spec.env["ARYL_AGENT_ID"] = opt.id;
      spec.env["ARYL_AGENT_ENDPOINT"] = worker_endpoint;
      // Peers on other servers reach this worker's Gloo pairs at the agent's
      // address (--host), not at the runtime's loopback default.
      if (!m.env.count("ARYL_GLOO_HOST")) spec.env["ARYL_GLOO_HOST"] = opt.host;
      SetTorchrunEnv(spec.env, TorchrunPlacementOf(m, wp));
      if (!m.checkpoint_dir.empty()) spec.env["ARYL_CHECKPOINT_DIR"] = m.checkpoint_dir;
      if (use_store) {
        spec.env["ARYL_STORE_ENDPOINT"] = m.store_endpoint;
        // "<job>-<start>": the runtime's store keys and its channel identity;
        // the message fields carry the numeric job (its leading number).
        spec.env["ARYL_JOB_ID"] = m.store_prefix;
        std::string key = p::ProcessStoreAuth().key;
        if (!key.empty()) spec.env["ARYL_STORE_TOKEN"] = p::StoreToken(key, m.store_prefix);
      }
      if (gpus) spec.env["CUDA_VISIBLE_DEVICES"] = std::to_string(wp.local_slot);
      if (account) {
        spec.run_as = account->credentials;
        spec.env["USER"] = spec.env["LOGNAME"] = account->name;
        spec.env["HOME"] = account->home;
        if (spec.cwd.empty()) spec.cwd = fs::is_directory(account->home) ? account->home : "/";
      }
      // The runtime's AgentChannel connects under this identity (Channel::Issued).
      std::string identity = "worker-" + spec.env["ARYL_JOB_ID"] + "-" + spec.env["ARYL_WORKER_ID"];
      if (auto nonce = p::NewStoreKey(); nonce.ok()) {
        identity += "-" + nonce->substr(0, 32);
        spec.env["ARYL_CHANNEL_ID"] = identity;
        std::lock_guard<std::mutex> lock(channel->mu);
        channel->issued[identity] = {m.job, account ? account->credentials.uid : channel->self_uid};
      } else if (env_ok.ok()) {
        env_ok = nonce.status();
      }
      Worker w;
      w.stdout_path = (dir / ("worker-" + std::to_string(wp.worker) + ".out")).string();
      spec.stdout_path = w.stdout_path;
      spec.stderr_path = (dir / ("worker-" + std::to_string(wp.worker) + ".err")).string();
      auto pid = env_ok.ok() ? launcher.Launch(spec) : Result<pid_t>(env_ok);
      if (!pid.ok()) {
        spdlog::error("job {} worker {}: {}", m.job, wp.worker, pid.status().ToString());
        p::WorkerExited ex;
        ex.agent_id = opt.id;
        ex.job = m.job;
        ex.worker = wp.worker;
        ex.generation = m.generation;
        ex.exit_code = 127;
        ex.error = pid.status().message();
        {
          std::lock_guard<std::mutex> lock(channel->mu);
          channel->issued.erase(identity);
        }
        ReportExit(ex);
        continue;
      }
      w.job = m.job;
      w.id = wp.worker;
      if (use_store) w.store_key = m.store_prefix;
      w.identity = identity;
      w.generation = m.generation;
      w.rank = wp.rank;
      w.world = static_cast<int>(m.members.size());
      w.slot = wp.local_slot;
      w.pid = *pid;
      workers[*pid] = w;
      spdlog::info("job {} worker {} (rank {}, slot {}) started: pid {}", m.job, wp.worker, wp.rank, wp.local_slot,
                   *pid);
    }
    running = static_cast<int>(workers.size());
  }

  void OnNewGeneration(const p::NewGeneration& m) {
    if (Stale(m.job, m.generation, "new_generation")) return;
    std::set<p::WorkerId> leaving(m.leaving.begin(), m.leaving.end());
    for (auto& [pid, w] : workers) {
      if (w.job != m.job) continue;
      if (leaving.count(w.id)) {
        if (w.leave_deadline < 0) w.leave_deadline = Now() + opt.leave_timeout;
        continue;
      }
      auto it = std::find(m.members.begin(), m.members.end(), w.id);
      if (it != m.members.end()) {
        w.generation = m.generation;
        w.rank = it - m.members.begin();
        w.world = static_cast<int>(m.members.size());
      }
    }
    spdlog::info("job {}: generation {} with {} members, {} leaving here", m.job, m.generation, m.members.size(),
                 m.leaving.size());
    if (UsesStore(m.store_endpoint)) {
      // Every agent that hosts members or leavers announces to its own workers;
      // all of them map this scheduler generation to the same store generation.
      GenerationQueue::Generation g;
      g.job = m.job;
      g.endpoint = m.store_endpoint;
      g.key = m.store_prefix;
      g.generation = p::PlanGeneration(m.generation);
      g.members.assign(m.members.begin(), m.members.end());
      generations.Plan(std::move(g), Now());
      LogGenerationTransitions();
    }
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
      PushToWorkers(m.job, "", req, &which);
    }
    for (auto& [pid, w] : workers) {
      if (w.job != m.job || (!which.empty() && !which.count(w.id))) continue;
      spdlog::info("job {} worker {}: stopping ({}; grace {} s)", m.job, w.id, m.reason, m.grace_seconds);
      if (m.grace_seconds <= 0) launcher.Signal(pid, SIGKILL);
      launcher.RequestStop(pid, m.grace_seconds);
    }
  }

  void OnPush(const p::Message& msg) {
    if (auto t = TermOf(msg); t && Deposed(*t, Describe(msg))) return;
    if (auto* m = std::get_if<p::StartWorkers>(&msg)) return OnStart(*m);
    if (auto* m = std::get_if<p::NewGeneration>(&msg)) return OnNewGeneration(*m);
    if (auto* m = std::get_if<p::StopWorkers>(&msg)) return OnStop(*m);
    if (auto* m = std::get_if<p::LogRead>(&msg)) return Send(ReadWorkerLog(opt.log_dir, opt.id, *m));
    if (auto* a = std::get_if<p::HeartbeatAck>(&msg)) {
      if (a->scheduler_epoch == scheduler_epoch) {
        lease.Acked(a->seq, a->lease_seconds);
        last_ack = Now();
      }
      return;
    }
    if (auto* a = std::get_if<p::WorkerExitAck>(&msg)) {
      unacked_exits.erase({a->job, a->worker});
      return;
    }
    if (auto* m = std::get_if<p::WorkerCheckpointRequest>(&msg)) {
      spdlog::info("job {}: checkpoint requested ({})", m->job, m->reason);
      return PushToWorkers(m->job, "", *m);
    }
    if (auto* e = std::get_if<p::Error>(&msg)) {
      if (p::IsStandbyError(*e)) {
        // The leader moved; registering asks this standby, which names it.
        spdlog::info("scheduler {}: {}; registering again", client->endpoint(), e->message);
        registered = false;
        last_register_try = -10;
      } else if (e->code == Status::Code::kFailedPrecondition) {
        spdlog::info("scheduler does not know this agent ({}); registering again", e->message);
        registered = false;
        last_register_try = -10;
      } else {
        spdlog::warn("scheduler error: {}", e->message);
      }
      return;
    }
    spdlog::warn("unexpected push '{}' ignored", p::TypeName(msg));
  }

  // How long without a HeartbeatAck before the agent looks for another leader.
  double AckTimeout() const { return std::max(3 * heartbeat_interval, 2.0); }

  // statvfs of the log directory, at most every 5 s (it is on the loop).
  std::int64_t LogFreeBytes() {
    double now = Now();
    if (now - log_free_checked < 5) return log_free;
    log_free_checked = now;
    struct statvfs st {};
    log_free = ::statvfs(opt.log_dir.c_str(), &st) == 0 ? std::int64_t(st.f_bavail) * std::int64_t(st.f_frsize) : -1;
    return log_free;
  }
  double log_free_checked = -10;
  std::int64_t log_free = -1;

  // No word from the scheduler for the whole lease: it may already have
  // started this agent's jobs elsewhere. Every worker here checkpoints and
  // stops (SIGTERM, which the runtime turns into a checkpoint and a clean
  // stop), SIGKILL after kLeaseStopGraceSeconds; the agent then waits for the
  // scheduler and registers again, reporting how its workers ended.
  void LeaseTick() {
    double now = Now();
    if (!lease.Expired(now)) return;
    lease.Drop();
    if (workers.empty()) return;
    spdlog::error("no word from the scheduler for {:.1f} s (the lease): stopping the {} workers here", lease.lease_seconds(),
                  workers.size());
    std::set<p::JobId> jobs;
    for (const auto& [pid, w] : workers) jobs.insert(w.job);
    for (p::JobId job : jobs) {
      p::WorkerCheckpointRequest req;
      req.job = job;
      req.reason = "the agent lost its lease from the scheduler";
      req.deadline_seconds = p::kLeaseStopGraceSeconds;
      req.stop_after = true;
      PushToWorkers(job, "", req);
    }
    for (const auto& [pid, w] : workers) launcher.RequestStop(pid, p::kLeaseStopGraceSeconds);
  }

  // What the scheduler learns of a worker's end: exit code or signal, and the
  // runtime's own outcome when the program reported one (WorkerDone).
  p::WorkerExited ExitOf(const Worker& w, const ExitInfo& ex) {
    p::WorkerExited m;
    m.agent_id = opt.id;
    m.job = w.job;
    m.worker = w.id;
    m.generation = w.generation;
    if (ex.signal != 0) m.signal = ex.signal;
    else m.exit_code = ex.exit_code;
    std::lock_guard<std::mutex> lock(channel->mu);
    m.runtime = channel->hello.erase(w.identity) > 0;
    channel->issued.erase(w.identity);
    auto it = channel->outcome.find(w.identity);
    if (it != channel->outcome.end()) {
      m.outcome = it->second.outcome;
      m.step = it->second.step;
      channel->outcome.erase(it);
    }
    return m;
  }

  // Exits are kept until the scheduler acknowledges them (WorkerExitAck, sent
  // once the exit is durable there) and sent again every few seconds and on
  // every registration (protocol step 7), so no exit is lost to a scheduler
  // restart, a full state disk or a dropped message.
  void ReportExit(const p::WorkerExited& m) {
    unacked_exits[{m.job, m.worker}] = m;
    if (registered) Send(m);
  }

  void ResendExits() {
    double now = Now();
    if (!registered || unacked_exits.empty() || now - last_exit_resend < kExitResendSeconds) return;
    last_exit_resend = now;
    for (const auto& [key, m] : unacked_exits) Send(m);
  }

  void Reap() {
    double now = Now();
    for (auto& [pid, w] : workers) {
      if (w.leave_deadline >= 0 && now > w.leave_deadline) {
        launcher.RequestStop(pid, 5);
        w.leave_deadline = now + 3600;
      }
    }
    for (const auto& ex : launcher.Poll()) {
      auto it = workers.find(ex.pid);
      if (it == workers.end()) continue;
      const Worker& w = it->second;
      spdlog::info("job {} worker {} {}", w.job, w.id, ex.Describe());
      p::JobId job = w.job;
      ReportExit(ExitOf(w, ex));
      generations.MemberEnded(job, w.id);
      workers.erase(it);
      Forget(job);
    }
    running = static_cast<int>(workers.size());
  }

  // Drops a job's generation records once none of its workers runs here
  // (a later StartWorkers records its generation again).
  void Forget(p::JobId job) {
    for (const auto& [pid, w] : workers)
      if (w.job == job) return;
    generations.JobEnded(job);
    LogGenerationTransitions();
    std::lock_guard<std::mutex> lock(channel->mu);
    std::erase_if(channel->announced, [job](const auto& kv) { return kv.first.first == job; });
    std::erase_if(channel->issued, [job](const auto& kv) { return kv.second.job == job; });
  }

  // Takes the worker messages the channel's thread queued (protocol 13, 14, 16).
  void DrainWorkerMessages() {
    std::vector<p::Message> inbox;
    {
      std::lock_guard<std::mutex> lock(channel->mu);
      inbox.swap(channel->inbox);
    }
    for (auto& msg : inbox) {
      if (auto* r = std::get_if<p::WorkerResizeReport>(&msg)) {
        OnWorkerResizeReport(*r);
      } else if (auto* pr = std::get_if<p::WorkerProgress>(&msg)) {
        auto& cur = worker_progress[pr->job];
        if (!cur.fresh || pr->step >= cur.msg.step) {
          // A step summary not yet relayed survives a newer report without one.
          std::optional<p::StepStats> unsent = cur.fresh && !pr->stats ? cur.msg.stats : std::nullopt;
          cur = {*pr, true};
          if (unsent) cur.msg.stats = unsent;
        }
      } else if (auto* c = std::get_if<p::CheckpointReport>(&msg)) {
        c->agent_id = opt.id;  // rank 0's checkpoint, relayed (protocol/inspect.h, step 8)
        if (registered) Send(*c);
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
    generations.Reported(w.job, w.generation);
    LogGenerationTransitions();
    if (registered) Send(r);
  }

  // The first WorkerHello of a job's workers tells the scheduler at once that
  // the program links the runtime: it resizes that job in place, not by a
  // restart (SubmitJob::elastic).
  void ReportRuntime() {
    if (!registered) return;
    std::vector<std::pair<p::JobId, std::int64_t>> seen;
    {
      std::lock_guard<std::mutex> lock(channel->mu);
      for (const auto& [pid, w] : workers)
        if (!runtime_reported.count(w.job) && channel->hello.count(w.identity)) seen.push_back({w.job, w.generation});
    }
    for (const auto& [job, generation] : seen) {
      if (!runtime_reported.insert(job).second) continue;
      p::JobProgress m;
      m.job = job;
      m.generation = generation;
      m.runtime = true;
      Send(m);
    }
    std::erase_if(runtime_reported, [&](p::JobId job) {
      return std::none_of(workers.begin(), workers.end(), [&](const auto& kv) { return kv.second.job == job; });
    });
  }

  // Progress (protocol 9), at most once a second per job: rank 0's
  // WorkerProgress messages, with the loss from its stdout when the message has
  // none (the program did not call Runtime::ReportLoss). Rank 0's stdout lines
  // "step=N loss=X step_s=S" (the examples print them) stand in for programs
  // that do not speak to the agent, their step_s summarised as the runtime's
  // step times are (stdout_progress.h).
  void Progress() {
    double now = Now();
    if (now - last_progress < 1.0) return;
    last_progress = now;
    for (auto& [pid, w] : workers) {
      if (w.rank != 0) continue;
      auto line = w.progress.Read(w.stdout_path, w.generation, w.world);
      if (!line) continue;
      if (!std::isnan(line->loss)) stdout_loss[w.job] = line->loss;
      if (!registered || worker_progress.count(w.job)) continue;
      p::JobProgress m;
      m.job = w.job;
      m.generation = w.generation;
      m.step = line->step;
      m.loss = line->loss;
      m.steps_per_second = line->rate;
      // Step times from the printed step_s (stdout_progress.h); a program
      // that links the runtime sends its own (WorkerProgress.stats).
      if (!runtime_reported.count(w.job)) m.stats = w.progress.TakeSummary();
      Send(m);
    }
    for (auto it = worker_progress.begin(); it != worker_progress.end();) {
      const p::WorkerProgress& wp = it->second.msg;
      bool here = false;
      for (const auto& [pid, w] : workers) here |= w.job == wp.job;
      if (!here) {
        stdout_loss.erase(wp.job);
        it = worker_progress.erase(it);
        continue;
      }
      if (registered && it->second.fresh) {
        it->second.fresh = false;
        p::JobProgress m;
        m.job = wp.job;
        m.generation = 0;  // the scheduler's generation; the message has the store's
        for (const auto& [pid, w] : workers)
          if (w.job == wp.job) m.generation = std::max(m.generation, w.generation);
        m.step = wp.step;
        m.loss = std::isfinite(wp.loss) ? wp.loss : (stdout_loss.count(wp.job) ? stdout_loss[wp.job] : NAN);
        m.steps_per_second = std::isfinite(wp.steps_per_second) ? std::max(0.0, wp.steps_per_second) : 0;
        m.remaining_work = wp.remaining_work;
        m.stats = std::move(it->second.msg.stats);  // relayed once
        it->second.msg.stats.reset();
        Send(m);
      }
      ++it;
    }
  }

  // Announces resizes to this agent's workers (GenerationAnnounce, protocol
  // 12) once every member has set "ready/<id>" in the job's store (stayers set
  // it when they started, so only joiners are waited for), then waits for the
  // runtime's report of the switch ("report/<G>" in the store, or rank 0's
  // WorkerResizeReport here). Each step's store query runs on the probe's
  // thread; the life cycle and its deadlines are the GenerationQueue's.
  void PumpStore() {
    if (!relay) return;
    double now = Now();
    generations.Expire(now);
    for (const auto& g : generations.InFlight()) {
      if (g.state == GenerationQueue::State::kForming) {
        std::string key = g.key + "/ready/" + std::to_string(g.generation);
        auto ready = probe->Take(key);
        if (!ready || !ready->ok() || !**ready) {
          probe->Ask(key, [endpoint = g.endpoint, job = g.key, ids = Ids(g.members)](StoreRelay& r) {
            return r.Ready(endpoint, job, ids);
          });
          continue;
        }
        auto announced = generations.AllReady(g.job, g.generation, now);
        if (!announced) continue;
        auto announce = MakeAnnounce(g.job, g.generation, g.members, g.endpoint, g.key);
        Remember(announce);
        PushToWorkers(g.job, g.key, announce);
        spdlog::info("job {}: announced generation {} ({} workers) to the workers here", g.job, g.generation,
                     g.members.size());
      } else if (g.state == GenerationQueue::State::kAgreed) {
        std::string key = g.key + "/report/" + std::to_string(g.generation);
        auto rep = probe->Take(key);
        if (rep && rep->ok() && **rep) {
          generations.Reported(g.job, g.generation);
          continue;
        }
        probe->Ask(key, [endpoint = g.endpoint, job = g.key, gen = g.generation](StoreRelay& r) -> Result<bool> {
          ARYL_ASSIGN_OR_RETURN(auto v, r.Report(endpoint, job, gen));
          return v.has_value();
        });
      }
    }
    LogGenerationTransitions();
  }

  // The generation queue's transitions, in the agent's log; the ones that
  // give a plan up are warnings.
  void LogGenerationTransitions() {
    for (const auto& t : generations.TakeTransitions()) {
      if (t.to == GenerationQueue::State::kAbandoned || t.to == GenerationQueue::State::kTraining) {
        // Its store queries are no longer wanted (an answer not taken is dropped).
        probe->Cancel(t.key + "/ready/" + std::to_string(t.generation));
        probe->Cancel(t.key + "/report/" + std::to_string(t.generation));
      }
      if (t.to == GenerationQueue::State::kAbandoned) {
        spdlog::warn("job {}: generation {} abandoned ({}, was {})", t.job, t.generation,
                     GenerationQueue::Name(t.event), t.from ? GenerationQueue::Name(*t.from) : "new");
      } else {
        spdlog::debug("job {}: generation {} {} ({})", t.job, t.generation, GenerationQueue::Name(t.to),
                      GenerationQueue::Name(t.event));
      }
    }
  }

  Status Run() {
    while (!stop) {
      double now = Now();
      if (registered && several_schedulers && now - last_ack > AckTimeout()) {
        // The leader went quiet: another scheduler of the list may lead now.
        // The workers keep running; the lease bounds for how long.
        char why[64];
        std::snprintf(why, sizeof why, "no heartbeat ack for %.1f s", now - last_ack);
        spdlog::warn("{}; registering again through the scheduler list", why);
        Status moved = client->Failover(why);
        if (!moved.ok()) spdlog::error("scheduler failover: {}", moved.ToString());
        registered = false;
        last_register_try = -10;
      }
      if (!registered && now - last_register_try > 1.0) Register();
      if (registered && now - last_heartbeat >= heartbeat_interval) {
        last_heartbeat = now;
        p::Heartbeat hb;
        hb.agent_id = opt.id;
        hb.seq = ++seq;
        std::set<std::int64_t> used;
        for (const auto& [pid, w] : workers) used.insert(w.slot);
        hb.free_slots = std::max<std::int64_t>(0, opt.slots - static_cast<std::int64_t>(used.size()));
        hb.workers = Running();
        hb.log_free_bytes = LogFreeBytes();
        lease.Sent(hb.seq, now);
        Send(hb);
      }
      auto msg = client->Receive(milliseconds(20));
      if (msg.ok()) OnPush(*msg);
      DrainWorkerMessages();
      LeaseTick();
      Reap();
      ResendExits();
      ReportRuntime();
      Progress();
      PumpStore();
    }
    spdlog::info("agent {} stopping: {} workers", opt.id, workers.size());
    for (const auto& ex : launcher.StopAll(5)) {
      auto it = workers.find(ex.pid);
      if (it == workers.end()) continue;
      ReportExit(ExitOf(it->second, ex));
      workers.erase(it);
    }
    running = 0;
    client->Close();
    return Status::Ok();
  }
};

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() = default;

Result<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  auto impl = std::make_unique<Impl>();
  if (options.id.empty()) options.id = HostName();
  auto schedulers = p::ParseSchedulerEndpoints(options.scheduler);
  if (!schedulers.ok()) return schedulers.status().WithContext("--scheduler");
  {
    ARYL_ASSIGN_OR_RETURN(HostChoice host, ChooseHost(options.host, schedulers->front()));
    if (!host.warning.empty()) spdlog::warn("{}", host.warning);
    if (options.host.empty() || options.host != host.address)
      spdlog::info("peers reach this server at {} ({})", host.address, host.why);
    options.host = host.address;
  }
  if (!p::FromString(options.pool, &impl->pool)) {
    return Status::InvalidArgument("--pool '" + options.pool + "': expected training or inference");
  }
  if (options.slots < 0) return Status::InvalidArgument("--slots must be >= 0");
  if (options.slots == 0) {
    ARYL_ASSIGN_OR_RETURN(auto inv, DiscoverGpus());
    options.slots = inv.count;
    if (options.gpu_type.empty()) options.gpu_type = inv.type;
    impl->gpus = true;
    spdlog::info("found {} x {} via {}", inv.count, inv.type, inv.source);
  } else {
    if (options.gpu_type.empty()) options.gpu_type = "cpu";
    impl->gpus = options.gpu_type != "cpu";
  }
  std::error_code ec;
  fs::create_directories(options.log_dir, ec);
  if (ec) return Status::IoError("log dir " + options.log_dir + ": " + ec.message());
  p::SchedulerClient::Options co;
  co.endpoints = *schedulers;
  // A registration may not hold up the loop (workers, the lease) for longer
  // than one request: the next one, a second later, goes on from where it moved.
  co.total_timeout = milliseconds(static_cast<int>(options.request_timeout * 1000));
  ARYL_ASSIGN_OR_RETURN(co.identity, AgentRoute(options.id));
  if (!options.curve_key.empty() || !options.curve_server_key.empty()) {
    if (options.curve_key.empty() || options.curve_server_key.empty())
      return Status::InvalidArgument("CURVE needs both --curve-key and --curve-server-key");
    ARYL_ASSIGN_OR_RETURN(auto kp, p::LoadKeyPair(options.curve_key));
    ARYL_ASSIGN_OR_RETURN(auto server_pub, p::LoadPublicKey(options.curve_server_key));
    co.curve = p::CurveClientKeys{kp.public_key, kp.secret_key, server_pub};
  }
  impl->several_schedulers = schedulers->size() > 1;
  ARYL_ASSIGN_OR_RETURN(impl->client, p::SchedulerClient::Connect(co));
  impl->relay = MakeStoreRelay();
  // The store answers only requests with a job's token, once the scheduler
  // has given this agent the cluster's store key (Register).
  p::SetProcessStoreAuth({p::StoreAuth::Mode::kRequired, ""});
  if (impl->relay) {
    ARYL_ASSIGN_OR_RETURN(impl->store_endpoint, impl->relay->Serve(options.host, options.store_port));
    impl->probe = std::make_unique<StoreProbe>(impl->relay);
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
  impl->worker_env = WorkerEnvFilter(options.worker_env);
  ARYL_RETURN_IF_ERROR(impl->StartWorkerChannel());
  spdlog::info("worker channel on {}", impl->worker_endpoint);
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Status Agent::Run() { return impl_->Run(); }
void Agent::Stop() { impl_->stop = true; }
const AgentOptions& Agent::options() const { return impl_->opt; }
int Agent::running_workers() const { return impl_->running; }

}  // namespace aryl::agent
