#include "workers.h"

#include <algorithm>

#include "agents.h"
#include "aryl/protocol/generation.h"
#include "job_truth.h"
#include "network.h"
#include "scheduler.h"

namespace aryl::simtest {
namespace {

namespace p = aryl::protocol;

constexpr double kRendezvousTimeout = 30;  // the runtime's default
constexpr double kRecordTimeout = 60;  // a record never announced: channel wait, then the store's
constexpr double kFaultSettle = 2;     // the runtime's fault settle
constexpr std::int64_t kCheckpointEvery = 50;

}  // namespace

std::vector<std::int64_t> Workers::LiveOn(int agent) const {
  std::vector<std::int64_t> ids;
  for (const auto& [id, w] : workers_)
    if (w.agent == agent && w.state != WorkerState::kGone) ids.push_back(id);
  return ids;
}

void Workers::Spawn(std::int64_t id, int agent, std::int64_t store_gen,
                    std::vector<std::int64_t> members) {
  Worker& w = workers_[id];
  w.id = id;
  w.agent = agent;
  w.started_for = store_gen;
  w.records[store_gen] = std::move(members);  // remembered for its hello (agent.cc, OnStart)
  // Process start, then ready/<id> and the hello; then the rendezvous.
  net_.After(net_.Uniform(0.3, 3.0), [this, id] {
    Worker& w = workers_[id];
    if (w.state != WorkerState::kStarting) return;
    ready_.insert(id);
    Enter(w, w.started_for);
  });
}

void Workers::Terminate(int agent, std::int64_t id) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.agent != agent || it->second.state == WorkerState::kGone)
    return;
  Worker& w = it->second;
  // SIGTERM: the runtime checkpoints at its next step boundary, then stops
  // (rank 0 writes; the lowest id of a training group stands for rank 0).
  if (w.state == WorkerState::kTraining) {
    std::int64_t lowest = w.id;
    for (const auto& [oid, o] : workers_)
      if (o.state == WorkerState::kTraining && o.gen == w.gen) lowest = std::min(lowest, oid);
    if (lowest == w.id && job_.step > job_.checkpoint) {
      job_.checkpoint = job_.step;
      net_.Trace("worker " + std::to_string(w.id) + " checkpoints step " +
                 std::to_string(job_.step) + " as it stops");
    }
  }
  Exit(w, /*lost=*/false, "stopped");
}

void Workers::Kill(std::int64_t id, const std::string& why) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.state == WorkerState::kGone) return;
  ++kills_;
  job_.last_fault_at = net_.now();
  Exit(it->second, /*lost=*/true, why);
}

void Workers::Exit(Worker& w, bool lost, const std::string& why) {
  net_.Trace("worker " + std::to_string(w.id) + " exits (" + why + ")");
  w.state = WorkerState::kGone;
  agents_.MemberEnded(w.agent, w.id);
  std::int64_t id = w.id;
  net_.Send([this, id, lost] { scheduler_.OnWorkerExit(id, lost); });
}

void Workers::Enter(Worker& w, std::int64_t gen) {
  auto rec = w.records.find(gen);
  if (rec == w.records.end()) {  // wait for the announcement
    w.state = WorkerState::kAwaitRecord;
    w.gen = gen;
    w.deadline = net_.now() + kRecordTimeout;
    return;
  }
  if (std::find(rec->second.begin(), rec->second.end(), w.id) == rec->second.end()) {
    Exit(w, /*lost=*/false, "left: not in generation " + std::to_string(gen));
    return;
  }
  w.state = WorkerState::kRendezvous;
  w.gen = gen;
  w.members = rec->second;
  w.deadline = net_.now() + kRendezvousTimeout;
  TryFormRendezvous(gen);
}

void Workers::TryFormRendezvous(std::int64_t gen) {
  std::vector<Worker*> in;
  std::vector<std::int64_t> members;
  for (auto& [id, w] : workers_)
    if (w.state == WorkerState::kRendezvous && w.gen == gen) {
      in.push_back(&w);
      members = w.members;
    }
  if (in.empty()) return;
  for (std::int64_t m : members) {
    auto it = workers_.find(m);
    if (it == workers_.end() || it->second.state != WorkerState::kRendezvous ||
        it->second.gen != gen)
      return;
  }
  // Formed: every member enters; rank 0 writes report/<G> (the agents read it).
  bool fresh = std::all_of(in.begin(), in.end(), [](Worker* w) { return w->joiner; });
  for (Worker* w : in) {
    w->state = WorkerState::kTraining;
    w->joiner = false;
  }
  if (fresh && job_.step > job_.checkpoint) {
    net_.Trace("fresh group restores step " + std::to_string(job_.checkpoint) + " (was " +
               std::to_string(job_.step) + ")");
    job_.step = job_.checkpoint;
  }
  job_.trained_gen = std::max(job_.trained_gen, gen);
  net_.Trace("generation " + std::to_string(gen) + " formed with " +
             std::to_string(members.size()));
}

void Workers::Deliver(std::int64_t id, std::int64_t gen, std::vector<std::int64_t> members) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.state == WorkerState::kGone) return;
  Worker& w = it->second;
  w.records[gen] = members;
  if (w.state == WorkerState::kAwaitRecord && w.gen == gen) Enter(w, gen);
}

// One step of the group that trains: a lost member fails the collective and
// the survivors regroup; else the step commits and, at its boundary, the
// group agrees on the newest generation any member was announced.
void Workers::Step() {
  std::vector<Worker*> group;
  std::int64_t gen = 0;
  for (auto& [id, w] : workers_)
    if (w.state == WorkerState::kTraining) {
      group.push_back(&w);
      gen = w.gen;
    }
  if (group.empty()) return;
  const auto& members = group.front()->members;
  bool whole = group.size() == members.size();
  if (!whole) {
    Regroup(gen, group, "survivors of " + std::to_string(gen));
    return;
  }
  ++job_.step;
  job_.last_step_at = net_.now();
  job_.plans_since_step = 0;
  job_.trained_gen = std::max(job_.trained_gen, gen);
  if (job_.step % kCheckpointEvery == 0) job_.checkpoint = job_.step;
  std::int64_t s = job_.step;
  net_.Send([this, gen, s] { scheduler_.OnProgress(gen, s); });
  if (job_.step >= job_.total_steps) {
    job_.done = true;
    net_.Trace("job completed at step " + std::to_string(job_.step));
    for (Worker* w : group) Exit(*w, false, "completed");
    scheduler_.OnCompleted(job_.step);
    return;
  }
  Agree(group);
}

void Workers::Agree(std::vector<Worker*>& group) {
  std::int64_t target = group.front()->gen;
  for (Worker* w : group)
    if (!w->records.empty()) target = std::max(target, w->records.rbegin()->first);
  if (target <= group.front()->gen) return;
  net_.Trace("group agrees on generation " + std::to_string(target));
  for (Worker* w : group) Enter(*w, target);
}

// Fault recovery (runtime.h): `survivors` of failed generation `gen` form
// its fault successor after the settle time.
void Workers::Regroup(std::int64_t gen, const std::vector<Worker*>& survivors,
                      const std::string& who) {
  auto next = p::FaultSuccessor(gen);
  std::vector<std::int64_t> ids;
  for (Worker* w : survivors) ids.push_back(w->id);
  for (Worker* w : survivors) {
    if (!next.ok()) {
      Exit(*w, true, "fault recoveries exhausted");
      continue;
    }
    w->records[*next] = ids;
    w->state = WorkerState::kRendezvous;
    w->gen = *next;
    w->members = ids;
    w->deadline = net_.now() + kRendezvousTimeout;
  }
  if (!next.ok()) return;
  std::int64_t g = *next;
  net_.After(kFaultSettle, [this, g] { TryFormRendezvous(g); });
  net_.Trace(who + " regroup as " + std::to_string(g));
}

void Workers::Timeouts() {
  std::set<std::int64_t> regroup;
  for (auto& [id, w] : workers_) {
    if ((w.state != WorkerState::kRendezvous && w.state != WorkerState::kAwaitRecord) ||
        net_.now() <= w.deadline)
      continue;
    if (w.joiner || w.state == WorkerState::kAwaitRecord) {
      Exit(w, true, "interrupted: generation " + std::to_string(w.gen) + " did not form in time");
    } else {
      regroup.insert(w.gen);  // a stayer's rendezvous timed out: fault recovery among its members
    }
  }
  for (std::int64_t gen : regroup) {
    std::vector<Worker*> survivors;
    for (auto& [id, w] : workers_)
      if (w.state == WorkerState::kRendezvous && w.gen == gen && !w.joiner) survivors.push_back(&w);
    Regroup(gen, survivors, "the rendezvous of " + std::to_string(gen) + " timed out; its stayers");
  }
}

}  // namespace aryl::simtest
