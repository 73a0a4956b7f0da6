#include "scheduler.h"

#include <algorithm>
#include <set>

#include "agents.h"
#include "aryl/protocol/generation.h"
#include "invariants.h"
#include "job_truth.h"
#include "network.h"

namespace aryl::simtest {
namespace {

using daemon::JobPhase;
namespace p = aryl::protocol;

constexpr double kFormingTimeout = 40;  // the daemon's

}  // namespace

void Scheduler::AddNode(const std::string& name, int slots, bool inference) {
  if (inference) lendable_ = int(nodes_.size());
  nodes_.push_back({name, slots, inference, false, -1});
}

void Scheduler::Tick() {
  if (!converge_due_) return;
  converge_due_ = false;
  Converge();
}

void Scheduler::StopWorker(int agent, std::int64_t id) {
  net_.Send([this, agent, id] { agents_.Stop(agent, id); });
}

// Converge: the core's placement is modelled (what the usable slots allow,
// training server first, up to the job's maximum); what the job's workers do
// about it is the daemon's own PlanConverge, carried out as Daemon::Impl
// does (converge.cc).
void Scheduler::Converge() {
  if (job_.done || life_.Is(JobPhase::kCompleting) || daemon::IsFinal(life_.phase())) return;
  daemon::ConvergeInput in;
  in.life = &life_;
  int total = 0;
  for (const Node& node : nodes_) {
    bool usable = !node.inference || (node.lent && node.reclaim_deadline < 0);
    int n = usable ? std::min<int>(node.slots, int(max_) - total) : 0;
    if (n > 0) in.desired[node.name] = n;
    total += std::max(0, n);
    in.nodes[node.name] = {node.slots, !node.inference, {}};
  }
  if (total < min_) return;
  for (const auto& [id, w] : workers_)
    in.workers[id] = {id, nodes_[w.agent].name, w.rank, w.slot, w.generation, w.joined, w.leaving};
  in.in_place = true;
  in.last_loss_time = last_loss_;
  in.members_announced = members_announced_;
  in.generation = plan_;
  in.next_worker = next_worker_;
  in.now = net_.now();
  in.forming_timeout = kFormingTimeout;
  const daemon::ConvergeResult plan = daemon::PlanConverge(in);
  if (plan.again) converge_due_ = true;
  for (std::int64_t id : plan.abandoned) {
    LiveWorker& w = workers_.at(id);
    w.leaving = true;
    net_.Trace("scheduler: generation " + std::to_string(life_.planned()) +
               " abandoned; stop joiner " + std::to_string(id));
    StopWorker(w.agent, id);
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
      if (!life_.RestartBegun(net_.now()))
        checker_.Violate(
            "T", "JobMachine refused RestartBegun in " + std::string(PhaseName(life_.phase())));
      net_.Trace("scheduler: a fresh group waits for the old workers to stop");
      for (auto& [id, w] : workers_) {
        w.leaving = true;
        StopWorker(w.agent, id);
      }
      return;
    case daemon::ConvergeStep::kGeneration:
      StartGeneration(plan);
      return;
  }
}

void Scheduler::StartGeneration(const daemon::ConvergeResult& plan) {
  plan_ = plan.generation;
  ++job_.plans_since_step;
  const std::int64_t store_gen = p::PlanGeneration(plan_);
  // Every agent hosting a worker of the job (leavers too) hears of it.
  std::set<int> hosting;
  for (auto id : plan.leavers) workers_.at(id).leaving = true;
  for (const auto& [id, w] : workers_) hosting.insert(w.agent);
  std::map<std::string, int> index;
  for (int a = 0; a < int(nodes_.size()); ++a) index[nodes_[a].name] = a;
  std::vector<std::pair<int, std::int64_t>> joiners;
  for (const auto& jn : plan.joiners) {
    const int a = index.at(jn.node);
    workers_[jn.id] = {a, plan_, false, jn.slot, 0, 0};
    joiners.push_back({a, jn.id});
  }
  next_worker_ = plan.next_worker;
  const std::vector<std::int64_t>& members = plan.members;
  for (std::size_t r = 0; r < members.size(); ++r) {
    workers_.at(members[r]).rank = int(r);
    workers_.at(members[r]).generation = plan_;
  }
  members_announced_ = members.size();
  const bool fresh = plan.fresh;
  const double now = net_.now();
  if (fresh) {
    if (!life_.Started(plan_, now))
      checker_.Violate("T",
                       "JobMachine refused Started in " + std::string(PhaseName(life_.phase())));
  } else if (!life_.Resized(plan_, now)) {
    checker_.Violate("T", "JobMachine refused Resized in " + std::string(PhaseName(life_.phase())));
  }
  net_.Trace("plan " + std::to_string(plan_) + (fresh ? " (fresh)" : "") + ": " +
             std::to_string(members.size()) + " members, " + std::to_string(joiners.size()) +
             " joiners, " + std::to_string(plan.leavers.size()) + " leavers");
  if (!fresh)
    for (int a : hosting)
      net_.Send([this, a, store_gen, members] { agents_.Plan(a, store_gen, members); });
  for (auto [a, id] : joiners)
    net_.Send([this, a, id, store_gen, members] { agents_.Start(a, id, store_gen, members); });
  // Leavers on a server whose reclaim is under way: stopped at its deadline (I5).
}

void Scheduler::OnWorkerExit(std::int64_t id, bool lost) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;  // a duplicate
  const bool leaving = it->second.leaving;
  workers_.erase(it);
  if (lost && !leaving) {
    job_.last_fault_at = net_.now();
    last_loss_ = net_.now();
  }
  converge_due_ = true;
}

void Scheduler::OnProgress(std::int64_t store_gen, std::int64_t /*step*/) {
  life_.Formed(p::PlanOf(store_gen), net_.now());
}

void Scheduler::OnCompleted(std::int64_t step) {
  life_.WorkerDone(step, net_.now());
  life_.Ended(JobPhase::kCompleted, net_.now());
}

void Scheduler::Offer() {
  Node& inf = nodes_[lendable_];
  if (inf.lent) return;
  inf.lent = true;
  inf.reclaim_deadline = -1;
  ++loans_;
  net_.Trace("offer " + inf.name);
  converge_due_ = true;
}

void Scheduler::Reclaim(double deadline) {
  Node& inf = nodes_[lendable_];
  if (!inf.lent || inf.reclaim_deadline >= 0) return;
  inf.reclaim_deadline = net_.now() + deadline;
  net_.Trace("reclaim " + inf.name + " by " + std::to_string(inf.reclaim_deadline));
  converge_due_ = true;
  // At the deadline every worker still there is stopped, then the server is returned.
  net_.After(deadline - 0.3, [this] {
    for (auto& [id, w] : workers_)
      if (w.agent == lendable_) {
        w.leaving = true;
        StopWorker(lendable_, id);
      }
  });
  net_.After(deadline, [this] {
    nodes_[lendable_].lent = false;
    nodes_[lendable_].reclaim_deadline = -1;
  });
  // Checked once the stops sent before the deadline have surely arrived (the
  // network's delay bound), for the workers started before the reclaim.
  const std::int64_t before = next_worker_;
  net_.After(deadline + kMaxDelay, [this, before] { checker_.CheckReclaim(lendable_, before); });
}

}  // namespace aryl::simtest
