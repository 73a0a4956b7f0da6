#include "usage.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace aryl::daemon {

UsageLedger::UsageLedger(double since, double until, std::function<std::string(std::uint64_t)> key_of,
                         std::set<std::string> inference)
    : since_(since), until_(until), key_of_(std::move(key_of)), inference_(std::move(inference)) {}

const std::string& UsageLedger::Key(std::uint64_t job) {
  auto it = keys_.find(job);
  if (it == keys_.end()) it = keys_.emplace(job, key_of_(job)).first;
  return it->second;
}

void UsageLedger::Close(std::uint64_t job, double at) {
  auto it = held_.find(job);
  if (it == held_.end()) return;
  const double from = std::max(it->second.from, since_), to = std::min(at, until_);
  if (to > from) {
    UsageTotals& t = totals_[Key(job)];
    for (const auto& [node, n] : it->second.placement) {
      const double hours = n * (to - from) / 3600;
      (inference_.count(node) ? t.loaned_gpu_hours : t.training_gpu_hours) += hours;
    }
  }
  held_.erase(it);
}

void UsageLedger::Add(const EventRecord& e) {
  if (e.job == 0) return;
  const std::string& kind = e.kind;
  if (kind == "submit") {
    if (e.time >= since_ && e.time <= until_) ++totals_[Key(e.job)].jobs;
    return;
  }
  if (kind == "preempt" && e.time >= since_ && e.time <= until_) ++totals_[Key(e.job)].preemptions;
  if (kind == "start" || kind == "resize") {
    Close(e.job, e.time);
    auto data = nlohmann::json::parse(e.data, nullptr, false);
    Held h;
    h.from = e.time;
    if (data.is_object() && data.contains("placement") && data["placement"].is_object()) {
      for (const auto& [node, n] : data["placement"].items())
        if (n.is_number_integer() && n.get<int>() > 0) h.placement[node] = n.get<int>();
    }
    if (!h.placement.empty()) held_[e.job] = std::move(h);
    return;
  }
  if (kind == "preempt" || kind == "restart" || kind == "finished" || kind == "failed" || kind == "cancelled")
    Close(e.job, e.time);
}

std::map<std::string, UsageTotals> UsageLedger::Finish() {
  std::vector<std::uint64_t> open;
  for (const auto& [job, h] : held_) open.push_back(job);
  for (auto job : open) Close(job, until_);
  return totals_;
}

}  // namespace aryl::daemon
