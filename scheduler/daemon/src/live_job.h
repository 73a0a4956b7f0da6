// The daemon's records of a live job, a node (an agent's server) and a
// worker, in memory (Daemon::Impl's jobs and nodes; daemon_impl.h). What is
// durable is in JobRecord / NodeRecord (state_store.h) and the job's
// workers_json (SaveJob); the rest is memory only and says so.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <deque>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "aryl/daemon/job_machine.h"
#include "aryl/daemon/state_store.h"
#include "aryl/protocol/messages.h"
#include "aryl/sched/types.h"

namespace aryl::daemon {

namespace p = aryl::protocol;
namespace s = aryl::sched;

// The leases a job waits out: node -> the wall time until which its agent
// may still run the job's workers (NodeRegistry::LeaseExpiry). One entry
// per node: an agent that comes back running none of the job's workers
// releases its own wait only, never another node's (seed 355 of
// aryl-simtest --daemon --faults all: a restarted scheduler gave the job a
// wait on t1 in place of partitioned t2's, and t1's return then cleared
// both, starting the job beside t2's workers). O(nodes waited on).
//
// A node lost while a start of the job there was unconfirmed (sent, never
// listed by its agent) is `unconfirmed`: a registration of the same agent
// process does not release its wait, since that start may still be on the
// wire and arrive after the registration was sent (aryl-simtest --daemon
// --replay 432 with the converger's step C2 weakened: a registration t2 sent
// before a late start arrived listed no worker, and the job started afresh
// beside the start's two). The wait then runs to the lease's end.
struct LeaseFence {
  std::map<std::string, double> until;
  std::set<std::string> unconfirmed;

  void Wait(const std::string& node, double expiry, bool start_unconfirmed = false) {
    double& u = until[node];
    u = std::max(u, expiry);
    if (start_unconfirmed) unconfirmed.insert(node);
  }
  bool Release(const std::string& node) {
    unconfirmed.erase(node);
    return until.erase(node) > 0;
  }
  bool WaitsOn(const std::string& node) const { return until.count(node) > 0; }
  // Whether a registration of `node`'s agent listing none of the job's
  // workers releases the wait: always from a new agent process (what was
  // sent to the old one cannot reach it), else not while a start was unconfirmed.
  bool ReleasedByRegistration(const std::string& node, bool new_process) const {
    return new_process || !unconfirmed.count(node);
  }
  // No fresh start before this (0: none).
  double NotBefore() const {
    double out = 0;
    for (const auto& [node, u] : until) out = std::max(out, u);
    return out;
  }
  // The node whose lease runs out last ("" when none).
  std::string LastNode() const {
    std::string out;
    double best = 0;
    for (const auto& [node, u] : until)
      if (u > best) best = u, out = node;
    return out;
  }
  // Drops the waits over by `now` (kept until then for a restart's sake).
  void Prune(double now) {
    for (auto it = until.begin(); it != until.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      unconfirmed.erase(it->first);
      it = until.erase(it);
    }
  }
};

struct LiveNode {
  std::string id;
  std::string host;
  p::Pool pool = p::Pool::kTraining;
  std::string gpu_type;
  int slots = 0;
  s::ServerId server_id = 0;
  bool connected = false;
  double last_heartbeat = 0;  // wall
  double heard_at = 0;        // watch time (LivenessTick) of its last message
  bool heard_here = false;    // heard by this scheduler process
  std::uint64_t instance = 0;  // the agent process's AgentRegister::instance (memory only)
  // The newest report (registration or heartbeat) read from that process
  // (protocol step 1); older ones are stale. Memory only.
  std::uint64_t report_seq = 0;
  // Whether `seq` from `instance` is older than a report already read.
  bool Stale(std::uint64_t from_instance, std::uint64_t seq) const {
    return seq != 0 && from_instance == instance && seq <= report_seq;
  }
  // The newest report of that process acknowledged (AgentRegistered,
  // HeartbeatAck): the ack_floor of a start sent now (start_confirm.h).
  // Memory only.
  std::uint64_t acked_seq = 0;
  bool log_disk_full = false;  // its last heartbeat said its log disk is full (memory only)
  std::string store_endpoint;
  std::string loan_state = "available";  // available | held | loaned
  // An operator took it out of service (nodes drain): no new workers. With
  // drain_now its workers were moved off at once (the core sees it failed);
  // without, the jobs on it run to their end (the core sees it cordoned).
  bool drained = false;
  bool drain_now = false;
  bool removed = false;  // an operator forgot it (nodes remove); known again when its agent registers
  std::string route;                     // routing id it registered from (authz.cc)
  // The serving side its agent manages (protocol/serving.h); nullopt: none.
  // Memory only: the agent says it at every registration and change.
  std::optional<p::ServingStatus> serving;
  // Workers its agent runs that the daemon does not expect (agents.cc,
  // Reconcile), with the watch time of the last kill sent. Memory only.
  std::map<std::pair<p::JobId, p::WorkerId>, double> strays;
};
// A reclaim of a loaned server in progress (inference.cc, ReclaimTick).
struct LivePendingReclaim {
  std::string node;
  double start = 0;     // wall
  double deadline = 0;  // wall: training gone by then
  bool forced = false;
  double forced_at = 0;  // wall: the last kill of the workers still there
  // A server with a serving side (protocol/serving.h): ready again by
  // ready_by (the deadline asked for; `deadline` is that less the warm-up);
  // serving_started once it was empty and told to serve.
  double ready_by = 0;
  bool serving_started = false;
  // Wall: its node was declared lost with workers on it (NodeFailed). Until
  // its agent registers again, those may run until its lease runs out, so
  // the reclaim is not met before then (aryl-simtest --daemon --replay 3953).
  // Memory only.
  double lost_until = 0;
};
struct LiveWorker {
  p::WorkerId id = 0;
  std::string agent;
  int rank = 0;
  int slot = 0;
  std::int64_t generation = 0;
  std::int64_t joined = 0;  // the generation it was started for (memory only; restored: its generation)
  bool leaving = false;  // asked to leave (resize, preempt, cancel, reclaim)
  // The watch clock (agents.cc) when its StartWorkers went out; < 0 once its
  // agent listed it (a heartbeat or a registration), and for restored workers
  // (their agent's registration reconciles them). Memory only.
  double start_watch = -1;
  // Its StartWorkers's ack_floor (start_confirm.h); kFloorByTime: reloaded
  // after a failed state write (rule 0); 0: not known (rule 2, a guard).
  // Memory only.
  std::uint64_t start_floor = 0;
};
struct LiveJob {
  JobRecord rec;
  p::SubmitJob spec;
  std::map<p::WorkerId, LiveWorker> workers;  // live workers
  std::int64_t generation = 0;
  std::size_t members_announced = 0;  // size of the last generation Converge made (memory only)
  p::WorkerId next_worker = 0;
  int starts = 0;
  int failures = 0;
  int master_port = 0;  // this start's MASTER_PORT (memory only)
  std::string master_host;  // and the host of the rank 0 that listens on it
  double last_start = 0;  // wall time of this start (rec.start_time is the first; memory only)
  std::string home_store = "none";  // rendezvous store of this start ("host:port"), "none" without one
  // Its life cycle (job_machine.h): phase, planned and formed generations.
  // kCompleting: a worker said it finished; the job is done once the rest
  // are gone, unless its peers report steps past that worker's end
  // (life.completing_step(), On(JobProgress)): then it left early.
  JobMachine life;
  bool Completing() const { return life.Is(JobPhase::kCompleting); }
  bool Restarting() const { return life.Is(JobPhase::kRestarting); }
  double completing_since = 0;
  // Who the job's failure report names: the worker whose own end began
  // `completing` (its peers' failures often follow from it: a collective
  // whose peer is gone), and the worker whose end fails the job (the first
  // that failed). Persisted; `failure` goes out in the final JobEvent.
  std::optional<p::WorkerEnd> first_end;
  std::optional<p::WorkerEnd> failure;
  std::int64_t step = 0;
  double loss = 0, rate = 0;
  std::int64_t rescales = 0;
  std::int64_t preemptions = 0;
  double last_resize_pause = 0;  // as the runtime last measured it (memory only)
  // A restart's pause, from the stop of every worker to the first step the
  // new group reports (journaled as restart_report; memory only: a restart
  // under way when the scheduler restarts goes unmeasured).
  double restart_stopped_at = 0;    // wall time of the stop; 0: none under way
  std::int64_t restart_from = 0;    // workers before it
  std::int64_t restart_to = 0;      // workers of the new group, once started
  std::int64_t restart_generation = 0;  // the new group's, once started
  bool restart_planned = true;          // a resize, not a failure
  // Restart elasticity (SubmitJob::elastic): `runtime` once the program was
  // seen to link the runtime; phase kRestarting while every worker is being
  // stopped to start the group again (a resize or a failure); `restarts`
  // counts the restarts after failures (against max_restarts).
  bool runtime = false;
  int restarts = 0;
  // A resize of a job that did not say how it resizes, planned before its
  // kind is known: carried out once the runtime's hello arrives (in place)
  // or kKindDetectSeconds after the start without one (restart). Memory only.
  bool resize_pending = false;
  // A resize of this job stops and restarts all its workers (explicit
  // "restart", or unset and the program has not shown that it links the runtime).
  bool RestartsToResize() const {
    return spec.elastic ? *spec.elastic == "restart" : !runtime;
  }
  // SIGTERM..SIGKILL for this job's workers (SubmitJob::stop_grace).
  double StopGrace(double scheduler_default) const { return spec.stop_grace.value_or(scheduler_default); }
  // node -> workers that stay (not asked to leave).
  std::map<std::string, int> LivePlacement() const {
    std::map<std::string, int> out;
    for (const auto& [id, w] : workers)
      if (!w.leaving) out[w.agent]++;
    return out;
  }
  double last_progress_event = 0;
  // Fencing (LeaseFence): the nodes on which the job lost workers, whose
  // agents may still run them until their leases run out; no fresh start
  // (a new group from the checkpoint) before the latest. Saved with the job,
  // so a restarted scheduler keeps the wait (aryl-simtest --daemon found a
  // fresh start beside a partitioned agent's workers when it did not); a
  // node that has not come back since is also given a lease from the restart.
  LeaseFence lease;
  // Nodes whose agents still run stray workers of the job (agents.cc,
  // Reconcile): no fresh start meanwhile. Memory only.
  std::set<std::string> stray_nodes;
  double last_loss_time = -1e9;   // wall time a worker of the job was last lost (memory only)
  // Measured speed (speed.cc): 1 / the median step time of rank 0's newest
  // summary. Memory only.
  double measured_rate = 0;
  std::vector<std::string> watchers;  // client identities
  std::deque<std::string> output;
};

}  // namespace aryl::daemon
