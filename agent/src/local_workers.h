// LocalWorkers: the worker processes this agent started and still runs, by
// pid, with what the agent knows of each (its job, generation, rank, slot,
// channel identity, stdout). It answers what the agent reports of them
// (Running, FreeSlots) and applies membership changes (a NewGeneration's
// ranks, leavers' deadlines); starting and stopping processes is the agent's.
//
// Pure: times are passed in. Thread safety: none; the agent's loop owns it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "aryl/agent/worker_life.h"
#include "aryl/protocol/messages.h"
#include "stdout_progress.h"

namespace aryl::agent {

struct LocalWorker {
  protocol::JobId job = 0;
  protocol::WorkerId id = 0;
  std::int64_t generation = 0;  // the scheduler's
  std::int64_t rank = 0;
  std::int64_t slot = 0;
  pid_t pid = 0;
  WorkerLife life;             // running, leaving, stopping, killed (worker_life.h)
  std::string store_key;       // the job's key in its store (empty: no store)
  std::string identity;        // its DEALER's routing id on the worker channel
  int world = 0;               // its generation's world size
  std::string stdout_path;
  StdoutProgress progress;     // rank 0's progress lines (stdout_progress.h)
  std::optional<std::pair<uid_t, gid_t>> owner;  // its account, when not the agent's
};

class LocalWorkers {
 public:
  using Map = std::map<pid_t, LocalWorker>;

  void Add(const LocalWorker& w) { by_pid_[w.pid] = w; }
  Map::iterator find(pid_t pid) { return by_pid_.find(pid); }
  void erase(Map::iterator it) { by_pid_.erase(it); }
  Map::iterator begin() { return by_pid_.begin(); }
  Map::iterator end() { return by_pid_.end(); }
  Map::const_iterator begin() const { return by_pid_.begin(); }
  Map::const_iterator end() const { return by_pid_.end(); }
  std::size_t size() const { return by_pid_.size(); }
  bool empty() const { return by_pid_.empty(); }

  // Whether worker `worker` of `job` runs here.
  bool Runs(protocol::JobId job, protocol::WorkerId worker) const;
  // Whether any worker of `job` runs here.
  bool Hosts(protocol::JobId job) const;
  std::set<protocol::JobId> Jobs() const;
  // The workers of `job`, or those of them in `only` when it is not empty.
  std::vector<const LocalWorker*> Of(protocol::JobId job, const std::set<protocol::WorkerId>& only = {}) const;
  std::vector<LocalWorker*> Of(protocol::JobId job, const std::set<protocol::WorkerId>& only = {});
  // For AgentRegister and Heartbeat (protocol steps 1-2).
  std::vector<protocol::RunningWorker> Running() const;
  // Of `slots`, those no worker here occupies.
  std::int64_t FreeSlots(std::int64_t slots) const;

  // A NewGeneration of `m.job`: its leavers must be gone by `leave_deadline`
  // (WorkerLife::Leave: the first such deadline holds); its members take
  // their new rank and world.
  void Apply(const protocol::NewGeneration& m, double leave_deadline);
  // Leavers past their deadline at `now`, now stopping (WorkerLife::Overdue):
  // their pids, each once.
  std::vector<pid_t> OverdueLeavers(double now);

 private:
  Map by_pid_;
};

}  // namespace aryl::agent
