#include "speed_fitter.h"

#include <chrono>
#include <exception>
#include <string>
#include <utility>

namespace aryl::daemon {

SpeedFitter::SpeedFitter() : thread_([this] { Work(); }) {}

SpeedFitter::~SpeedFitter() { Stop(); }

bool SpeedFitter::Submit(sched::FitRequest request) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || !in_flight_.insert(request.job).second) return false;
    queue_.push_back({std::move(request), epoch_});
  }
  wake_.notify_one();
  return true;
}

bool SpeedFitter::InFlight(sched::JobId job) const {
  std::lock_guard lock(mu_);
  return in_flight_.count(job) > 0;
}

std::vector<SpeedFitter::Done> SpeedFitter::Poll() {
  std::lock_guard lock(mu_);
  std::vector<Done> out = std::move(done_);
  done_.clear();
  for (const Done& d : out) in_flight_.erase(d.job);
  return out;
}

void SpeedFitter::Discard() {
  std::lock_guard lock(mu_);
  ++epoch_;
  queue_.clear();
  done_.clear();
  in_flight_.clear();
}

void SpeedFitter::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SpeedFitter::Work() {
  std::unique_lock lock(mu_);
  while (true) {
    // Submit and Stop notify; the period only bounds a lost wake-up.
    wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    if (queue_.empty()) continue;
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Done d;
    d.job = q.request.job;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      d.result = sched::SpeedModels::RunFit(q.request);
    } catch (const std::exception& e) {  // the solver's, as a value
      d.result = Status::Internal(std::string("speed fit: ") + e.what());
    }
    d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    if (q.epoch == epoch_) done_.push_back(std::move(d));  // else the models it fitted are gone
  }
}

}  // namespace aryl::daemon
