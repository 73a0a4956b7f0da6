#include "local_coordinator.h"

#include <fcntl.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "aryl/protocol/generation.h"
#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"
#include "aryl/torchrun_env.h"
#include "rendezvous.h"

extern char** environ;

namespace aryl {

struct LocalCoordinator::Agent {
  std::string endpoint;
  std::unique_ptr<protocol::Server> server;
  mutable std::mutex mu;
  std::map<int64_t, GenerationRecord> records;
  AgentMessageCounts counts;
};

LocalCoordinator::LocalCoordinator(CoordinatorOptions options, std::unique_ptr<JobStore> store)
    : opt_(std::move(options)), store_(std::move(store)) {}

LocalCoordinator::~LocalCoordinator() {
  for (auto& [id, pid] : running_) ::kill(pid, SIGKILL);
  for (auto& [id, pid] : running_) ::waitpid(pid, nullptr, 0);
  if (agent_ && agent_->server) agent_->server.reset();
  if (agent_) ::unlink(agent_->endpoint.substr(6).c_str());
}

AgentMessageCounts LocalCoordinator::agent_counts() const {
  if (!agent_) return {};
  std::lock_guard<std::mutex> lock(agent_->mu);
  return agent_->counts;
}

std::string LocalCoordinator::NewWorkerId() {
  int n = next_worker_++;
  return opt_.agent ? std::to_string(n) : "w" + std::to_string(n);
}

namespace {
protocol::GenerationAnnounce ToAnnounce(uint64_t job, const GenerationRecord& rec, const std::string& store) {
  protocol::GenerationAnnounce a;
  a.job = job;
  a.generation = rec.generation;
  for (auto& id : rec.members) a.members.push_back(std::stoll(id));
  a.store_endpoint = store;
  return a;
}
}  // namespace

Status LocalCoordinator::StartAgent() {
  agent_ = std::make_unique<Agent>();
  agent_->endpoint = "ipc:///tmp/aryl-rt-agent-" + std::to_string(::getpid()) + "-" + opt_.job_id + ".sock";
  protocol::Server::Options so;
  so.endpoint = agent_->endpoint;
  Agent* agent = agent_.get();
  const uint64_t job = std::stoull(opt_.job_id);
  const std::string store = store_->endpoint();
  ARYL_ASSIGN_OR_RETURN(agent_->server,
                        protocol::Server::Start(so, [agent, job, store](const protocol::ReplyTo&, protocol::Message m)
                                                        -> std::optional<protocol::Message> {
                          std::lock_guard<std::mutex> lock(agent->mu);
                          if (auto* h = std::get_if<protocol::WorkerHello>(&m)) {
                            ++agent->counts.hellos;
                            auto it = agent->records.find(h->generation);
                            if (it == agent->records.end()) {
                              return protocol::Error{Status::Code::kNotFound,
                                                     "generation " + std::to_string(h->generation) + " unknown"};
                            }
                            return ToAnnounce(job, it->second, store);
                          }
                          if (std::get_if<protocol::WorkerResizeReport>(&m)) ++agent->counts.resize_reports;
                          if (std::get_if<protocol::WorkerProgress>(&m)) ++agent->counts.progress;
                          if (std::get_if<protocol::WorkerLeave>(&m)) ++agent->counts.leaves;
                          return std::nullopt;
                        }));
  return Status::Ok();
}

Status LocalCoordinator::Announce(const GenerationRecord& rec, const std::vector<std::string>& to) {
  {
    std::lock_guard<std::mutex> lock(agent_->mu);
    agent_->records[rec.generation] = rec;
  }
  auto msg = ToAnnounce(std::stoull(opt_.job_id), rec, store_->endpoint());
  for (const auto& id : to) {
    ARYL_RETURN_IF_ERROR(agent_->server->Push("worker-" + opt_.job_id + "-" + id, msg));
  }
  return Status::Ok();
}

Result<std::unique_ptr<LocalCoordinator>> LocalCoordinator::Start(CoordinatorOptions options) {
  if (options.worker_argv.empty()) return Status::InvalidArgument("coordinator: no worker command");
  auto js_or = !options.external_store.empty()
                   ? JobStore::Connect(options.external_store, options.job_id, options.timeout)
               : options.store == "c10d" ? JobStore::Serve(0, options.job_id, options.timeout)
                                         : JobStore::ServeProtocol(options.store, options.job_id, options.timeout);
  ARYL_ASSIGN_OR_RETURN(auto js, std::move(js_or));
  auto store = std::make_unique<JobStore>(std::move(js));
  bool agent = options.agent;
  auto c = std::unique_ptr<LocalCoordinator>(new LocalCoordinator(std::move(options), std::move(store)));
  if (agent) ARYL_RETURN_IF_ERROR(c->StartAgent());
  return c;
}

const std::string& LocalCoordinator::store_endpoint() const { return store_->endpoint(); }

std::string LocalCoordinator::LogPath(const std::string& worker) const {
  return opt_.log_dir.empty() ? std::string() : opt_.log_dir + "/" + worker + ".log";
}

namespace {

// A port that was free a moment ago on loopback (for MASTER_PORT).
int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace

Status LocalCoordinator::Spawn(const std::string& worker, const GenerationRecord& rec) {
  const int64_t generation = rec.generation;
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (auto& [k, v] : opt_.env) env[k] = v;
  env["ARYL_JOB_ID"] = opt_.job_id;
  env["ARYL_WORKER_ID"] = worker;
  env["ARYL_STORE_ENDPOINT"] = store_endpoint();
  env["ARYL_GENERATION"] = std::to_string(generation);
  env["ARYL_BACKEND"] = opt_.backend;
  if (!opt_.checkpoint_dir.empty()) env["ARYL_CHECKPOINT_DIR"] = opt_.checkpoint_dir;
  if (agent_) env["ARYL_AGENT_ENDPOINT"] = agent_->endpoint;
  // The variables torchrun gives a worker, as of this worker's start (one
  // machine: local = global), so torch.distributed's env:// init works.
  auto pos = std::find(rec.members.begin(), rec.members.end(), worker) - rec.members.begin();
  if (master_port_gen_ != generation) {
    master_port_ = FreeLoopbackPort();
    master_port_gen_ = generation;
  }
  TorchrunPlacement placement;
  placement.rank = placement.local_rank = int(pos);
  placement.world_size = placement.local_world_size = int(rec.members.size());
  placement.master_addr = "127.0.0.1";
  placement.master_port = master_port_;
  placement.run_id = opt_.job_id;
  SetTorchrunEnv(env, placement);
  std::vector<std::string> env_strings;
  for (auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = opt_.worker_argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::string log = LogPath(worker);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return Status::IoError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Dies with the coordinator (which holds the job's store): no orphans
    // when the launcher is killed. The check closes the race with a parent
    // that died before prctl().
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);
    if (!log.empty()) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
    }
    ::execve(argv[0], argv.data(), envp.data());
    std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  running_[worker] = pid;
  return Status::Ok();
}

Status LocalCoordinator::Launch(int world) {
  const int64_t g = protocol::PlanGeneration(++plans_);
  GenerationRecord rec{g, 0, {}};
  for (int i = 0; i < world; ++i) rec.members.push_back(NewWorkerId());
  // Fresh workers read their record when they start; publish first.
  if (agent_) {
    ARYL_RETURN_IF_ERROR(Announce(rec, {}));
  } else {
    ARYL_RETURN_IF_ERROR(store_->PublishAs(rec));
  }
  for (const auto& id : rec.members) ARYL_RETURN_IF_ERROR(Spawn(id, rec));
  return Status::Ok();
}

Result<std::vector<std::string>> LocalCoordinator::Members() {
  if (agent_) {
    std::lock_guard<std::mutex> lock(agent_->mu);
    if (agent_->records.empty()) return std::vector<std::string>{};
    return agent_->records.rbegin()->second.members;
  }
  ARYL_ASSIGN_OR_RETURN(int64_t latest, store_->Latest());
  if (latest == 0) return std::vector<std::string>{};
  ARYL_ASSIGN_OR_RETURN(auto rec, store_->ReadGeneration(latest, opt_.timeout));
  return rec.members;
}

Result<int64_t> LocalCoordinator::Resize(int world) { return Plan(world, ""); }

Result<int64_t> LocalCoordinator::Replace(const std::string& worker) { return Plan(0, worker); }

Result<int64_t> LocalCoordinator::Plan(int world, const std::string& lost) {
  GenerationRecord cur;
  if (agent_) {
    std::lock_guard<std::mutex> lock(agent_->mu);
    if (agent_->records.empty()) return Status::FailedPrecondition("no generation launched");
    cur = agent_->records.rbegin()->second;
  } else {
    ARYL_ASSIGN_OR_RETURN(int64_t latest_gen, store_->Latest());
    ARYL_ASSIGN_OR_RETURN(cur, store_->ReadGeneration(latest_gen, opt_.timeout));
  }
  const int64_t latest = cur.generation;
  const int64_t g = protocol::PlanGeneration(++plans_);
  GenerationRecord rec{g, latest, cur.members};
  if (!lost.empty()) {
    // As the scheduler replaces a lost worker: the rest keep their order, a
    // joiner takes the last rank. The current record may still list the
    // lost worker (the survivors have not regrouped yet) or not.
    world = int(rec.members.size()) + (std::erase(rec.members, lost) == 0 ? 1 : 0);
    cur.members = rec.members;
  }
  if (int(rec.members.size()) > world) rec.members.resize(size_t(world));
  std::vector<std::string> joiners;
  while (int(rec.members.size()) < world) {
    joiners.push_back(NewWorkerId());
    rec.members.push_back(joiners.back());
  }
  if (agent_) {
    std::lock_guard<std::mutex> lock(agent_->mu);
    agent_->records[g] = rec;  // joiners ask for it in their WorkerHello
  }
  for (const auto& id : joiners) ARYL_RETURN_IF_ERROR(Spawn(id, rec));
  // Waits for `key` while any worker of the current generation still runs;
  // when they have all exited (the job finished) the joiners are killed.
  auto wait_for = [&](const std::string& key) -> Status {
    auto deadline = std::chrono::steady_clock::now() + opt_.timeout;
    while (true) {
      ARYL_ASSIGN_OR_RETURN(bool present, store_->Check(key));
      if (present) return Status::Ok();
      Reap();
      bool any_running = false;
      for (const auto& id : cur.members) any_running = any_running || running_.count(id) > 0;
      if (!any_running) {
        for (const auto& id : joiners) (void)Kill(id, SIGKILL);
        return Status::FailedPrecondition("the job's workers exited before generation " + std::to_string(g) +
                                          " took effect");
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::Timeout("'" + key + "' not set within " + std::to_string(opt_.timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  for (const auto& id : joiners) ARYL_RETURN_IF_ERROR(wait_for("ready/" + id).WithContext("joiner " + id));
  if (agent_) {
    ARYL_RETURN_IF_ERROR(Announce(rec, cur.members));
  } else {
    ARYL_RETURN_IF_ERROR(store_->PublishAs(rec));
  }
  // The agent announces one change at a time: wait until the members applied
  // it (the new rank 0 stores its report) before another can be announced.
  ARYL_RETURN_IF_ERROR(wait_for("report/" + std::to_string(g)).WithContext("generation " + std::to_string(g)));
  return g;
}

Status LocalCoordinator::Kill(const std::string& worker, int signal) {
  auto it = running_.find(worker);
  if (it == running_.end()) return Status::NotFound("worker '" + worker + "' is not running");
  if (::kill(it->second, signal) != 0) return Status::IoError(std::string("kill: ") + std::strerror(errno));
  return Status::Ok();
}

int LocalCoordinator::SignalAll(int signal) {
  int sent = 0;
  for (auto& [id, pid] : running_) sent += ::kill(pid, signal) == 0 ? 1 : 0;
  return sent;
}

Result<pid_t> LocalCoordinator::Pid(const std::string& worker) const {
  auto it = running_.find(worker);
  if (it == running_.end()) return Status::NotFound("worker '" + worker + "' is not running");
  return it->second;
}

Status LocalCoordinator::RequestCheckpoint() { return store_->Add("control/checkpoint", 1).status(); }
Status LocalCoordinator::RequestStop() { return store_->Set("control/stop", "1"); }
Status LocalCoordinator::ClearStop() { return store_->Delete("control/stop"); }

int64_t LocalCoordinator::Progress() {
  auto v = store_->TryGet("progress");
  if (!v.ok() || !v->has_value()) return -1;
  return std::stoll(**v);
}

Status LocalCoordinator::WaitProgress(int64_t step, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (Progress() < step) {
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Timeout("progress stayed at " + std::to_string(Progress()) + " < " + std::to_string(step));
    }
    if (Reap() ) return Status::Unavailable("all workers exited at progress " + std::to_string(Progress()));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Status::Ok();
}

bool LocalCoordinator::Reap() {
  for (auto it = running_.begin(); it != running_.end();) {
    int st = 0;
    pid_t r = ::waitpid(it->second, &st, WNOHANG);
    if (r == it->second) {
      exit_codes_[it->first] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  return running_.empty();
}

Status LocalCoordinator::WaitAll(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!Reap()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Timeout(std::to_string(running_.size()) + " workers still running after " +
                             std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Status::Ok();
}

}  // namespace aryl
