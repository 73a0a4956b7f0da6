#include "aryl/daemon/prometheus_demand.h"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "aryl/daemon/http_server.h"

namespace aryl::daemon {

Result<double> QueryPrometheus(const PrometheusDemandSpec& spec, double timeout_s) {
  ARYL_ASSIGN_OR_RETURN(auto got, HttpGet(spec.host, spec.port, PrometheusQueryPath(spec), timeout_s));
  if (got.first != 200) {
    // Prometheus answers a bad query with 400 and a JSON error that says why.
    auto why = ParsePrometheusQueryResponse(got.second);
    return Status::Unavailable("prometheus answered HTTP " + std::to_string(got.first) + ": " +
                               (why.ok() ? got.second.substr(0, 200) : why.status().message()));
  }
  return ParsePrometheusQueryResponse(got.second);
}

PrometheusDemandPoller::PrometheusDemandPoller(PrometheusDemandSpec spec, double step_s, Metrics* metrics,
                                               const Clock* clock)
    : spec_(std::move(spec)), step_s_(step_s), metrics_(metrics), clock_(clock) {
  thread_ = std::thread([this] { Loop(); });
}

PrometheusDemandPoller::~PrometheusDemandPoller() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<DemandSample> PrometheusDemandPoller::Latest() const {
  std::lock_guard lock(mu_);
  return latest_;
}

void PrometheusDemandPoller::Loop() {
  const double timeout = std::clamp(step_s_, 1.0, 10.0);
  std::uint64_t failures_in_a_row = 0;
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    auto next = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(step_s_));
    double t = clock_->NowSeconds();
    auto value = QueryPrometheus(spec_, timeout);
    if (metrics_) metrics_->Inc("aryl_demand_queries_total");
    if (value.ok()) {
      if (failures_in_a_row > 0) spdlog::info("inference demand: prometheus answers again ({} = {})", spec_.query, *value);
      failures_in_a_row = 0;
      if (metrics_) metrics_->Set("aryl_demand_load", "", *value);
    } else {
      if (metrics_) metrics_->Inc("aryl_demand_query_errors_total");
      if (failures_in_a_row++ % 60 == 0) spdlog::warn("inference demand: {}", value.status().ToString());
      else spdlog::debug("inference demand: {}", value.status().ToString());
    }
    lock.lock();
    if (value.ok()) latest_ = DemandSample{t, *value};
    cv_.wait_until(lock, next, [this] { return stop_; });
  }
}

}  // namespace aryl::daemon
