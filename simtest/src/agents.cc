#include "agents.h"

#include <algorithm>

#include "job_truth.h"
#include "network.h"
#include "scheduler.h"
#include "workers.h"

namespace aryl::simtest {

using agent::GenerationQueue;

void Agents::Add(const std::string& name) {
  agents_.emplace_back();
  agents_.back().name = name;
}

void Agents::Plan(int a, std::int64_t store_gen, std::vector<std::int64_t> members) {
  GenerationQueue::Generation g;
  g.job = kJob;
  g.generation = store_gen;
  g.members = std::move(members);
  g.key = "1-1";
  agents_[a].queue.Plan(std::move(g), net_.now());
}

void Agents::Start(int a, std::int64_t id, std::int64_t store_gen,
                   std::vector<std::int64_t> members) {
  // A duplicate, or a worker whose stop overtook its start (the agent said it does not run).
  if (workers_.Exists(id) || agents_[a].refused.count(id)) return;
  workers_.Spawn(id, a, store_gen, std::move(members));
}

void Agents::Stop(int a, std::int64_t id) {
  if (!workers_.Exists(id)) {
    // Not started here (yet): the agent reports it as not running (the
    // scheduler's reconciliation) and will not start it.
    agents_[a].refused.insert(id);
    net_.Send([this, id] { scheduler_.OnWorkerExit(id, false); });
    return;
  }
  workers_.Terminate(a, id);
}

void Agents::Pump(int a) {
  Agent& ag = agents_[a];
  ag.queue.Expire(net_.now());
  for (const auto& g : ag.queue.InFlight()) {
    if (g.state == GenerationQueue::State::kForming) {
      bool all = std::all_of(g.members.begin(), g.members.end(),
                             [&](std::int64_t m) { return workers_.IsReady(m); });
      if (!all) continue;
      if (!ag.queue.AllReady(g.job, g.generation, net_.now())) continue;
      net_.Trace(ag.name + ": announce " + std::to_string(g.generation));
      for (std::int64_t wid : workers_.LiveOn(a)) {
        std::int64_t gen = g.generation;
        auto members = g.members;
        net_.Send([this, wid, gen, members] { workers_.Deliver(wid, gen, members); });
      }
    } else if (g.state == GenerationQueue::State::kAgreed && job_.trained_gen >= g.generation) {
      ag.queue.Reported(g.job, g.generation);  // report/<G> is in the store
    }
  }
  for (const auto& t : ag.queue.TakeTransitions())
    if (t.to == GenerationQueue::State::kAbandoned) {
      ++abandoned_;
      net_.Trace(ag.name + ": generation " + std::to_string(t.generation) + " abandoned (" +
                 std::string(GenerationQueue::Name(t.event)) + ")");
    }
}

void Agents::MemberEnded(int a, std::int64_t id) { agents_[a].queue.MemberEnded(kJob, id); }

}  // namespace aryl::simtest
