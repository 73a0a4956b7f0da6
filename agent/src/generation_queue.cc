#include "aryl/agent/generation_queue.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>

#include "aryl/transition_table.h"
namespace aryl::agent {

std::optional<GenerationQueue::State> GenerationQueue::Next(std::optional<State> from, Event event) {
  return TableNext(kTable, from, event);
}

std::string_view GenerationQueue::Name(State s) {
  switch (s) {
    case State::kForming: return "forming";
    case State::kAgreed: return "agreed";
    case State::kTraining: return "training";
    case State::kAbandoned: return "abandoned";
  }
  return "?";
}

std::string_view GenerationQueue::Name(Event e) {
  switch (e) {
    case Event::kPlan: return "plan";
    case Event::kSuperseded: return "superseded";
    case Event::kAllReady: return "all ready";
    case Event::kReported: return "reported";
    case Event::kMemberEnded: return "member ended";
    case Event::kExpired: return "expired";
    case Event::kJobEnded: return "job ended";
  }
  return "?";
}

void GenerationQueue::Apply(Generation& g, Event e) {
  auto to = Next(g.state, e);
  if (!to) {
    // Every caller checks the state first: reaching here is a bug in this file.
    std::fprintf(stderr, "GenerationQueue: no transition from %s on %s (job %lld generation %lld)\n",
                 std::string(Name(g.state)).c_str(), std::string(Name(e)).c_str(), (long long)g.job,
                 (long long)g.generation);
    std::abort();
  }
  log_.push_back({g.job, g.generation, g.state, e, *to, g.key});
  g.state = *to;
}

bool GenerationQueue::Plan(Generation g, double now) {
  auto [nit, fresh] = newest_.try_emplace(g.job, g.generation);
  if (!fresh && g.generation <= nit->second) return false;
  nit->second = g.generation;
  if (auto it = in_flight_.find(g.job); it != in_flight_.end()) {
    Apply(it->second, Event::kSuperseded);
    in_flight_.erase(it);
  }
  log_.push_back({g.job, g.generation, std::nullopt, Event::kPlan, State::kForming, g.key});
  g.state = State::kForming;
  g.deadline = now + timeouts_.forming;
  in_flight_[g.job] = std::move(g);
  return true;
}

std::optional<GenerationQueue::Generation> GenerationQueue::AllReady(std::int64_t job, std::int64_t generation,
                                                                   double now) {
  auto it = in_flight_.find(job);
  if (it == in_flight_.end() || it->second.generation != generation || it->second.state != State::kForming)
    return std::nullopt;
  Apply(it->second, Event::kAllReady);
  it->second.deadline = now + timeouts_.report;
  return it->second;
}

void GenerationQueue::Reported(std::int64_t job, std::int64_t generation) {
  auto it = in_flight_.find(job);
  if (it == in_flight_.end() || it->second.generation != generation) return;
  Apply(it->second, Event::kReported);
  in_flight_.erase(it);
}

void GenerationQueue::MemberEnded(std::int64_t job, std::int64_t worker) {
  auto it = in_flight_.find(job);
  if (it == in_flight_.end() || it->second.state != State::kForming) return;
  const auto& m = it->second.members;
  if (std::find(m.begin(), m.end(), worker) == m.end()) return;
  Apply(it->second, Event::kMemberEnded);
  in_flight_.erase(it);
}

void GenerationQueue::Expire(double now) {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (now > it->second.deadline) {
      Apply(it->second, Event::kExpired);
      it = in_flight_.erase(it);
    } else {
      ++it;
    }
  }
}

void GenerationQueue::JobEnded(std::int64_t job) {
  if (auto it = in_flight_.find(job); it != in_flight_.end()) {
    Apply(it->second, Event::kJobEnded);
    in_flight_.erase(it);
  }
  newest_.erase(job);
}

const GenerationQueue::Generation* GenerationQueue::Current(std::int64_t job) const {
  auto it = in_flight_.find(job);
  return it == in_flight_.end() ? nullptr : &it->second;
}

std::vector<GenerationQueue::Generation> GenerationQueue::InFlight() const {
  std::vector<Generation> out;
  out.reserve(in_flight_.size());
  for (const auto& [job, g] : in_flight_) out.push_back(g);
  return out;
}

}  // namespace aryl::agent
