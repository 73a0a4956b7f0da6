#include "step_timer.h"

#include <algorithm>
#include <cmath>

namespace aryl {

double Median(std::vector<double>& v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  double hi = *mid;
  if (v.size() % 2 == 1) return hi;
  double lo = *std::max_element(v.begin(), mid);
  return (lo + hi) / 2;
}

void StepTimer::Step(double now, int64_t generation, int world, double sync_s) {
  if (generation != gen_ || world != world_) {
    // A new generation: what was measured at the old size is summarised by
    // nobody (too few steps) or was already taken; start over, warming up.
    gen_ = generation;
    world_ = world;
    warm_left_ = opt_.warmup_steps;
    times_.clear();
    syncs_.clear();
    span_ = 0;
    last_ = now;
    return;
  }
  double prev = last_;
  last_ = now;
  if (prev < 0) return;  // interrupted
  if (warm_left_ > 0) {
    --warm_left_;
    return;
  }
  double dt = now - prev;
  if (!(dt > 0)) return;
  times_.push_back(dt);
  if (sync_s >= 0) syncs_.push_back(sync_s);
  span_ += dt;
  if (static_cast<int>(times_.size()) > opt_.max_steps) {
    span_ -= times_.front();
    times_.erase(times_.begin());
    if (!syncs_.empty()) syncs_.erase(syncs_.begin());
  }
}

std::optional<protocol::StepStats> StepTimer::TakeSummary() {
  if (static_cast<int>(times_.size()) < opt_.min_steps || span_ < opt_.min_seconds) return std::nullopt;
  protocol::StepStats s;
  s.seq = ++seq_;
  s.generation = gen_;
  s.workers = world_;
  s.count = static_cast<int64_t>(times_.size());
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

}  // namespace aryl
