#include "local_coordinator.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "rendezvous.h"

extern char** environ;

namespace aryl {

LocalCoordinator::LocalCoordinator(CoordinatorOptions options, std::unique_ptr<JobStore> store)
    : opt_(std::move(options)), store_(std::move(store)) {}

LocalCoordinator::~LocalCoordinator() {
  for (auto& [id, pid] : running_) ::kill(pid, SIGKILL);
  for (auto& [id, pid] : running_) ::waitpid(pid, nullptr, 0);
}

Result<std::unique_ptr<LocalCoordinator>> LocalCoordinator::Start(CoordinatorOptions options) {
  if (options.worker_argv.empty()) return Status::InvalidArgument("coordinator: no worker command");
  auto js_or = options.store == "c10d" ? JobStore::Serve(0, options.job_id, options.timeout)
                                       : JobStore::ServeProtocol(options.store, options.job_id, options.timeout);
  ARYL_ASSIGN_OR_RETURN(auto js, std::move(js_or));
  auto store = std::make_unique<JobStore>(std::move(js));
  return std::unique_ptr<LocalCoordinator>(new LocalCoordinator(std::move(options), std::move(store)));
}

const std::string& LocalCoordinator::store_endpoint() const { return store_->endpoint(); }

std::string LocalCoordinator::LogPath(const std::string& worker) const {
  return opt_.log_dir.empty() ? std::string() : opt_.log_dir + "/" + worker + ".log";
}

Status LocalCoordinator::Spawn(const std::string& worker, int64_t generation) {
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
  std::vector<std::string> env_strings;
  for (auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = opt_.worker_argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::string log = LogPath(worker);
  pid_t pid = ::fork();
  if (pid < 0) return Status::IoError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
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
  ARYL_ASSIGN_OR_RETURN(int64_t g, store_->Add("gen/counter", 1));
  GenerationRecord rec{g, 0, {}};
  for (int i = 0; i < world; ++i) rec.members.push_back("w" + std::to_string(next_worker_++));
  // Fresh workers read their record when they start; publish first.
  ARYL_RETURN_IF_ERROR(store_->PublishAs(rec));
  for (const auto& id : rec.members) ARYL_RETURN_IF_ERROR(Spawn(id, g));
  return Status::Ok();
}

Result<std::vector<std::string>> LocalCoordinator::Members() {
  ARYL_ASSIGN_OR_RETURN(int64_t latest, store_->Latest());
  if (latest == 0) return std::vector<std::string>{};
  ARYL_ASSIGN_OR_RETURN(auto rec, store_->ReadGeneration(latest, opt_.timeout));
  return rec.members;
}

Result<int64_t> LocalCoordinator::Resize(int world) {
  ARYL_ASSIGN_OR_RETURN(int64_t latest, store_->Latest());
  ARYL_ASSIGN_OR_RETURN(auto cur, store_->ReadGeneration(latest, opt_.timeout));
  ARYL_ASSIGN_OR_RETURN(int64_t g, store_->Add("gen/counter", 1));
  GenerationRecord rec{g, latest, cur.members};
  if (int(rec.members.size()) > world) rec.members.resize(size_t(world));
  std::vector<std::string> joiners;
  while (int(rec.members.size()) < world) {
    joiners.push_back("w" + std::to_string(next_worker_++));
    rec.members.push_back(joiners.back());
  }
  for (const auto& id : joiners) ARYL_RETURN_IF_ERROR(Spawn(id, g));
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
  ARYL_RETURN_IF_ERROR(store_->PublishAs(rec));
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
