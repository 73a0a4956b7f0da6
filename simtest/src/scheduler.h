// The scheduler's side of the simulation (live_sim.h): the daemon's own
// JobMachine and converger (aryl/daemon/converger.h, PlanConverge), carried
// out as Daemon::Impl does (converge.cc) against the simulated agents; the
// core's placement and its loans are modelled.
//
//  1. Placement (Converge): what the usable slots allow, the training server
//     first, up to the job's maximum; a server being reclaimed counts no more.
//  2. PlanConverge decides; this class carries out its answer: stops the
//     abandoned joiners, stops the old workers before a fresh group, or makes
//     the new generation (StartGeneration) and sends it to every agent that
//     hosts a worker of the job, and the joiners' starts to theirs.
//  3. Reports from the agents and workers (OnWorkerExit, OnProgress) and the
//     loans (Offer, Reclaim) make the next tick converge again. One plan per
//     tick at most.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "aryl/daemon/converger.h"
#include "aryl/daemon/job_machine.h"

namespace aryl::simtest {

class Agents;
class InvariantChecker;
class Network;
struct JobTruth;

class Scheduler {
 public:
  Scheduler(Network& net, JobTruth& job, InvariantChecker& checker, Agents& agents)
      : net_(net), job_(job), checker_(checker), agents_(agents) {}

  // The cluster, in the agents' order (a node's index is its agent's), and
  // the job's size limits.
  void AddNode(const std::string& name, int slots, bool inference);
  void SetJobSize(std::int64_t min, std::int64_t max) { min_ = min, max_ = max; }

  // The converge tick: converges when something changed since the last one.
  void Tick();
  void ConvergeSoon() { converge_due_ = true; }

  // ---- reports (messages from agents and workers)
  void OnWorkerExit(std::int64_t id, bool lost);
  void OnProgress(std::int64_t store_gen, std::int64_t step);
  void OnCompleted(std::int64_t step);

  // ---- the inference server's loan
  void Offer();
  void Reclaim(double deadline);

  std::int64_t plans() const { return plan_; }
  std::int64_t loans() const { return loans_; }

 private:
  struct Node {  // the core's view of a server
    std::string name;
    int slots = 0;
    bool inference = false;
    bool lent = false;             // inference: lent to training
    double reclaim_deadline = -1;  // a reclaim under way
  };
  struct LiveWorker {  // the daemon's LiveWorker
    int agent = 0;
    std::int64_t joined = 0;  // plan (scheduler generation) it was started for
    bool leaving = false;
    int slot = 0;
    int rank = 0;
    std::int64_t generation = 0;  // plan of its last announcement; 0: not yet a member
  };

  void Converge();
  void StartGeneration(const daemon::ConvergeResult& plan);
  void StopWorker(int agent, std::int64_t id);

  Network& net_;
  JobTruth& job_;
  InvariantChecker& checker_;
  Agents& agents_;

  std::vector<Node> nodes_;
  int lendable_ = -1;  // the inference server's index
  daemon::JobMachine life_;
  std::int64_t plan_ = 0;
  std::map<std::int64_t, LiveWorker> workers_;  // live workers as the scheduler knows them
  std::int64_t next_worker_ = 0;
  std::int64_t min_ = 1, max_ = 4;
  bool converge_due_ = true;
  double last_loss_ = -1e9;  // when a worker was last lost (the daemon's last_loss_time)
  std::size_t members_announced_ = 0;
  std::int64_t loans_ = 0;  // offers made
};

}  // namespace aryl::simtest
