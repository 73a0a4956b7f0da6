// ProcessLauncher: starts, stops and reaps an agent's worker processes.
//
// Each worker is fork/exec'ed into its own process group (setpgid), so that a
// stop reaches the whole tree a training script may spawn, with stdout and
// stderr redirected to its own log files, the agent's environment (or the part
// LaunchSpec::inherit keeps) plus the ARYL_* variables of its rank, and PR_SET_PDEATHSIG=SIGKILL: when the agent
// dies, its workers die with it instead of holding GPUs nobody manages.
// An exec failure (missing binary, no permission) is reported by Launch
// itself through a close-on-exec pipe, not as a mysterious exit 127.
// With LaunchSpec::run_as (the launcher runs as root), the child drops to that
// account (groups, gid, uid) before it changes directory and execs, so the
// working directory and the program are checked with the account's rights;
// the parent-death signal is set after the switch (a credential change clears it).
//
// Stop is two-phase and never blocks: RequestStop sends SIGTERM to the group
// and records a deadline (a later request with an earlier one brings it
// forward; the SIGTERM is sent once); Poll sends SIGKILL to groups past their
// deadline and reaps every child that has exited, returning how each ended.
//
// Thread safety: not thread-safe. Launch must be called from a thread that
// lives as long as the workers (PDEATHSIG fires when the forking thread exits).
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "aryl/result.h"

namespace aryl::agent {

struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
};

struct LaunchSpec {
  std::vector<std::string> argv;              // argv[0] is looked up in PATH when it has no '/'
  std::map<std::string, std::string> env;     // added to (and overriding) the inherited environment
  // Which of the launcher's own variables the child inherits; null: all.
  std::function<bool(const std::string& name)> inherit;
  std::string cwd;                            // empty: the agent's
  std::string stdout_path;                    // empty: /dev/null
  std::string stderr_path;                    // empty: same file as stdout
  std::optional<Credentials> run_as;          // empty: the launcher's own
};

struct ExitInfo {
  pid_t pid = 0;
  int exit_code = 0;  // when exited normally
  int signal = 0;     // when killed by a signal (then exit_code is 128 + signal)
  bool killed_by_us = false;  // SIGKILL after the grace period
  std::string Describe() const;
};

class ProcessLauncher {
 public:
  ProcessLauncher() = default;
  ~ProcessLauncher();  // kills and reaps whatever is still running (grace 0)
  ProcessLauncher(const ProcessLauncher&) = delete;
  ProcessLauncher& operator=(const ProcessLauncher&) = delete;

  Result<pid_t> Launch(const LaunchSpec& spec);
  // SIGTERM to the process group now; SIGKILL after `grace_s` (checked by Poll).
  // Unknown or already-stopping pids are ignored.
  void RequestStop(pid_t pid, double grace_s);
  // Sends a signal to the process group (e.g. SIGKILL in tests).
  void Signal(pid_t pid, int sig);
  // Escalates overdue stops and reaps; returns the children that ended.
  std::vector<ExitInfo> Poll();
  // Stops everything: SIGTERM, waits up to `grace_s`, SIGKILL, reaps (blocking, bounded).
  std::vector<ExitInfo> StopAll(double grace_s);

  bool Running(pid_t pid) const { return children_.count(pid) > 0; }
  size_t size() const { return children_.size(); }

 private:
  struct Child {
    double stop_deadline = -1;  // monotonic seconds; <0: not stopping
    bool killed = false;
  };
  std::map<pid_t, Child> children_;
};

// "VAR=value" lookup helper and PATH resolution, exposed for tests.
Result<std::string> ResolveExecutable(const std::string& name);

}  // namespace aryl::agent
