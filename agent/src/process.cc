#include "aryl/agent/process.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "aryl/clock.h"

extern char** environ;

namespace aryl::agent {
namespace {

double Now() { return SystemClock::Default()->NowSeconds(); }

bool IsExecutable(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string ExitInfo::Describe() const {
  if (signal != 0) {
    return std::string("killed by signal ") + std::to_string(signal) + " (" + strsignal(signal) + ")" +
           (killed_by_us ? " after the stop grace period" : "");
  }
  return "exited with code " + std::to_string(exit_code);
}

Result<std::string> ResolveExecutable(const std::string& name) {
  if (name.empty()) return Status::InvalidArgument("empty command");
  if (name.find('/') != std::string::npos) {
    if (!IsExecutable(name)) return Status::NotFound("'" + name + "' is not an executable file");
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (IsExecutable(candidate)) return candidate;
    start = end + 1;
  }
  return Status::NotFound("'" + name + "' not found in PATH");
}

ProcessLauncher::~ProcessLauncher() {
  if (!children_.empty()) StopAll(0);
}

Result<pid_t> ProcessLauncher::Launch(const LaunchSpec& spec) {
  if (spec.argv.empty()) return Status::InvalidArgument("launch: empty argv");
  ARYL_ASSIGN_OR_RETURN(std::string exe, ResolveExecutable(spec.argv[0]));

  // Everything the child needs is prepared before fork: after fork only
  // async-signal-safe calls are allowed.
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string name = kv.substr(0, eq);
    if (!spec.inherit || spec.inherit(name)) env[name] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : spec.env) {
    if (k.empty() || k.find('=') != std::string::npos) {
      return Status::InvalidArgument("launch: bad environment variable name '" + k + "'");
    }
    env[k] = v;
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  auto open_log = [](const std::string& path) -> Result<int> {
    if (path.empty()) {
      int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      if (fd < 0) return Status::IoError(std::string("open /dev/null: ") + std::strerror(errno));
      return fd;
    }
    // 0600: a job's output may hold its secrets (docs/security.md).
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return Status::IoError("open log " + path + ": " + std::strerror(errno));
    return fd;
  };
  ARYL_ASSIGN_OR_RETURN(int out_fd, open_log(spec.stdout_path));
  int err_fd = -1;
  if (spec.stderr_path.empty() || spec.stderr_path == spec.stdout_path) {
    err_fd = ::fcntl(out_fd, F_DUPFD_CLOEXEC, 0);
  } else {
    auto r = open_log(spec.stderr_path);
    if (!r.ok()) {
      ::close(out_fd);
      return r.status();
    }
    err_fd = *r;
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) < 0) {
    ::close(out_fd);
    ::close(err_fd);
    return Status::IoError(std::string("pipe: ") + std::strerror(errno));
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(out_fd); ::close(err_fd); ::close(pipe_fds[0]); ::close(pipe_fds[1]);
    return Status::IoError(std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    // Child. Report any failure through the pipe as errno, then _exit(127).
    auto fail = [&](int stage) {
      int code[2] = {stage, errno};
      ssize_t ignored = ::write(pipe_fds[1], code, sizeof(code));
      (void)ignored;
      ::_exit(127);
    };
    ::setpgid(0, 0);
    if (spec.run_as) {
      const Credentials& c = *spec.run_as;
      if (::setgroups(c.groups.size(), c.groups.data()) < 0 || ::setgid(c.gid) < 0 || ::setuid(c.uid) < 0) fail(4);
      if (::setuid(0) == 0 && c.uid != 0) { errno = EPERM; fail(4); }  // the switch must not be undoable
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(137);  // the agent died between fork and prctl
    // Undo the agent's signal mask and dispositions.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP}) ::signal(sig, SIG_DFL);
    if (::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) fail(1);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    // The worker gets fds 0-2 only: none of the agent's sockets, logs or
    // pipes (whatever a library opened without O_CLOEXEC) survive the exec.
    if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
      for (int fd = 3; fd < 65536; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) < 0) fail(2);
    ::execve(exe.c_str(), argv.data(), envp.data());
    fail(3);
  }
  ::close(pipe_fds[1]);
  ::close(out_fd);
  ::close(err_fd);
  // Also set the group from the parent side, so that a signal sent right after
  // Launch returns reaches the group even if the child has not run yet.
  ::setpgid(pid, pid);
  int code[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(pipe_fds[0], code, sizeof(code));
  } while (n < 0 && errno == EINTR);
  ::close(pipe_fds[0]);
  if (n == static_cast<ssize_t>(sizeof(code))) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::string stage = code[0] == 1   ? "redirect output"
                        : code[0] == 2 ? "chdir " + spec.cwd
                        : code[0] == 4 ? "switch to uid " + std::to_string(spec.run_as ? spec.run_as->uid : 0)
                                       : "exec";
    return Status::InvalidArgument("cannot start " + exe + ": " + stage + ": " +
                                   std::strerror(code[1]));
  }
  children_[pid] = Child{};
  return pid;
}

void ProcessLauncher::RequestStop(pid_t pid, double grace_s) {
  auto it = children_.find(pid);
  if (it == children_.end()) return;
  const double deadline = Now() + std::max(0.0, grace_s);
  // Stopping already: no second SIGTERM, but the SIGKILL comes no later than
  // this request says. A lease's stop (kLeaseStopGraceSeconds) must not wait
  // out a job's long stop grace: the scheduler starts the job elsewhere once
  // the lease and that grace have passed.
  if (it->second.stop_deadline >= 0) {
    it->second.stop_deadline = std::min(it->second.stop_deadline, deadline);
    return;
  }
  it->second.stop_deadline = deadline;
  ::kill(-pid, SIGTERM);
}

void ProcessLauncher::Signal(pid_t pid, int sig) {
  if (children_.count(pid)) ::kill(-pid, sig);
}

std::vector<ExitInfo> ProcessLauncher::Poll() {
  std::vector<ExitInfo> out;
  double now = Now();
  for (auto it = children_.begin(); it != children_.end();) {
    pid_t pid = it->first;
    Child& c = it->second;
    if (c.stop_deadline >= 0 && now >= c.stop_deadline && !c.killed) {
      ::kill(-pid, SIGKILL);
      c.killed = true;
    }
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) {
      ExitInfo info;
      info.pid = pid;
      if (r == pid && WIFSIGNALED(status)) {
        info.signal = WTERMSIG(status);
        info.exit_code = 128 + info.signal;
        info.killed_by_us = c.killed && info.signal == SIGKILL;
      } else if (r == pid) {
        info.exit_code = WEXITSTATUS(status);
      } else {
        info.exit_code = 255;  // reaped elsewhere; should not happen
      }
      // Take the rest of the group down with the leader.
      ::kill(-pid, SIGKILL);
      out.push_back(info);
      it = children_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<ExitInfo> ProcessLauncher::StopAll(double grace_s) {
  for (auto& [pid, c] : children_) RequestStop(pid, grace_s);
  std::vector<ExitInfo> out;
  // Bounded: grace + 5 s for SIGKILLed processes to be reaped.
  double deadline = Now() + grace_s + 5;
  while (!children_.empty() && Now() < deadline) {
    auto done = Poll();
    out.insert(out.end(), done.begin(), done.end());
    if (!children_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return out;
}

}  // namespace aryl::agent
