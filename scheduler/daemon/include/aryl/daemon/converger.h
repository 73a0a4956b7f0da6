// The converger: from the core's placement of a live job to what its workers
// must do. A pure function of the job (its workers and life cycle), the
// desired placement (node -> workers), the nodes' slots and the time: no
// clock, no I/O, no messages. The daemon (converge.cc) carries out its answer
// (messages to agents, journal rows, the job's store row); aryl-simtest runs
// the same function against its simulated agents and workers.
//
// The steps of one call, in order (each ends the call where it says so):
//   C1 a restart under way waits for its old workers to be gone     -> kNone
//   C2 a fresh group of a job that lost workers on a failed node waits for
//      that node's lease to run out (two copies never train at once) -> kLeaseWait
//   C3 the placement is what runs                                   -> kNone
//   C4 the forming rule (job_machine.h, WhileForming), for programs that link
//      the runtime and resize in place: a voluntary change waits      -> kWaitForming
//      a forced one abandons the forming generation: its unformed joiners are
//      stopped (`abandoned`) and count as gone from here on
//   C5 no worker stays: a fresh group starts once every old worker is gone,
//      so they are stopped first                                    -> kRestart
//   C6 leavers: beyond `desired` on a node, highest ranks first
//   C7 joiners: on free slots, training servers first (so rank 0 and the
//      job's rendezvous store stay off loaned servers); a node with too few
//      free slots is reported (`short_nodes`) and the job converges again later
//   C8 a fresh start that could place no worker                     -> kPending
//      a change that changes nothing (no leaver, no joiner, no loss) -> kNone
//   C9 the new generation: stayers keep their rank order, joiners follow -> kGeneration
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "aryl/daemon/job_machine.h"

namespace aryl::daemon {

struct ConvergeWorker {
  std::int64_t id = 0;
  std::string node;
  int rank = 0;
  int slot = 0;
  std::int64_t generation = 0;  // of its last announcement; 0: not yet a member
  std::int64_t joined = 0;      // the generation it was started for
  bool leaving = false;
};

struct ConvergeNode {
  int slots = 0;
  bool training = true;          // a training server (not a loaned one)
  std::set<int> used_by_others;  // slots other jobs' staying workers hold
};

struct ConvergeInput {
  const JobMachine* life = nullptr;                // required
  std::map<std::int64_t, ConvergeWorker> workers;  // the job's live workers, by id
  std::map<std::string, int> desired;              // node -> workers
  std::map<std::string, ConvergeNode> nodes;       // at least the nodes of `desired`
  bool in_place = false;  // links the runtime and resizes in place (the forming rule applies)
  double last_loss_time = -1e9;       // when a worker of the job was last lost
  double restart_not_before = 0;      // no fresh start before (a failed node's lease)
  std::size_t members_announced = 0;  // size of the last generation made
  std::int64_t generation = 0;        // the job's newest generation
  std::int64_t next_worker = 0;       // the id the first joiner gets
  double now = 0;
  double forming_timeout = 0;
};

enum class ConvergeStep { kNone, kLeaseWait, kWaitForming, kRestart, kPending, kGeneration };
std::string_view ConvergeStepName(ConvergeStep s);

struct ConvergeResult {
  ConvergeStep step = ConvergeStep::kNone;
  double lease_left = 0;        // kLeaseWait: seconds until the lease has run out
  bool restart_planned = true;  // kRestart: no worker was lost since the last plan
  // C4: unformed joiners of the abandoned generation (stopped at once, with
  // no grace: they wait in its rendezvous and have nothing to save). May be
  // set with any later step.
  std::vector<std::int64_t> abandoned;
  std::vector<std::int64_t> leavers;  // C6, in the order they were picked
  struct Joiner {
    std::int64_t id = 0;
    std::string node;
    int slot = 0;
  };
  std::vector<Joiner> joiners;             // C7, in the order of `members`
  std::map<std::string, int> short_nodes;  // C7: node -> slots missing
  // kGeneration: the new generation and its members in rank order (stayers,
  // then joiners); `fresh` when no worker stays (a start).
  std::int64_t generation = 0;
  std::vector<std::int64_t> members;
  bool fresh = false;
  std::int64_t next_worker = 0;  // after the joiners' ids
  // Whether the daemon should converge the job again on a later tick.
  bool again = false;
};

ConvergeResult PlanConverge(const ConvergeInput& in);

// C6 alone: the workers not leaving beyond `desired` on their node, highest
// ranks first (a completing job gives back the slots the core took).
std::vector<std::int64_t> PickLeavers(const std::map<std::int64_t, ConvergeWorker>& workers,
                                      const std::map<std::string, int>& desired);

}  // namespace aryl::daemon
