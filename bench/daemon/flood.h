// bench_daemon --flood: one local user floods the scheduler with submissions
// while another local user lists its jobs, as in docs/security.md's quota
// target ("during the flood, another user's `aryl jobs` p99 < 500 ms"). Both
// run as child processes of their own uid (bench_daemon runs as root) on the
// scheduler's keyless ipc:// socket, so the scheduler sees two ordinary users
// and holds the flooder to the per-user limits.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace bench {

// Starts `self --flood-child ...` (or --victim-child) as `uid`, its stdout in
// `out_path`; returns the pid, or -1.
pid_t SpawnAs(uid_t uid, const std::string& out_path, const std::vector<std::string>& args);

// The children's mains: argv after the mode flag.
int FloodChild(const std::string& endpoint, long submits, int threads);
int VictimChild(const std::string& endpoint, double seconds, double interval);

}  // namespace bench
