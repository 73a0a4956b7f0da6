// SpeedFitter: the daemon's one fitting thread. The serving thread records
// samples and decides when a fit is due (SpeedModels::RecordSample); the fit
// itself (SpeedModels::RunFit, up to a millisecond) runs here, so requests
// and rounds never wait for one (speed.cc has the whole path).
//
// Protocol, all calls but the worker's own on the serving thread:
//  1. Submit(request): queued, unless a fit of that job is queued or running
//     (false: the caller re-checks with SpeedModels::DueFit once it is done).
//  2. The worker runs the queue's fits in order, one at a time.
//  3. Poll(): the finished fits, oldest first; each job's leaves the
//     in-flight set, so it may be submitted again.
//  4. Discard(): the models were rebuilt (a restart's replay, a reload after
//     a failed write): queued fits are dropped, and the one running is
//     dropped when it finishes (an epoch tells them apart).
//  5. Stop(): close (no more fits start), then join; the destructor stops.
//     A fit is bounded (the solver's iteration limit), so is the join.
//
// Thread safety: every public member is safe to call from any thread; the
// queue and the results are under one mutex, the fit runs outside it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/speed_models.h"

namespace aryl::daemon {

class SpeedFitter {
 public:
  struct Done {
    sched::JobId job = 0;
    Result<sched::FitResult> result = Status::Internal("not run");
    double seconds = 0;  // the fit's wall time on the worker
  };

  SpeedFitter();
  ~SpeedFitter();
  SpeedFitter(const SpeedFitter&) = delete;
  SpeedFitter& operator=(const SpeedFitter&) = delete;

  // false (nothing queued) when a fit of the job is in flight or after Stop.
  bool Submit(sched::FitRequest request);
  bool InFlight(sched::JobId job) const;
  std::vector<Done> Poll();
  void Discard();
  void Stop();

 private:
  struct Queued {
    sched::FitRequest request;
    std::uint64_t epoch = 0;
  };
  void Work();

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Queued> queue_;
  std::vector<Done> done_;
  std::set<sched::JobId> in_flight_;
  std::uint64_t epoch_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace aryl::daemon
