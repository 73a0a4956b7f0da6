#include "aryl/sim/metrics.h"

#include <algorithm>
#include <cmath>

namespace aryl::sim {

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  if (sorted.size() == 1) return sorted.front();
  double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  auto lo = static_cast<std::size_t>(std::floor(rank));
  std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

std::vector<double> SummarizeJobs(const std::vector<JobOutcome>& jobs, RunMetrics& m) {
  std::vector<double> jct;
  std::vector<double> queue;
  std::vector<double> wait;
  jct.reserve(jobs.size());
  queue.reserve(jobs.size());
  wait.reserve(jobs.size());
  for (const JobOutcome& j : jobs) {
    if (j.first_start >= 0) queue.push_back(j.first_start - j.submit);
    if (j.finish >= 0) {
      jct.push_back(j.finish - j.submit);
      wait.push_back(std::max(0.0, j.waiting()));
    }
  }
  std::sort(jct.begin(), jct.end());
  std::sort(queue.begin(), queue.end());
  std::sort(wait.begin(), wait.end());
  auto mean = [](const std::vector<double>& v) {
    if (v.empty()) return 0.0;
    long double s = 0;  // sum in a fixed order: deterministic
    for (double x : v) s += x;
    return static_cast<double>(s / static_cast<long double>(v.size()));
  };
  m.jobs_submitted = static_cast<std::int64_t>(jobs.size());
  m.jobs_completed = static_cast<std::int64_t>(jct.size());
  m.avg_jct_s = mean(jct);
  m.p50_jct_s = Percentile(jct, 50);
  m.p95_jct_s = Percentile(jct, 95);
  m.p99_jct_s = Percentile(jct, 99);
  m.avg_wait_s = mean(wait);
  m.p50_wait_s = Percentile(wait, 50);
  m.p95_wait_s = Percentile(wait, 95);
  m.p99_wait_s = Percentile(wait, 99);
  m.avg_queue_s = mean(queue);
  m.p50_queue_s = Percentile(queue, 50);
  m.p95_queue_s = Percentile(queue, 95);
  m.p99_queue_s = Percentile(queue, 99);
  return jct;
}

}  // namespace aryl::sim
