// The simulated worker processes (live_sim.h), which follow the runtime's
// resize protocol (runtime/include/aryl/runtime.h), modelled:
//
//  1. Start: the process starts (0.3-3 s), sets ready/<id>, then enters the
//     rendezvous of the generation it was started for; without that
//     generation's record it waits for the announcement (60 s), and a worker
//     not among the record's members leaves.
//  2. Rendezvous: the group forms when every member is in it (the agents read
//     rank 0's report/<G>); a fresh group (joiners only) restores the newest
//     checkpoint. A joiner that waits 30 s exits; a stayer's timeout is a
//     fault.
//  3. Step (the group's step time): the training group commits a step, a
//     checkpoint every 50; at the step boundary it agrees on the newest
//     generation any member was announced and enters it together.
//  4. Faults: a member lost from the training group, or a stayer's timed-out
//     rendezvous, makes the survivors regroup into the fault successor after
//     the 2 s settle.
//  5. Stop (SIGTERM): the lowest id of the training group, standing for rank
//     0, checkpoints first; Kill (SIGKILL) just ends the process.
// Every exit is reported to the agent (its GenerationQueue) at once and to
// the scheduler by message.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace aryl::simtest {

class Agents;
class Network;
class Scheduler;
struct JobTruth;

enum class WorkerState { kStarting, kRendezvous, kAwaitRecord, kTraining, kGone };

struct Worker {
  std::int64_t id = 0;
  int agent = 0;
  WorkerState state = WorkerState::kStarting;
  std::int64_t gen = 0;               // store generation it trains in or is entering
  std::vector<std::int64_t> members;  // of gen
  double deadline = 0;                // of a rendezvous or a record wait
  bool joiner = true;                 // has not trained yet (no fault recovery)
  std::int64_t started_for = 0;       // store generation of its start
  std::map<std::int64_t, std::vector<std::int64_t>> records;  // announced to it
};

class Workers {
 public:
  Workers(Network& net, JobTruth& job, Agents& agents, Scheduler& scheduler)
      : net_(net), job_(job), agents_(agents), scheduler_(scheduler) {}

  // Every worker ever started, by id.
  const std::map<std::int64_t, Worker>& all() const { return workers_; }
  bool Exists(std::int64_t id) const { return workers_.count(id) > 0; }
  bool IsReady(std::int64_t id) const { return ready_.count(id) > 0; }  // ready/<id> set
  std::vector<std::int64_t> LiveOn(int agent) const;                    // by id

  // ---- from the agents
  void Spawn(std::int64_t id, int agent, std::int64_t store_gen, std::vector<std::int64_t> members);
  void Terminate(int agent, std::int64_t id);
  void Deliver(std::int64_t id, std::int64_t gen, std::vector<std::int64_t> members);

  // ---- faults
  void Kill(std::int64_t id, const std::string& why);
  std::int64_t kills() const { return kills_; }

  // ---- time
  void Step();      // one step of the group that trains
  void Timeouts();  // rendezvous and record waits past their deadline

 private:
  void Exit(Worker& w, bool lost, const std::string& why);
  void Enter(Worker& w, std::int64_t gen);
  void TryFormRendezvous(std::int64_t gen);
  void Agree(std::vector<Worker*>& group);
  void Regroup(std::int64_t gen, const std::vector<Worker*>& survivors, const std::string& who);

  Network& net_;
  JobTruth& job_;
  Agents& agents_;
  Scheduler& scheduler_;
  std::map<std::int64_t, Worker> workers_;
  std::set<std::int64_t> ready_;  // the store's ready/<id>
  std::int64_t kills_ = 0;
};

}  // namespace aryl::simtest
