// tiresias: discretized two-dimensional least-attained-service (2D-LAS, Gu et
// al., NSDI'19), by the rules of its authors' simulator (SymbioticLab/Tiresias,
// run_sim.py, schedule `dlas-gpu-2`). Non-elastic (every job at its requested
// size) and preemptive, on the training cluster only. docs/scheduler.md cites
// the source of every rule.
//   1. Attained service is GPUs x time run (GPU-seconds) since the job last
//      entered queue 0. SchedulerConfig::tiresias_thresholds (3,250 and 7,200 by
//      default) split jobs into priority queues: queue 0 below the first, and so
//      on. A new job enters the back of queue 0; a job whose service reaches its
//      queue's threshold moves to the back of the next queue (demotion).
//   2. Each queue is an ordered list. A round walks the queues in order and each
//      queue front to back: a job runs when the GPUs not yet taken by earlier
//      jobs hold its size (a running job keeps its GPUs), otherwise it waits (a
//      running job is preempted). Later, smaller jobs still run (no blocking).
//      After the walk every waiting job moves behind the running ones of its
//      queue, keeping their relative order: running jobs keep their place ahead
//      of waiting ones, and a waiting job never preempts an equal-priority
//      running one.
//   3. Preemption suspends: the job checkpoints as it stops and loses no work
//      (Action::suspend); its next start pays SchedulerConfig::resume_pause.
//   4. Starvation: a job in queue > 0 that has run since it entered queue 0 and
//      has since waited at least tiresias_starve_factor times that running time
//      moves to the back of queue 0, and its service and waiting count afresh.
//   5. Demotions and promotions happen at the exact time they are due:
//      next_wakeup() is the earliest one, and drivers send a Tick then.
// The policy remembers each active job's queue, place and counters (derived
// from the events; replaying them rebuilds it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <limits>
#include <memory>
#include <tuple>
#include <unordered_map>

#include "../src/round.h"
#include "aryl/sched/state.h"
#include "policies.h"

namespace aryl::sched::policy {
namespace {

class TiresiasPolicy : public Policy {
 public:
  TiresiasPolicy(const SchedulerConfig& c, ReclaimStrategy r) : config_(c), reclaim_(r) {}
  const std::string& name() const override { return name_; }
  bool uses_loaned_servers() const override { return false; }
  ReclaimStrategy reclaim_strategy() const override { return reclaim_; }
  bool elastic() const override { return false; }
  Seconds next_wakeup() const override { return next_wakeup_; }
  // Queue by queue, each front to back (rule 2); jobs it has not seen yet
  // join the back of queue 0 in submission order (Track).
  std::vector<JobId> QueueOrder(const ClusterState& state) const override {
    std::vector<std::tuple<int, bool, std::uint64_t, Seconds, JobId>> places;
    places.reserve(state.queued().size());
    for (JobId id : state.queued()) {
      auto it = recs_.find(id);
      const bool seen = it != recs_.end();
      places.emplace_back(seen ? it->second.queue : 0, !seen, seen ? it->second.seq : 0,
                          state.job(id)->spec.submit_time, id);
    }
    std::sort(places.begin(), places.end());
    std::vector<JobId> order;
    order.reserve(places.size());
    for (const auto& p : places) order.push_back(std::get<4>(p));
    return order;
  }

  // "next_seq next_wakeup" then one line per job: id queue seq run_base
  // service_base waited last_check (doubles in hex, so they round-trip).
  std::string SaveState() const override {
    std::vector<JobId> ids;
    for (const auto& [id, r] : recs_) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    std::string out = std::to_string(next_seq_) + " " + Hex(next_wakeup_) + "\n";
    for (JobId id : ids) {
      const Rec& r = recs_.at(id);
      out += std::to_string(id) + " " + std::to_string(r.queue) + " " + std::to_string(r.seq) + " " +
             Hex(r.run_base) + " " + Hex(r.service_base) + " " + Hex(r.waited) + " " + Hex(r.last_check) + "\n";
    }
    return out;
  }
  Status LoadState(const std::string& text) override {
    std::istringstream in(text);
    std::string wake;
    std::unordered_map<JobId, Rec> recs;
    std::uint64_t next_seq = 0;
    if (!(in >> next_seq >> wake)) return Status::Corruption("tiresias state: no header in '" + text.substr(0, 80) + "'");
    Seconds next_wakeup = std::strtod(wake.c_str(), nullptr);
    JobId id = 0;
    Rec r;
    std::string a, b, c, d;
    while (in >> id >> r.queue >> r.seq >> a >> b >> c >> d) {
      r.run_base = std::strtod(a.c_str(), nullptr);
      r.service_base = std::strtod(b.c_str(), nullptr);
      r.waited = std::strtod(c.c_str(), nullptr);
      r.last_check = std::strtod(d.c_str(), nullptr);
      if (r.queue < 0 || r.queue > static_cast<int>(config_.tiresias_thresholds.size()) || !recs.emplace(id, r).second)
        return Status::Corruption("tiresias state: job " + std::to_string(id) + ": queue " + std::to_string(r.queue) +
                                  " out of range or the job twice");
    }
    if (!in.eof()) return Status::Corruption("tiresias state: a bad line after job " + std::to_string(id));
    recs_ = std::move(recs);
    next_seq_ = next_seq;
    next_wakeup_ = next_wakeup;
    return Status::Ok();
  }

  std::vector<Action> Schedule(const ClusterState& state) override {
    const Seconds now = state.now();
    Track(state);
    // Queue changes due now (rules 1 and 4), in queue order so that jobs that
    // move together keep their relative order.
    const int last_queue = static_cast<int>(config_.tiresias_thresholds.size());
    std::vector<std::tuple<int, std::uint64_t, JobId>> order;
    order.reserve(recs_.size());
    for (const auto& [id, r] : recs_) order.emplace_back(r.queue, r.seq, id);
    std::sort(order.begin(), order.end());
    for (auto& [queue, seq, id] : order) {
      const JobInfo& j = *state.job(id);
      Rec& r = recs_[id];
      const double executed = j.stats.run_time - r.run_base;
      if (j.status == JobStatus::kRunning) {
        const double service = j.stats.gpu_seconds - r.service_base;
        while (r.queue < last_queue && service >= Threshold(r.queue) - kEps) {
          ++r.queue;
          r.seq = next_seq_++;
        }
      } else {
        if (executed > 0) r.waited += now - std::max(r.last_check, j.queued_since);
        if (config_.tiresias_starve_factor > 0 && r.queue > 0 && executed > 0 &&
            r.waited >= executed * config_.tiresias_starve_factor - kEps) {
          r.queue = 0;
          r.seq = next_seq_++;
          r.run_base = j.stats.run_time;
          r.service_base = j.stats.gpu_seconds;
          r.waited = 0;
        }
      }
      r.last_check = now;
      queue = r.queue;
      seq = r.seq;
    }
    // Rule 2: the walk, by GPU counts per type.
    std::sort(order.begin(), order.end());
    const auto& servers = state.servers();
    std::vector<int> free(state.num_types(), 0);
    std::vector<bool> enabled(servers.size());
    std::vector<int> avail(servers.size());
    for (size_t i = 0; i < servers.size(); ++i) {
      enabled[i] = internal::Usable(servers[i], false);
      avail[i] = enabled[i] ? servers[i].spec.gpus : 0;
      free[servers[i].type] += avail[i];
    }
    std::vector<Action> actions;
    std::vector<std::pair<const JobInfo*, int>> starts;  // job, GPU type
    for (const auto& [queue, seq, id] : order) {
      const JobInfo& j = *state.job(id);
      Rec& r = recs_[id];
      if (j.status == JobStatus::kRunning) {
        std::vector<std::pair<int, int>> need;  // type, workers
        for (const auto& [sid, n] : j.placement) {
          const int t = servers[state.server_index(sid)].type;
          auto it = std::find_if(need.begin(), need.end(), [&](auto& e) { return e.first == t; });
          if (it == need.end()) need.emplace_back(t, n); else it->second += n;
        }
        bool fits = true;
        for (const auto& [t, n] : need) fits = fits && free[t] >= n;
        if (fits) {
          for (const auto& [t, n] : need) free[t] -= n;
          for (const auto& [sid, n] : j.placement) avail[state.server_index(sid)] -= n;
          continue;
        }
        Action a;
        a.type = ActionType::kPreempt;
        a.job = id;
        a.suspend = true;
        a.reason = "tiresias: suspend (2D-LAS queue " + std::to_string(queue) + ")";
        actions.push_back(std::move(a));
        r.seq = next_seq_++;  // waits now: behind the running jobs of its queue
        continue;
      }
      const int w = j.requested_workers;
      int best = -1;
      for (int t = 0; t < state.num_types(); ++t) {
        if (j.Allowed(t, w) && free[t] >= w && (best < 0 || j.Thr(t, w) > j.Thr(best, w))) best = t;
      }
      if (best < 0) {
        r.seq = next_seq_++;
        continue;
      }
      free[best] -= w;
      starts.emplace_back(&j, best);
    }
    // Placement of the starts on the GPUs the running jobs leave (best fit; it
    // always succeeds, the counts above reserved the GPUs).
    internal::FreeIndex index(state, avail, enabled);
    for (const auto& [j, t] : starts) {
      Placement p = index.Find(t, true, false, j->requested_workers, false);
      if (p.empty()) continue;
      for (const auto& [sid, n] : p) index.Take(state.server_index(sid), n);
      Action a;
      a.type = ActionType::kStart;
      a.job = j->spec.id;
      a.placement = std::move(p);
      a.reason = "tiresias: " + std::string(j->stats.preemptions > 0 ? "resume" : "admit") +
                 " (2D-LAS queue " + std::to_string(recs_[j->spec.id].queue) + ")";
      actions.push_back(std::move(a));
    }
    next_wakeup_ = NextChange(state, actions);
    return actions;
  }

 private:
  static constexpr double kEps = 1e-6;
  struct Rec {
    int queue = 0;
    std::uint64_t seq = 0;      // place within its queue (smaller = ahead)
    double run_base = 0;        // JobStats::run_time when it last entered queue 0
    double service_base = 0;    // JobStats::gpu_seconds then
    double waited = 0;          // time waited since then, after it first ran
    Seconds last_check = 0;
  };

  static std::string Hex(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", v);
    return buf;
  }

  double Threshold(int queue) const { return config_.tiresias_thresholds[queue]; }

  // Adds newly seen jobs to the back of queue 0 (in submission order) and drops
  // finished ones.
  void Track(const ClusterState& state) {
    for (auto it = recs_.begin(); it != recs_.end();) {
      const JobInfo* j = state.job(it->first);
      const bool active = j && (j->status == JobStatus::kRunning || j->status == JobStatus::kQueued);
      it = active ? std::next(it) : recs_.erase(it);
    }
    std::vector<const JobInfo*> fresh;
    for (JobId id : state.queued()) {
      if (!recs_.count(id)) fresh.push_back(state.job(id));
    }
    for (JobId id : state.running()) {
      if (!recs_.count(id)) fresh.push_back(state.job(id));
    }
    std::sort(fresh.begin(), fresh.end(), [](const JobInfo* a, const JobInfo* b) {
      return std::tie(a->spec.submit_time, a->spec.id) < std::tie(b->spec.submit_time, b->spec.id);
    });
    for (const JobInfo* j : fresh) {
      Rec r;
      r.seq = next_seq_++;
      r.run_base = j->stats.run_time;
      r.service_base = j->stats.gpu_seconds;
      r.last_check = state.now();
      recs_.emplace(j->spec.id, r);
    }
  }

  // The earliest demotion of a job that keeps running or starvation promotion
  // of one that waits, after this round's actions.
  Seconds NextChange(const ClusterState& state, const std::vector<Action>& actions) const {
    std::unordered_map<JobId, bool> runs;  // job -> runs after the round
    for (const Action& a : actions) runs[a.job] = a.type == ActionType::kStart;
    const int last_queue = static_cast<int>(config_.tiresias_thresholds.size());
    Seconds next = std::numeric_limits<double>::infinity();
    for (const auto& [id, r] : recs_) {
      const JobInfo& j = *state.job(id);
      auto it = runs.find(id);
      const bool running = it != runs.end() ? it->second : j.status == JobStatus::kRunning;
      const double executed = j.stats.run_time - r.run_base;
      if (running && r.queue < last_queue) {
        const int w = it != runs.end() ? j.requested_workers : j.workers;
        const double service = j.stats.gpu_seconds - r.service_base;
        if (w > 0) next = std::min(next, state.now() + std::max(0.0, Threshold(r.queue) - service) / w);
      } else if (!running && config_.tiresias_starve_factor > 0 && r.queue > 0 && executed > 0) {
        next = std::min(next, state.now() + std::max(0.0, executed * config_.tiresias_starve_factor -
                                                              r.waited));
      }
    }
    return next;
  }

  std::string name_ = "tiresias";
  std::unordered_map<JobId, Rec> recs_;  // active jobs
  std::uint64_t next_seq_ = 0;
  Seconds next_wakeup_ = std::numeric_limits<double>::infinity();
  SchedulerConfig config_;
  ReclaimStrategy reclaim_;
};

}  // namespace

std::unique_ptr<Policy> MakeTiresias(const SchedulerConfig& c, ReclaimStrategy r) {
  return std::make_unique<TiresiasPolicy>(c, r);
}

}  // namespace aryl::sched::policy
