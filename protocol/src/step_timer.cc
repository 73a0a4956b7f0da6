#include "aryl/protocol/step_timer.h"

#include <algorithm>
#include <cmath>

namespace aryl::protocol {

double Median(std::vector<double>& v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  double hi = *mid;
  if (v.size() % 2 == 1) return hi;
  double lo = *std::max_element(v.begin(), mid);
  return (lo + hi) / 2;
}

bool StepTimer::Restart(std::int64_t generation, int world) {
  if (generation == gen_ && world == world_) return false;
  // A new generation: what was measured at the old size is summarised by
  // nobody (too few steps) or was already taken; start over, warming up.
  gen_ = generation;
  world_ = world;
  warm_left_ = opt_.warmup_steps;
  times_.clear();
  syncs_.clear();
  span_ = 0;
  last_ = -1;
  return true;
}

void StepTimer::Step(double now, std::int64_t generation, int world, double sync_s) {
  Restart(generation, world);
  double prev = last_;
  last_ = now;
  if (prev < 0) return;  // the generation's first boundary, or interrupted
  Add(now - prev, sync_s);
}

void StepTimer::StepTime(double seconds, std::int64_t generation, int world) {
  Restart(generation, world);
  Add(seconds, -1);
}

void StepTimer::Add(double dt, double sync_s) {
  if (warm_left_ > 0) {
    --warm_left_;
    return;
  }
  if (!(dt > 0) || !std::isfinite(dt)) return;
  times_.push_back(dt);
  if (sync_s >= 0) syncs_.push_back(sync_s);
  span_ += dt;
  if (static_cast<int>(times_.size()) > opt_.max_steps) {
    span_ -= times_.front();
    times_.erase(times_.begin());
    if (!syncs_.empty()) syncs_.erase(syncs_.begin());
  }
}

std::optional<StepStats> StepTimer::TakeSummary() {
  if (static_cast<int>(times_.size()) < opt_.min_steps || span_ < opt_.min_seconds) return std::nullopt;
  StepStats s;
  s.seq = ++seq_;
  s.generation = gen_;
  s.workers = world_;
  s.count = static_cast<std::int64_t>(times_.size());
  s.median_s = Median(times_);
  std::vector<double> dev;
  dev.reserve(times_.size());
  for (double t : times_) dev.push_back(std::fabs(t - s.median_s));
  s.spread_s = 1.4826 * Median(dev);
  s.sync_median_s = syncs_.size() == times_.size() ? Median(syncs_) : 0;
  s.local_batch = local_batch_;
  times_.clear();
  syncs_.clear();
  span_ = 0;
  return s;
}

}  // namespace aryl::protocol
