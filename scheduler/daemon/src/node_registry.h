// NodeRegistry: the nodes (agents' servers) the daemon knows, the core's
// server ids of them, which live workers each node runs, and whether each
// agent is alive, judged on the watch clock. Pure data and decisions: the
// time comes in as arguments, it has no store and no network; the daemon
// (agents.cc) acts on its answers (saves a node, fails a node's workers).
//
// Liveness, the watch clock:
//   1. Every message of a node's agent is Heard: wall time (last_heartbeat,
//      for leases and listings) and watch time (heard_at) of it.
//   2. Once a tick, Watch(now) advances the watch clock by the wall time since
//      the last tick, at most kMaxWatchStep: a process that was stopped or a
//      machine that paused sees the heartbeats sent meanwhile waiting in its
//      socket, and reads them first. The clock stands still while the receive
//      batch was full (a backlog). So neither a pause nor a backlog of
//      heartbeats ever reads as dead agents.
//   3. Lost(timeout, ...) names the connected nodes silent for more than
//      `timeout` seconds of watch time, and the disconnected ones the caller
//      says never came back; the daemon fails each (NodeFailed). The
//      connected nodes are kept ordered by watch time heard, so a tick costs
//      O(the nodes lost + the disconnected nodes), not O(every node), and a
//      heartbeat O(1): a node's connection changes through SetConnected only,
//      which keeps that order (bench/daemon/bench_liveness.cc).
//   4. LeaseExpiry: by then an agent last heard at `heard` has surely stopped
//      its workers on its own (its lease ran out); no fresh start of a job
//      that lost workers there before it.
//
// The worker index (workers_on) is kept by JobTable, the one place where a
// job's worker is added or removed (job_table.h); it is read here.
//
// Thread safety: none; the daemon's serving thread owns it.
#pragma once

#include <functional>
#include <list>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "live_job.h"

namespace aryl::daemon {

class NodeRegistry {
 public:
  using Node = LiveNode;
  // node -> (job, worker) of the live workers there.
  using WorkerIndex = std::map<std::string, std::set<std::pair<p::JobId, p::WorkerId>>>;
  // A gap between two ticks adds at most this much to the watch clock (s).
  static constexpr double kMaxWatchStep = 0.25;

  // The nodes by agent id. Their fields are the daemon's to change, but for
  // `connected` (SetConnected) and `heard_at` (Heard); the set of nodes
  // changes through nodes()[id] (a registration) and Replace.
  std::map<std::string, Node>& nodes() { return nodes_; }
  const std::map<std::string, Node>& nodes() const { return nodes_; }
  const Node* Find(const std::string& id) const;
  // Core server id -> agent id.
  const std::map<s::ServerId, std::string>& node_by_server() const { return node_by_server_; }
  // Gives a new node the next core server id (one past the highest so far).
  void AssignServer(Node& n);
  // Every node as the store holds them (LoadState); the worker index is
  // rebuilt by JobTable::Replace after, the liveness index here.
  void Replace(std::map<std::string, Node> nodes, std::map<s::ServerId, std::string> by_server);
  // A registration (true) or a node failure (false); any node of nodes().
  void SetConnected(Node& n, bool connected);
  int connected_count() const { return static_cast<int>(silence_.size()); }

  // The live workers on each node (JobTable keeps it).
  const WorkerIndex& workers_on() const { return workers_on_; }
  // The live workers on `node`; empty when none.
  const std::set<std::pair<p::JobId, p::WorkerId>>& WorkersOn(const std::string& node) const;

  // --- liveness (steps 1-4 above)
  void Heard(Node& n, double wall_now);
  void Watch(double wall_now, bool drained);
  double watch_now() const { return watch_now_; }
  struct Lost {
    std::string node;
    bool timed_out = false;  // else: disconnected and never came back
  };
  // In node order. `never_came_back(n)` is asked of disconnected nodes only.
  std::vector<Lost> LostNodes(double timeout,
                              const std::function<bool(const Node&)>& never_came_back) const;
  // The margin covers the agent's reaction (its loop ticks every 20 ms) and
  // clock-rate drift between the two machines over one lease.
  static double LeaseExpiry(double heard, double lease);

 private:
  friend class JobTable;  // the only writer of workers_on_
  void Index(const std::string& node, p::JobId job, p::WorkerId worker);
  void Unindex(const std::string& node, p::JobId job, p::WorkerId worker);
  void ClearIndex() { workers_on_.clear(); }
  void Unlist(const Node& n);  // from silence_ or down_
  void List(Node& n);          // at the end of silence_ (the newest heard), or in down_


  std::map<std::string, Node> nodes_;
  std::map<s::ServerId, std::string> node_by_server_;
  WorkerIndex workers_on_;
  // Liveness index (step 3): the connected nodes, the longest silent first
  // (heard_at ascending: the watch clock never goes back, so a node heard
  // moves to the end in O(1)), and where each one is in that list; the
  // disconnected ones by id.
  std::list<Node*> silence_;
  std::unordered_map<std::string, std::list<Node*>::iterator> in_silence_;
  std::map<std::string, const Node*> down_;
  double watch_now_ = 0, watch_wall_ = 0;
};

}  // namespace aryl::daemon
