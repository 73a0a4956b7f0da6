// The agent's share of the security model (docs/security.md): private
// directories for worker logs and the worker channel socket, the random part of
// its routing id, and the environment policy for jobs.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl::agent {

// What a worker inherits of the agent's environment by default (the agent's
// --worker-env): the search path, locale and time zone, where temporaries and
// libraries are, and the settings of the libraries a training job uses
// (CUDA, NCCL, Gloo, OpenMP, MKL, torch) and of Aryl's runtime. Nothing else of
// the agent's (a service manager's sockets, an operator's credentials, ssh
// agents) reaches a job; the job's own env, the ARYL_* of its rank and, with
// run-as, HOME, USER and LOGNAME of its account come on top.
inline constexpr const char* kDefaultWorkerEnv =
    "PATH,HOME,USER,LOGNAME,SHELL,LANG,LANGUAGE,LC_*,TZ,TERM,TMPDIR,LD_LIBRARY_PATH,PYTHONPATH,PYTHONHOME,"
    "CUDA_*,NCCL_*,GLOO_*,NVIDIA_*,OMP_*,MKL_*,KMP_*,TORCH_*,ARYL_LOG,ARYL_BACKEND,ARYL_COLLECTIVE_TIMEOUT_MS,"
    "ARYL_RENDEZVOUS_TIMEOUT_MS,ARYL_FAULT_SETTLE_MS,ARYL_POLL_MS,ARYL_WAIT_WORKERS_MS,ASAN_OPTIONS,"
    "UBSAN_OPTIONS,LSAN_OPTIONS";

// The names of --worker-env (empty: kDefaultWorkerEnv) as a test; null for "all".
std::function<bool(const std::string&)> WorkerEnvFilter(const std::string& list);

// Creates `dir` (and parents) when missing and sets mode 0700 on it.
Status MakePrivateDir(const std::filesystem::path& dir);

// Where the worker channel's ipc socket goes: "<log_dir>/.agent-<id>/worker.sock",
// in a 0700 directory, so only the agent's user (and its workers) can connect;
// a directory too deep for sun_path falls back to a fresh 0700 directory in /tmp.
// `shared` (workers run as other accounts, --run-as): always a fresh directory
// in /tmp, so no private parent blocks them; MakeSocketReachable opens it.
Result<std::filesystem::path> WorkerSocketPath(const std::filesystem::path& log_dir, const std::string& id,
                                               bool shared = false);

// Directory 0711 (no listing) and socket 0666: any local account can connect,
// and the agent checks each message's sender by its uid (SO_PEERCRED).
Status MakeSocketReachable(const std::filesystem::path& socket);

// "<id>#<16 hex digits>": the routing id the agent connects with (authz.h).
Result<std::string> AgentRoute(const std::string& id);

// Checks a job's env against the agent's policy: `deny`/`allow` are comma lists
// of names or "PREFIX*" patterns; an empty `deny` means the default list
// (protocol/env_policy.h), "none" an empty one.
Status CheckJobEnv(const std::map<std::string, std::string>& env, const std::string& deny,
                   const std::string& allow);

}  // namespace aryl::agent
