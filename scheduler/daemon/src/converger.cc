// PlanConverge (converger.h): steps C1-C9.
#include "aryl/daemon/converger.h"

#include <algorithm>

namespace aryl::daemon {

std::string_view ConvergeStepName(ConvergeStep s) {
  switch (s) {
    case ConvergeStep::kNone:
      return "none";
    case ConvergeStep::kLeaseWait:
      return "lease wait";
    case ConvergeStep::kWaitForming:
      return "wait for the forming generation";
    case ConvergeStep::kRestart:
      return "restart";
    case ConvergeStep::kPending:
      return "pending";
    case ConvergeStep::kGeneration:
      return "generation";
  }
  return "?";
}

namespace {

// Workers not leaving, per node.
std::map<std::string, int> Staying(const std::map<std::int64_t, ConvergeWorker>& workers) {
  std::map<std::string, int> have;
  for (const auto& [id, w] : workers)
    if (!w.leaving) have[w.node]++;
  return have;
}

}  // namespace

std::vector<std::int64_t> PickLeavers(const std::map<std::int64_t, ConvergeWorker>& workers,
                                      const std::map<std::string, int>& desired) {
  std::map<std::string, std::vector<std::int64_t>> actual;
  for (const auto& [id, w] : workers)
    if (!w.leaving) actual[w.node].push_back(id);
  std::vector<std::int64_t> leavers;
  for (auto& [node, ids] : actual) {
    auto want = desired.find(node);
    const std::size_t keep = want == desired.end() ? 0 : static_cast<std::size_t>(want->second);
    std::sort(ids.begin(), ids.end(),
              [&](auto a, auto b) { return workers.at(a).rank < workers.at(b).rank; });
    while (ids.size() > keep) {
      leavers.push_back(ids.back());
      ids.pop_back();
    }
  }
  return leavers;
}

ConvergeResult PlanConverge(const ConvergeInput& in) {
  ConvergeResult out;
  out.next_worker = in.next_worker;
  const JobMachine& life = *in.life;
  std::map<std::int64_t, ConvergeWorker> workers = in.workers;  // leavers marked on this copy

  // C1
  if (life.Is(JobPhase::kRestarting) && !workers.empty()) return out;
  std::map<std::string, int> have = Staying(workers);
  // C2
  if (have.empty() && !in.desired.empty() && in.now < in.restart_not_before) {
    out.step = ConvergeStep::kLeaseWait;
    out.lease_left = in.restart_not_before - in.now;
    out.again = true;
    return out;
  }
  // C3
  if (have == in.desired && !in.desired.empty()) return out;
  // C4
  if (in.in_place && !have.empty()) {
    bool forced = in.last_loss_time >= life.planned_at();
    for (const auto& [node, n] : have) {
      auto d = in.desired.find(node);
      forced = forced || d == in.desired.end() || d->second < n;
    }
    switch (WhileForming(life, forced, in.now, in.forming_timeout)) {
      case FormingDecision::kWait:
        out.step = ConvergeStep::kWaitForming;
        out.again = true;
        return out;
      case FormingDecision::kAbandonThenPlan: {
        std::vector<MemberView> live;
        for (const auto& [id, w] : workers) live.push_back({id, w.joined, w.leaving});
        out.abandoned = UnformedJoiners(live, life.formed());
        for (std::int64_t id : out.abandoned) workers.at(id).leaving = true;
        if (!out.abandoned.empty()) have = Staying(workers);
        break;
      }
      case FormingDecision::kPlan:
        break;
    }
  }
  // C5
  bool stays = false;
  for (const auto& [node, n] : have) {
    auto d = in.desired.find(node);
    stays = stays || (d != in.desired.end() && std::min(n, d->second) > 0);
  }
  if (!stays && !in.desired.empty() && !workers.empty()) {
    out.step = ConvergeStep::kRestart;
    out.restart_planned = in.last_loss_time < life.planned_at();
    return out;
  }
  out.fresh = have.empty();
  // C6
  out.leavers = PickLeavers(workers, in.desired);
  for (std::int64_t id : out.leavers) workers.at(id).leaving = true;
  // C7: training servers first.
  std::vector<std::pair<std::string, int>> order(in.desired.begin(), in.desired.end());
  auto loaned = [&](const std::string& node) {
    auto it = in.nodes.find(node);
    return it == in.nodes.end() || !it->second.training ? 1 : 0;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](const auto& a, const auto& b) { return loaned(a.first) < loaned(b.first); });
  for (const auto& [node, want] : order) {
    auto h = have.find(node);
    const int got = h == have.end() ? 0 : h->second;
    if (got >= want) continue;
    auto nit = in.nodes.find(node);
    if (nit == in.nodes.end()) continue;
    std::set<int> used = nit->second.used_by_others;
    for (const auto& [id, w] : workers)
      if (!w.leaving && w.node == node) used.insert(w.slot);
    std::vector<int> free;
    for (int i = 0; i < nit->second.slots; ++i)
      if (!used.count(i)) free.push_back(i);
    if (static_cast<int>(free.size()) < want - got) {
      out.short_nodes[node] = want - got - static_cast<int>(free.size());
      out.again = true;
    }
    for (int k = got, f = 0; k < want && f < static_cast<int>(free.size()); ++k, ++f)
      out.joiners.push_back({out.next_worker++, node, free[f]});
  }
  // C8
  if (out.fresh && out.joiners.empty()) {
    out.step = ConvergeStep::kPending;
    out.again = true;
    return out;
  }
  if (!out.fresh && out.leavers.empty() && out.joiners.empty()) {
    std::size_t staying = 0;
    for (const auto& [id, w] : workers) staying += !w.leaving;
    if (staying == in.members_announced) return out;
  }
  // C9
  out.step = ConvergeStep::kGeneration;
  out.generation = in.generation + 1;
  std::vector<std::pair<int, std::int64_t>> stayers;
  for (const auto& [id, w] : workers)
    if (!w.leaving && w.generation != 0) stayers.push_back({w.rank, id});
  std::sort(stayers.begin(), stayers.end());
  for (const auto& [rank, id] : stayers) out.members.push_back(id);
  for (const auto& j : out.joiners) out.members.push_back(j.id);
  return out;
}

}  // namespace aryl::daemon
