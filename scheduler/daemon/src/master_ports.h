// MasterPorts: the MASTER_PORT of each live job's start, by the host of its
// rank 0, and the choice of a port for a new start (PickMasterPort).
//   1. A port is taken on a host while another live job with workers holds
//      it there: its rank 0's store listens on host:port. The same port on
//      another host is free: jobs spread over a cluster share the range.
//   2. Pick tries the range from a salted start (PickPort) and asks the
//      index of that host and port only, and the caller's `busy` (a loopback
//      master: something on this machine listens there). A start costs the
//      ports tried times the holders of one host and port, not the ports
//      times the cluster's jobs: before, a scheduler with more running jobs
//      than ports (12,768 by default) tried every port at every start.
//   3. Entries of ended jobs and of jobs given another port or host since are
//      dropped when met (`holds` says whether the job still holds it).
//
// Pure: no clock, store or network. Thread safety: none (the daemon's
// serving thread owns it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "aryl/port_range.h"
#include "aryl/protocol/messages.h"

namespace aryl::daemon {

class MasterPorts {
 public:
  using JobId = protocol::JobId;
  // Whether `job` (not the one picking) still holds `port` on `host` with live workers.
  using Holds = std::function<bool(JobId job, const std::string& host, int port)>;

  void Clear() { holders_.clear(); }
  void Add(const std::string& host, int port, JobId job) { holders_[{host, port}].insert(job); }
  // Step 2: the port for `job`'s start with its rank 0 on `host`, recorded
  // as its; nullopt when every port of `range` is taken there.
  std::optional<int> Pick(const PortRange& range, std::uint64_t salt, JobId job, const std::string& host,
                          const Holds& holds, const std::function<bool(int)>& busy);
  // The entries kept (a test's view of the index's size).
  std::size_t entries() const;

 private:
  std::map<std::pair<std::string, int>, std::set<JobId>> holders_;
};

}  // namespace aryl::daemon
