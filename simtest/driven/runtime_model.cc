#include "runtime_model.h"

#include <algorithm>

#include "aryl/protocol/generation.h"

namespace aryl::daemon::testing {

void RuntimeModel::Train(p::JobId job, std::int64_t total_steps, double now) {
  training_[job].trained = true;
  training_[job].total = total_steps;
  training_[job].next_step = now + 1;
}

std::int64_t RuntimeModel::Formed(p::JobId job) const {
  auto it = training_.find(job);
  return it == training_.end() ? 0 : it->second.formed;
}

int RuntimeModel::GenerationsStarted(p::JobId job) const {
  auto it = training_.find(job);
  return it == training_.end() ? 0 : static_cast<int>(it->second.members.size());
}

bool RuntimeModel::Done(p::JobId job) const {
  auto it = training_.find(job);
  return it != training_.end() && it->second.done;
}

std::int64_t RuntimeModel::FreshStart(p::JobId job) const {
  auto it = training_.find(job);
  return it == training_.end() ? 0 : it->second.fresh;
}

std::int64_t RuntimeModel::Step(p::JobId job) const {
  auto it = training_.find(job);
  return it == training_.end() ? 0 : it->second.step;
}

void RuntimeModel::NoteGeneration(p::JobId job, std::int64_t gen, const std::vector<p::WorkerId>& members,
                                  const std::vector<p::WorkerPlacement>* started, double now) {
  Training& t = training_[job];  // every job's generations, trained or not
  // A generation none of whose members was in an earlier one is a fresh
  // start (a restart from the checkpoint).
  bool fresh = !t.members.count(gen);
  for (const auto& [g, earlier] : t.members)
    for (p::WorkerId w : members)
      if (g < gen && std::find(earlier.begin(), earlier.end(), w) != earlier.end()) fresh = false;
  if (fresh && !t.members.empty()) {
    t.fresh = std::max(t.fresh, gen);
    // A fresh group restores the checkpoint and trains on, even when an
    // older one already ended (on an agent the scheduler had given up on).
    t.done = false;
  }
  t.members[gen] = members;
  t.announced.emplace(gen, now);
  if (started)
    for (const auto& w : *started) t.joined_for[w.worker] = gen;
}

void RuntimeModel::Tick(double now, const Workers& ws) {
  for (auto& [job, t] : training_) {
    if (!t.trained || t.members.empty()) continue;
    // A member of the formed generation gone: the survivors regroup (a
    // fault generation of the same plan) without the scheduler.
    if (t.formed > 0)
      for (p::WorkerId w : t.members[t.formed])
        if (!ws.running(w, nullptr)) t.fault = true;
    // The newest generation forms once all of its members run and are free
    // to join it: a joiner started for an earlier generation that has not
    // formed is still inside that generation's rendezvous (it gives up only
    // at its timeout) and hears of no later one.
    const auto& [newest, members] = *t.members.rbegin();
    auto free_to_join = [&, newest = newest](p::WorkerId w) {
      auto jf = t.joined_for.find(w);
      return ws.running(w, nullptr) && (jf == t.joined_for.end() || jf->second >= newest);
    };
    if (newest > t.formed && !members.empty() && now - t.announced[newest] >= kStartup &&
        std::all_of(members.begin(), members.end(), free_to_join)) {
      t.formed = newest;
      t.fault = false;
      for (auto jf = t.joined_for.begin(); jf != t.joined_for.end();)
        jf = jf->second <= newest ? t.joined_for.erase(jf) : std::next(jf);
    }
    // Joiners of a generation that never formed give up.
    std::vector<std::pair<std::string, p::WorkerId>> give_up;
    for (const auto& [w, gen] : t.joined_for) {
      std::string agent;
      if (gen > t.formed && now - t.announced[gen] > kRendezvousTimeout && ws.running(w, &agent))
        give_up.emplace_back(agent, w);
    }
    for (const auto& [agent, w] : give_up) {
      t.joined_for.erase(w);
      ws.exit(agent, w, 3, "interrupted", std::nullopt);
    }
    // Rank 0 of the formed generation reports a step a second.
    if (t.done || t.formed == 0 || now + 1e-9 < t.next_step) continue;
    t.next_step = now + 1;
    std::string agent;
    const auto& formed = t.members[t.formed];
    auto rank0 = std::find_if(formed.begin(), formed.end(), [&](p::WorkerId w) { return ws.running(w, &agent); });
    if (rank0 == formed.end()) continue;  // nobody left to train
    if (t.total > 0 && t.step >= t.total) {
      // The last step: every member that runs ends, "completed".
      t.done = true;
      for (p::WorkerId w : formed)
        if (ws.running(w, &agent)) ws.exit(agent, w, 0, "completed", t.step);
      continue;
    }
    const std::int64_t store_gen = p::PlanGeneration(t.formed) + (t.fault ? 1 : 0);
    p::JobProgress m;
    m.job = job;
    m.generation = store_gen;
    m.step = ++t.step;
    m.steps_per_second = 1;
    m.runtime = true;
    ws.send(agent, std::move(m));
  }
}

}  // namespace aryl::daemon::testing
