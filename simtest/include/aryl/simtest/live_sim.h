// A deterministic simulation of one elastic job's life on a small live
// cluster, driven by one seed (the anchors: FoundationDB's simulation testing,
// TigerBeetle's VOPR).
//
// What runs is the live system's own decision code, the same translation
// units as the binaries: each agent's GenerationQueue (aryl/agent/
// generation_queue.h: when a planned generation is announced to the workers,
// superseded or abandoned) and the scheduler's JobMachine and converger
// (aryl/daemon/job_machine.h, aryl/daemon/converger.h: the job's phases, the
// forming rule, stayers, leavers and joiners of each new generation). Around
// them, in one thread and in virtual time:
//  - the core's placement (the training server first, a reclaimed server's
//    slots no more) and the scheduler's message handling, modelled;
//  - the network between scheduler, agents and workers: every message is
//    delayed, and with faults duplicated and reordered;
//  - workers that speak the runtime's resize protocol (runtime.h): joiners
//    set ready and wait in their generation's rendezvous (30 s timeout);
//    stayers move at a step boundary to the newest generation any of them was
//    announced, or leave when not a member; a lost peer makes the survivors
//    regroup (fault recovery) after a settle time; a fresh group restores
//    the newest checkpoint.
// Faults come from the seed: worker kills at any moment (during a grow, a
// shrink, a checkpoint, a reclaim), loans offered and reclaimed with short
// deadlines, message delay, duplication and reordering.
//
// Invariants, checked after every event:
//   I1 the scheduler's generations and each worker's only grow
//   I2 never two groups train at once (every training worker is in one generation)
//   I3 no step is lost beyond the newest checkpoint, and none is trained twice
//   I4 the job progresses: at most kMaxGenerationsWithoutStep generations
//      planned without a trained step, and no 120 s without one once faults
//      stopped (a livelock is a violation, not a slow run)
//   I5 every reclaim is met by its deadline: no live worker on a server after
//      it was returned
//   I6 the job ends (completes) by the horizon
// A run is a pure function of (seed, faults): the same arguments give the
// same events, bit for bit (one RNG, one event queue ordered by time and
// insertion).
//
// The parts, one class each in simtest/src/: Network (network.h: time, the
// RNG, messages), Scheduler (scheduler.h), Agents (agents.h), Workers
// (workers.h), InvariantChecker (invariants.h) and the job's truth they move
// and check (job_truth.h); live_sim.cc wires them and draws the cluster, the
// job and the faults from the seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aryl/result.h"

namespace aryl::simtest {

// Fault classes, by bit.
enum Fault : unsigned {
  kFaultKill = 1u << 0,     // SIGKILL a worker at a random moment (biased to grows and reclaims)
  kFaultLoan = 1u << 1,     // offer and reclaim the inference server, short deadlines
  kFaultNetwork = 1u << 2,  // message delay spread, duplication and reordering
  kFaultAll = kFaultKill | kFaultLoan | kFaultNetwork,
};
// "kill,loan,network" or "all" or "none"; InvalidArgument names the bad word.
Result<unsigned> ParseFaults(const std::string& list);
std::string FaultsString(unsigned faults);

struct Options {
  std::uint64_t seed = 1;
  unsigned faults = kFaultAll;
  bool trace = false;  // keep a line per event (for --replay)
  bool daemon_log = false;  // --daemon with trace: the daemon's log lines too
};

struct Violation {
  double time = 0;
  std::string invariant;  // "I1".."I6"
  std::string what;
};

struct Outcome {
  std::vector<Violation> violations;
  bool completed = false;
  double end_time = 0;             // virtual seconds
  std::int64_t steps = 0;          // the job's committed steps at the end
  std::int64_t generations = 0;    // plans the scheduler made
  std::int64_t kills = 0;
  std::int64_t loans = 0;          // offers made
  std::int64_t abandoned = 0;      // generations the agents abandoned
  std::int64_t events = 0;
  // --daemon: checkpoints that became good, writes torn, and the most steps
  // one fresh start trained again.
  std::int64_t checkpoints = 0, torn = 0, retrained = 0;
  // --daemon: checkpoint writes that failed (a full disk, an I/O error), and
  // checkpoint files corrupted on the disk.
  std::int64_t checkpoints_failed = 0, checkpoints_corrupted = 0;
  std::vector<std::string> trace;  // with Options::trace
};

inline constexpr int kMaxGenerationsWithoutStep = 12;

Outcome RunSeed(const Options& opt);

}  // namespace aryl::simtest
