// The simulated agents (live_sim.h): each runs the real GenerationQueue
// (aryl/agent/generation_queue.h) that decides when a planned generation is
// announced to its workers, superseded or abandoned; starting and stopping
// the worker processes is modelled.
//
//  1. Plan: a generation the scheduler sent joins the agent's queue.
//  2. Start / Stop: the scheduler's start and stop of one worker. A stop that
//     overtakes its start is answered "not running" and the start refused.
//  3. Pump (the store pump, every tick): a forming generation whose members
//     all set ready/<id> is announced to every live worker of the agent; an
//     agreed one whose step was trained (report/<G> in the store) is done.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "aryl/agent/generation_queue.h"

namespace aryl::simtest {

class Network;
class Scheduler;
class Workers;
struct JobTruth;

class Agents {
 public:
  Agents(Network& net, const JobTruth& job, Workers& workers, Scheduler& scheduler)
      : net_(net), job_(job), workers_(workers), scheduler_(scheduler) {}

  void Add(const std::string& name);
  int size() const { return int(agents_.size()); }

  // ---- messages from the scheduler, to agent `a`
  void Plan(int a, std::int64_t store_gen, std::vector<std::int64_t> members);
  void Start(int a, std::int64_t id, std::int64_t store_gen, std::vector<std::int64_t> members);
  void Stop(int a, std::int64_t id);

  void Pump(int a);
  // A worker of agent `a` exited (its process ended).
  void MemberEnded(int a, std::int64_t id);

  std::int64_t abandoned() const { return abandoned_; }  // generations abandoned, all agents

 private:
  struct Agent {
    std::string name;
    agent::GenerationQueue queue;
    std::set<std::int64_t> refused;  // stopped before they started
  };

  Network& net_;
  const JobTruth& job_;
  Workers& workers_;
  Scheduler& scheduler_;
  std::vector<Agent> agents_;
  std::int64_t abandoned_ = 0;
};

}  // namespace aryl::simtest
