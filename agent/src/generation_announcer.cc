// A job's new generations, announced through the rendezvous store
// (generation_announcer.h).
#include "generation_announcer.h"

#include <spdlog/spdlog.h>

#include "aryl/protocol/generation.h"
#include "aryl/agent/store_relay.h"

namespace aryl::agent {

namespace p = aryl::protocol;

namespace {

std::vector<std::string> Ids(const std::vector<p::WorkerId>& ids) {
  std::vector<std::string> out;
  for (auto id : ids) out.push_back(std::to_string(id));
  return out;
}

}  // namespace

p::GenerationAnnounce AnnounceOf(p::JobId job, std::int64_t generation, const std::vector<p::WorkerId>& members,
                                 const std::string& endpoint, const std::string& key) {
  p::GenerationAnnounce a;
  a.job = job;
  a.generation = generation;
  a.members = members;
  a.store_endpoint = endpoint;
  a.store_prefix = key;
  return a;
}

void GenerationAnnouncer::Plan(const p::NewGeneration& m, double now) {
  // Every agent that hosts members or leavers announces to its own workers;
  // all of them map this scheduler generation to the same store generation.
  GenerationQueue::Generation g;
  g.job = m.job;
  g.endpoint = m.store_endpoint;
  g.key = m.store_prefix;
  g.generation = p::PlanGeneration(m.generation);
  g.members.assign(m.members.begin(), m.members.end());
  generations_.Plan(std::move(g), now);
  LogTransitions();
}

void GenerationAnnouncer::Reported(p::JobId job, std::int64_t generation) {
  generations_.Reported(job, generation);
  LogTransitions();
}

void GenerationAnnouncer::JobEnded(p::JobId job) {
  generations_.JobEnded(job);
  LogTransitions();
}

void GenerationAnnouncer::Pump(double now, const Announce& announce) {
  if (!probe_) return;
  generations_.Expire(now);
  for (const auto& g : generations_.InFlight()) {
    if (g.state == GenerationQueue::State::kForming) {
      std::string key = g.key + "/ready/" + std::to_string(g.generation);
      auto ready = probe_->Take(key);
      if (!ready || !ready->ok() || !**ready) {
        probe_->Ask(key, [endpoint = g.endpoint, job = g.key, ids = Ids(g.members)](StoreRelay& r) {
          return r.Ready(endpoint, job, ids);
        });
        continue;
      }
      auto agreed = generations_.AllReady(g.job, g.generation, now);
      if (!agreed) continue;
      announce(AnnounceOf(g.job, g.generation, g.members, g.endpoint, g.key));
      spdlog::info("job {}: announced generation {} ({} workers) to the workers here", g.job, g.generation,
                   g.members.size());
    } else if (g.state == GenerationQueue::State::kAgreed) {
      std::string key = g.key + "/report/" + std::to_string(g.generation);
      auto rep = probe_->Take(key);
      if (rep && rep->ok() && **rep) {
        generations_.Reported(g.job, g.generation);
        continue;
      }
      probe_->Ask(key, [endpoint = g.endpoint, job = g.key, gen = g.generation](StoreRelay& r) -> Result<bool> {
        ARYL_ASSIGN_OR_RETURN(auto v, r.Report(endpoint, job, gen));
        return v.has_value();
      });
    }
  }
  LogTransitions();
}

void GenerationAnnouncer::LogTransitions() {
  for (const auto& t : generations_.TakeTransitions()) {
    if (probe_ && (t.to == GenerationQueue::State::kAbandoned || t.to == GenerationQueue::State::kTraining)) {
      // Its store queries are no longer wanted (an answer not taken is dropped).
      probe_->Cancel(t.key + "/ready/" + std::to_string(t.generation));
      probe_->Cancel(t.key + "/report/" + std::to_string(t.generation));
    }
    if (t.to == GenerationQueue::State::kAbandoned) {
      spdlog::warn("job {}: generation {} abandoned ({}, was {})", t.job, t.generation,
                   GenerationQueue::Name(t.event), t.from ? GenerationQueue::Name(*t.from) : "new");
    } else {
      spdlog::debug("job {}: generation {} {} ({})", t.job, t.generation, GenerationQueue::Name(t.to),
                    GenerationQueue::Name(t.event));
    }
  }
}

}  // namespace aryl::agent
