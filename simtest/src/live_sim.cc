#include "aryl/simtest/live_sim.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <sstream>

#include "aryl/agent/generation_queue.h"
#include "aryl/daemon/converger.h"
#include "aryl/daemon/job_machine.h"
#include "aryl/protocol/generation.h"

namespace aryl::simtest {

Result<unsigned> ParseFaults(const std::string& list) {
  unsigned out = 0;
  std::stringstream ss(list);
  std::string word;
  while (std::getline(ss, word, ',')) {
    if (word == "all")
      out |= kFaultAll;
    else if (word == "none" || word.empty())
      continue;
    else if (word == "kill")
      out |= kFaultKill;
    else if (word == "loan")
      out |= kFaultLoan;
    else if (word == "network")
      out |= kFaultNetwork;
    else
      return Status::InvalidArgument("--faults: unknown fault '" + word +
                                     "' (known: kill, loan, network, all, none)");
  }
  return out;
}

std::string FaultsString(unsigned faults) {
  std::string s;
  for (auto [bit, name] :
       {std::pair{kFaultKill, "kill"}, {kFaultLoan, "loan"}, {kFaultNetwork, "network"}})
    if (faults & bit) s += (s.empty() ? "" : ",") + std::string(name);
  return s.empty() ? "none" : s;
}

namespace {

using agent::GenerationQueue;
using daemon::JobMachine;
using daemon::JobPhase;
namespace p = aryl::protocol;

constexpr double kRendezvousTimeout = 30;  // the runtime's default
constexpr double kRecordTimeout = 60;  // a record never announced: channel wait, then the store's
constexpr double kFaultSettle = 2;     // the runtime's fault settle
constexpr double kTick = 0.1;          // the scheduler's converge tick and the agents' store pump
constexpr std::int64_t kCheckpointEvery = 50;
constexpr double kHorizon = 1800;
constexpr double kQuietForProgress = 120;  // I4: no step this long after the last fault
constexpr std::int64_t kJob = 1;
constexpr double kMaxDelay = 1.6;
constexpr double kFormingTimeout =
    40;  // the daemon's  // a message's longest delay, a duplicate's included

enum class WS { kStarting, kRendezvous, kAwaitRecord, kTraining, kGone };

struct Worker {
  std::int64_t id = 0;
  int agent = 0;
  WS s = WS::kStarting;
  std::int64_t gen = 0;               // store generation it trains in or is entering
  std::vector<std::int64_t> members;  // of gen
  double deadline = 0;                // of a rendezvous or a record wait
  bool joiner = true;                 // has not trained yet (no fault recovery)
  std::int64_t started_for = 0;       // store generation of its start
  std::map<std::int64_t, std::vector<std::int64_t>> records;  // announced to it
};

struct Agent {
  std::string name;
  bool inference = false;
  int slots = 0;
  bool lent = false;             // inference: lent to training
  double reclaim_deadline = -1;  // a reclaim under way
  GenerationQueue queue;
  std::set<std::int64_t> refused;  // stopped before they started
};

struct SchedWorker {  // the scheduler's view of a worker (the daemon's LiveWorker)
  int agent = 0;
  std::int64_t joined = 0;  // plan (scheduler generation) it was started for
  bool leaving = false;
  int slot = 0;
  int rank = 0;
  std::int64_t generation = 0;  // plan of its last announcement; 0: not yet a member
};

class World {
 public:
  World(const Options& opt) : opt_(opt), rng_(opt.seed * 0x9E3779B97F4A7C15ull + 1) {}

  Outcome Run();

 private:
  // ---- randomness and time
  double Uniform(double a, double b) { return a + (b - a) * (double(rng_() >> 11) * 0x1.0p-53); }
  bool Chance(double p) { return Uniform(0, 1) < p; }
  void At(double t, std::function<void()> fn) { queue_.push({t, seq_++, std::move(fn)}); }
  void After(double dt, std::function<void()> fn) { At(now_ + dt, std::move(fn)); }
  // A message's delay, with faults duplicated (the copy later) and reordered (a wide spread).
  void Send(std::function<void()> deliver) {
    const bool net = opt_.faults & kFaultNetwork;
    double d = net ? Uniform(0.001, Chance(0.1) ? 1.0 : 0.2) : 0.002;
    After(d, deliver);
    if (net && Chance(0.05)) After(d + Uniform(0, 0.5), deliver);  // within kMaxDelay
  }
  void Trace(const std::string& line) {
    if (opt_.trace) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%10.3f ", now_);
      out_.trace.push_back(buf + line);
    }
  }
  // The first violation of each invariant in a run (the later ones follow from it).
  void Violate(const std::string& inv, const std::string& what) {
    if (!violated_.insert(inv).second) return;
    out_.violations.push_back({now_, inv, what});
    Trace("VIOLATION " + inv + ": " + what);
  }

  // ---- the scheduler: the daemon's own converger (converger.h) and
  // JobMachine; the core's placement is modelled (Converge's `want`)
  void Converge();
  void StartGeneration(const daemon::ConvergeResult& plan);
  void OnWorkerExit(std::int64_t id, bool lost);
  void OnProgress(std::int64_t store_gen, std::int64_t step);
  void Offer();
  void Reclaim(double deadline);

  // ---- agents (the real GenerationQueue)
  void AgentNewGeneration(int a, std::int64_t store_gen, std::vector<std::int64_t> members);
  void AgentStart(int a, std::int64_t id, std::int64_t store_gen,
                  std::vector<std::int64_t> members);
  void AgentStop(int a, std::int64_t id);
  void Pump(int a);

  // ---- workers (the runtime's resize protocol, modelled)
  void Kill(std::int64_t id, const std::string& why);
  void Exit(Worker& w, bool lost, const std::string& why);
  void Enter(Worker& w, std::int64_t gen);
  void TryFormRendezvous(std::int64_t gen);
  void StepGroup();
  void Agree(std::vector<Worker*>& group);
  void Deliver(std::int64_t id, std::int64_t gen, std::vector<std::int64_t> members);
  void Timeouts();
  void Regroup(std::int64_t gen, const std::vector<Worker*>& survivors, const std::string& who);

  void Check();

  struct Ev {
    double t;
    std::uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };

  Options opt_;
  std::mt19937_64 rng_;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> queue_;
  std::uint64_t seq_ = 0;
  double now_ = 0;
  Outcome out_;
  std::set<std::string> violated_;

  std::vector<Agent> agents_;
  std::map<std::int64_t, Worker> workers_;  // every worker ever started, by id
  std::int64_t next_worker_ = 0;
  std::set<std::int64_t> ready_;                            // the store's ready/<id>
  std::map<std::int64_t, std::set<std::int64_t>> entered_;  // rendezvous of a store generation

  // The scheduler.
  JobMachine life_;
  std::int64_t plan_ = 0;
  std::map<std::int64_t, SchedWorker> sched_;  // live workers as the scheduler knows them
  std::int64_t min_ = 1, max_ = 4, total_steps_ = 600;
  bool converge_due_ = true;
  double last_loss_ = -1e9;  // when a worker was last lost (the daemon's last_loss_time)
  std::size_t members_announced_ = 0;
  bool done_ = false;

  // The job's truth.
  std::int64_t step_ = 0, checkpoint_ = 0;
  double step_time_ = 0.3;
  double last_step_at_ = 0, last_fault_at_ = 0;
  std::int64_t plans_since_step_ = 0;
  std::int64_t trained_gen_ = 0;  // store generation of the newest trained step
  std::map<std::int64_t, std::int64_t> max_gen_seen_;  // per worker (I1)
};

// Converge: the core's placement is modelled (what the usable slots allow,
// training server first, up to the job's maximum); what the job's workers do
// about it is the daemon's own PlanConverge, carried out as Daemon::Impl
// does (converge.cc). One plan per tick at most.
void World::Converge() {
  if (done_ || life_.Is(JobPhase::kCompleting) || daemon::IsFinal(life_.phase())) return;
  daemon::ConvergeInput in;
  in.life = &life_;
  int total = 0;
  for (int a = 0; a < int(agents_.size()); ++a) {
    const Agent& ag = agents_[a];
    bool usable = !ag.inference || (ag.lent && ag.reclaim_deadline < 0);
    int n = usable ? std::min<int>(ag.slots, int(max_) - total) : 0;
    if (n > 0) in.desired[ag.name] = n;
    total += std::max(0, n);
    in.nodes[ag.name] = {ag.slots, !ag.inference, {}};
  }
  if (total < min_) return;
  for (const auto& [id, w] : sched_)
    in.workers[id] = {id, agents_[w.agent].name, w.rank, w.slot, w.generation, w.joined, w.leaving};
  in.in_place = true;
  in.last_loss_time = last_loss_;
  in.members_announced = members_announced_;
  in.generation = plan_;
  in.next_worker = next_worker_;
  in.now = now_;
  in.forming_timeout = kFormingTimeout;
  const daemon::ConvergeResult plan = daemon::PlanConverge(in);
  if (plan.again) converge_due_ = true;
  for (std::int64_t id : plan.abandoned) {
    SchedWorker& w = sched_.at(id);
    w.leaving = true;
    const int a = w.agent;
    Trace("scheduler: generation " + std::to_string(life_.planned()) + " abandoned; stop joiner " +
          std::to_string(id));
    Send([this, a, id] { AgentStop(a, id); });
  }
  switch (plan.step) {
    case daemon::ConvergeStep::kNone:
    case daemon::ConvergeStep::kWaitForming:
    case daemon::ConvergeStep::kPending:
    case daemon::ConvergeStep::kLeaseWait:
      return;
    case daemon::ConvergeStep::kRestart:
      // A fresh group starts once every old worker is gone: those still
      // alive are stopped first, checkpointing (Daemon::Impl::Restart).
      if (!life_.RestartBegun(now_))
        Violate("T", "JobMachine refused RestartBegun in " + std::string(PhaseName(life_.phase())));
      Trace("scheduler: a fresh group waits for the old workers to stop");
      for (auto& [id, w] : sched_) {
        w.leaving = true;
        std::int64_t wid = id;
        int a = w.agent;
        Send([this, a, wid] { AgentStop(a, wid); });
      }
      return;
    case daemon::ConvergeStep::kGeneration:
      StartGeneration(plan);
      return;
  }
}

void World::StartGeneration(const daemon::ConvergeResult& plan) {
  plan_ = plan.generation;
  ++plans_since_step_;
  out_.generations = plan_;
  const std::int64_t store_gen = p::PlanGeneration(plan_);
  // Every agent hosting a worker of the job (leavers too) hears of it.
  std::set<int> hosting;
  for (auto id : plan.leavers) sched_.at(id).leaving = true;
  for (const auto& [id, w] : sched_) hosting.insert(w.agent);
  std::map<std::string, int> index;
  for (int a = 0; a < int(agents_.size()); ++a) index[agents_[a].name] = a;
  std::vector<std::pair<int, std::int64_t>> joiners;
  for (const auto& jn : plan.joiners) {
    const int a = index.at(jn.node);
    sched_[jn.id] = {a, plan_, false, jn.slot, 0, 0};
    joiners.push_back({a, jn.id});
  }
  next_worker_ = plan.next_worker;
  const std::vector<std::int64_t>& members = plan.members;
  for (std::size_t r = 0; r < members.size(); ++r) {
    sched_.at(members[r]).rank = int(r);
    sched_.at(members[r]).generation = plan_;
  }
  members_announced_ = members.size();
  const bool fresh = plan.fresh;
  if (fresh) {
    if (!life_.Started(plan_, now_))
      Violate("T", "JobMachine refused Started in " + std::string(PhaseName(life_.phase())));
  } else if (!life_.Resized(plan_, now_)) {
    Violate("T", "JobMachine refused Resized in " + std::string(PhaseName(life_.phase())));
  }
  Trace("plan " + std::to_string(plan_) + (fresh ? " (fresh)" : "") + ": " +
        std::to_string(members.size()) + " members, " + std::to_string(joiners.size()) +
        " joiners, " + std::to_string(plan.leavers.size()) + " leavers");
  if (!fresh)
    for (int a : hosting)
      Send([this, a, store_gen, members] { AgentNewGeneration(a, store_gen, members); });
  for (auto [a, id] : joiners)
    Send([this, a, id, store_gen, members] { AgentStart(a, id, store_gen, members); });
  // Leavers on a server whose reclaim is under way: stopped at its deadline (I5).
}

void World::OnWorkerExit(std::int64_t id, bool lost) {
  auto it = sched_.find(id);
  if (it == sched_.end()) return;  // a duplicate
  const bool leaving = it->second.leaving;
  sched_.erase(it);
  if (lost && !leaving) {
    last_fault_at_ = now_;
    last_loss_ = now_;
  }
  converge_due_ = true;
}

void World::OnProgress(std::int64_t store_gen, std::int64_t step) {
  (void)step;
  life_.Formed(p::PlanOf(store_gen), now_);
}

void World::Offer() {
  Agent& inf = agents_[1];
  if (inf.lent) return;
  inf.lent = true;
  inf.reclaim_deadline = -1;
  ++out_.loans;
  Trace("offer " + inf.name);
  converge_due_ = true;
}

void World::Reclaim(double deadline) {
  Agent& inf = agents_[1];
  if (!inf.lent || inf.reclaim_deadline >= 0) return;
  inf.reclaim_deadline = now_ + deadline;
  Trace("reclaim " + inf.name + " by " + std::to_string(inf.reclaim_deadline));
  converge_due_ = true;
  // At the deadline every worker still there is stopped, then the server is returned.
  After(deadline - 0.3, [this] {
    for (auto& [id, w] : sched_)
      if (w.agent == 1) {
        w.leaving = true;
        std::int64_t wid = id;
        Send([this, wid] { AgentStop(1, wid); });
      }
  });
  After(deadline, [this] {
    agents_[1].lent = false;
    agents_[1].reclaim_deadline = -1;
  });
  // Checked once the stops sent before the deadline have surely arrived (the
  // network's delay bound), for the workers started before the reclaim.
  const std::int64_t before = next_worker_;
  After(deadline + kMaxDelay, [this, before] {
    for (const auto& [id, w] : workers_)
      if (id < before && w.agent == 1 && w.s != WS::kGone)
        Violate("I5", "worker " + std::to_string(id) +
                          " still on the returned server after the reclaim's deadline");
  });
}

// ---- agents

void World::AgentNewGeneration(int a, std::int64_t store_gen, std::vector<std::int64_t> members) {
  GenerationQueue::Generation g;
  g.job = kJob;
  g.generation = store_gen;
  g.members = std::move(members);
  g.key = "1-1";
  agents_[a].queue.Plan(std::move(g), now_);
}

void World::AgentStart(int a, std::int64_t id, std::int64_t store_gen,
                       std::vector<std::int64_t> members) {
  // A duplicate, or a worker whose stop overtook its start (the agent said it does not run).
  if (workers_.count(id) || agents_[a].refused.count(id)) return;
  Worker& w = workers_[id];
  w.id = id;
  w.agent = a;
  w.started_for = store_gen;
  w.records[store_gen] = members;  // remembered for its hello (agent.cc, OnStart)
  // Process start, then ready/<id> and the hello; then the rendezvous.
  After(Uniform(0.3, 3.0), [this, id] {
    Worker& w = workers_[id];
    if (w.s != WS::kStarting) return;
    ready_.insert(id);
    Enter(w, w.started_for);
  });
}

void World::AgentStop(int a, std::int64_t id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    // Not started here (yet): the agent reports it as not running (the
    // scheduler's reconciliation) and will not start it.
    agents_[a].refused.insert(id);
    Send([this, id] { OnWorkerExit(id, false); });
    return;
  }
  if (it->second.agent != a || it->second.s == WS::kGone) return;
  Worker& w = it->second;
  // SIGTERM: the runtime checkpoints at its next step boundary, then stops
  // (rank 0 writes; the lowest id of a training group stands for rank 0).
  if (w.s == WS::kTraining) {
    std::int64_t lowest = w.id;
    for (const auto& [id, o] : workers_)
      if (o.s == WS::kTraining && o.gen == w.gen) lowest = std::min(lowest, id);
    if (lowest == w.id && step_ > checkpoint_) {
      checkpoint_ = step_;
      Trace("worker " + std::to_string(w.id) + " checkpoints step " + std::to_string(step_) +
            " as it stops");
    }
  }
  Exit(w, /*lost=*/false, "stopped");
}

void World::Pump(int a) {
  Agent& ag = agents_[a];
  ag.queue.Expire(now_);
  for (const auto& g : ag.queue.InFlight()) {
    if (g.state == GenerationQueue::State::kForming) {
      bool all = std::all_of(g.members.begin(), g.members.end(),
                             [&](std::int64_t m) { return ready_.count(m) > 0; });
      if (!all) continue;
      if (!ag.queue.AllReady(g.job, g.generation, now_)) continue;
      Trace(ag.name + ": announce " + std::to_string(g.generation));
      for (const auto& [id, w] : workers_)
        if (w.agent == a && w.s != WS::kGone) {
          std::int64_t wid = id, gen = g.generation;
          auto members = g.members;
          Send([this, wid, gen, members] { Deliver(wid, gen, members); });
        }
    } else if (g.state == GenerationQueue::State::kAgreed && trained_gen_ >= g.generation) {
      ag.queue.Reported(g.job, g.generation);  // report/<G> is in the store
    }
  }
  for (const auto& t : ag.queue.TakeTransitions())
    if (t.to == GenerationQueue::State::kAbandoned) {
      ++out_.abandoned;
      Trace(ag.name + ": generation " + std::to_string(t.generation) + " abandoned (" +
            std::string(GenerationQueue::Name(t.event)) + ")");
    }
}

// ---- workers

void World::Kill(std::int64_t id, const std::string& why) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.s == WS::kGone) return;
  ++out_.kills;
  last_fault_at_ = now_;
  Exit(it->second, /*lost=*/true, why);
}

void World::Exit(Worker& w, bool lost, const std::string& why) {
  Trace("worker " + std::to_string(w.id) + " exits (" + why + ")");
  w.s = WS::kGone;
  agents_[w.agent].queue.MemberEnded(kJob, w.id);
  std::int64_t id = w.id;
  Send([this, id, lost] { OnWorkerExit(id, lost); });
}

void World::Enter(Worker& w, std::int64_t gen) {
  auto rec = w.records.find(gen);
  if (rec == w.records.end()) {  // wait for the announcement
    w.s = WS::kAwaitRecord;
    w.gen = gen;
    w.deadline = now_ + kRecordTimeout;
    return;
  }
  if (std::find(rec->second.begin(), rec->second.end(), w.id) == rec->second.end()) {
    Exit(w, /*lost=*/false, "left: not in generation " + std::to_string(gen));
    return;
  }
  w.s = WS::kRendezvous;
  w.gen = gen;
  w.members = rec->second;
  w.deadline = now_ + kRendezvousTimeout;
  entered_[gen].insert(w.id);
  TryFormRendezvous(gen);
}

void World::TryFormRendezvous(std::int64_t gen) {
  std::vector<Worker*> in;
  std::vector<std::int64_t> members;
  for (auto& [id, w] : workers_)
    if (w.s == WS::kRendezvous && w.gen == gen) {
      in.push_back(&w);
      members = w.members;
    }
  if (in.empty()) return;
  for (std::int64_t m : members) {
    auto it = workers_.find(m);
    if (it == workers_.end() || it->second.s != WS::kRendezvous || it->second.gen != gen) return;
  }
  // Formed: every member enters; rank 0 writes report/<G> (the agents read it).
  bool fresh = std::all_of(in.begin(), in.end(), [](Worker* w) { return w->joiner; });
  for (Worker* w : in) {
    w->s = WS::kTraining;
    w->joiner = false;
  }
  if (fresh && step_ > checkpoint_) {
    Trace("fresh group restores step " + std::to_string(checkpoint_) + " (was " +
          std::to_string(step_) + ")");
    step_ = checkpoint_;
  }
  trained_gen_ = std::max(trained_gen_, gen);
  Trace("generation " + std::to_string(gen) + " formed with " + std::to_string(members.size()));
}

void World::Deliver(std::int64_t id, std::int64_t gen, std::vector<std::int64_t> members) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.s == WS::kGone) return;
  Worker& w = it->second;
  w.records[gen] = members;
  if (w.s == WS::kAwaitRecord && w.gen == gen) Enter(w, gen);
}

// One step of the group that trains: a lost member fails the collective and
// the survivors regroup; else the step commits and, at its boundary, the
// group agrees on the newest generation any member was announced.
void World::StepGroup() {
  std::vector<Worker*> group;
  std::int64_t gen = 0;
  for (auto& [id, w] : workers_)
    if (w.s == WS::kTraining) {
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
  ++step_;
  last_step_at_ = now_;
  plans_since_step_ = 0;
  trained_gen_ = std::max(trained_gen_, gen);
  if (step_ % kCheckpointEvery == 0) checkpoint_ = step_;
  std::int64_t s = step_;
  Send([this, gen, s] { OnProgress(gen, s); });
  if (step_ >= total_steps_) {
    done_ = true;
    out_.completed = true;
    Trace("job completed at step " + std::to_string(step_));
    for (Worker* w : group) Exit(*w, false, "completed");
    life_.WorkerDone(step_, now_);
    life_.Ended(JobPhase::kCompleted, now_);
    return;
  }
  Agree(group);
}

void World::Agree(std::vector<Worker*>& group) {
  std::int64_t target = group.front()->gen;
  for (Worker* w : group)
    if (!w->records.empty()) target = std::max(target, w->records.rbegin()->first);
  if (target <= group.front()->gen) return;
  Trace("group agrees on generation " + std::to_string(target));
  for (Worker* w : group) Enter(*w, target);
}

// Fault recovery (runtime.h): `survivors` of failed generation `gen` form
// its fault successor after the settle time.
void World::Regroup(std::int64_t gen, const std::vector<Worker*>& survivors,
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
    w->s = WS::kRendezvous;
    w->gen = *next;
    w->members = ids;
    w->deadline = now_ + kRendezvousTimeout;
  }
  if (!next.ok()) return;
  std::int64_t g = *next;
  After(kFaultSettle, [this, g] { TryFormRendezvous(g); });
  Trace(who + " regroup as " + std::to_string(g));
}

void World::Timeouts() {
  std::set<std::int64_t> regroup;
  for (auto& [id, w] : workers_) {
    if ((w.s != WS::kRendezvous && w.s != WS::kAwaitRecord) || now_ <= w.deadline) continue;
    if (w.joiner || w.s == WS::kAwaitRecord) {
      Exit(w, true, "interrupted: generation " + std::to_string(w.gen) + " did not form in time");
    } else {
      regroup.insert(w.gen);  // a stayer's rendezvous timed out: fault recovery among its members
    }
  }
  for (std::int64_t gen : regroup) {
    std::vector<Worker*> survivors;
    for (auto& [id, w] : workers_)
      if (w.s == WS::kRendezvous && w.gen == gen && !w.joiner) survivors.push_back(&w);
    Regroup(gen, survivors, "the rendezvous of " + std::to_string(gen) + " timed out; its stayers");
  }
}

// ---- invariants

void World::Check() {
  std::set<std::int64_t> training;
  for (const auto& [id, w] : workers_) {
    if (w.s == WS::kTraining) training.insert(w.gen);
    auto& seen = max_gen_seen_[id];
    if (w.s != WS::kGone && w.gen > 0) {
      if (w.gen < seen)
        Violate("I1", "worker " + std::to_string(id) + " went back from generation " +
                          std::to_string(seen) + " to " + std::to_string(w.gen));
      seen = std::max(seen, w.gen);
    }
  }
  if (training.size() > 1)
    Violate("I2", "two groups train at once: generations " + std::to_string(*training.begin()) +
                      " and " + std::to_string(*training.rbegin()));
  if (step_ < checkpoint_)
    Violate("I3",
            "step " + std::to_string(step_) + " behind checkpoint " + std::to_string(checkpoint_));
  if (!done_ && plans_since_step_ > kMaxGenerationsWithoutStep)
    Violate("I4", std::to_string(plans_since_step_) +
                      " generations planned without a trained step (livelock)");
  if (!done_ && now_ - std::max(last_step_at_, last_fault_at_) > kQuietForProgress)
    Violate("I4", "no step for " +
                      std::to_string(int(now_ - std::max(last_step_at_, last_fault_at_))) +
                      " s after the last fault (" + std::to_string(plans_since_step_) +
                      " generations since)");
}

Outcome World::Run() {
  // The cluster and the job, from the seed.
  agents_.resize(2);
  agents_[0].name = "train";
  agents_[0].slots = 2 + int(rng_() % 2);
  agents_[1].name = "infer";
  agents_[1].inference = true;
  agents_[1].slots = 2 + int(rng_() % 2);
  min_ = 1;
  max_ = agents_[0].slots + agents_[1].slots;
  total_steps_ = 300 + std::int64_t(rng_() % 500);
  step_time_ = Uniform(0.1, 0.5);

  // Faults.
  if (opt_.faults & kFaultLoan) {
    double t = Uniform(2, 20);
    for (int cycle = 0; cycle < 4 && t < 600; ++cycle) {
      At(t, [this] { Offer(); });
      double held = Uniform(2, 60);
      double deadline = Chance(0.5) ? 1.0 : Uniform(2, 30);
      At(t + held, [this, deadline] { Reclaim(deadline); });
      t += held + deadline + Uniform(1, 40);
    }
  }
  if (opt_.faults & kFaultKill) {
    int kills = 1 + int(rng_() % 4);
    for (int k = 0; k < kills; ++k) {
      double t = Uniform(3, 400);
      At(t, [this] {
        std::vector<std::int64_t> live;
        for (const auto& [id, w] : workers_)
          if (w.s != WS::kGone) live.push_back(id);
        if (!live.empty()) Kill(live[rng_() % live.size()], "SIGKILL");
      });
    }
    // A kill during a grow: shortly after the first offer's plan.
    if ((opt_.faults & kFaultLoan) && Chance(0.5)) {
      double t = Uniform(2, 20) + Uniform(0.05, 1.0);
      At(t, [this] {
        std::vector<std::int64_t> fresh;
        for (const auto& [id, w] : workers_)
          if (w.s == WS::kStarting || w.s == WS::kRendezvous) fresh.push_back(id);
        if (!fresh.empty()) Kill(fresh[rng_() % fresh.size()], "SIGKILL during a grow");
      });
    }
  }

  // The periodic work: the scheduler's tick, the agents' pumps, the group's steps.
  std::function<void()> tick = [&] {
    if (converge_due_) {
      converge_due_ = false;
      Converge();
    }
    for (int a = 0; a < int(agents_.size()); ++a) Pump(a);
    Timeouts();
    if (!done_) After(kTick, tick);
  };
  std::function<void()> step = [&] {
    StepGroup();
    converge_due_ = converge_due_ || !done_;
    if (!done_) After(step_time_, step);
  };
  At(0, tick);
  At(step_time_, step);

  while (!queue_.empty() && !done_) {
    Ev ev = queue_.top();
    queue_.pop();
    if (ev.t > kHorizon) break;
    now_ = ev.t;
    ++out_.events;
    ev.fn();
    Check();
    if (out_.violations.size() >= 20) break;
  }
  if (!done_ && out_.violations.empty())
    Violate("I6", "the job did not complete within " + std::to_string(int(kHorizon)) + " s (step " +
                      std::to_string(step_) + " of " + std::to_string(total_steps_) + ")");
  out_.end_time = now_;
  out_.steps = step_;
  return std::move(out_);
}

}  // namespace

Outcome RunSeed(const Options& opt) {
  World w(opt);
  return w.Run();
}

}  // namespace aryl::simtest
