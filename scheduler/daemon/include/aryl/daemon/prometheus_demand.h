// PrometheusDemandPoller: the inference demand read from a Prometheus server.
// Its own thread runs the query (GET /api/v1/query, cpp-httplib) every `step`
// seconds with a timeout of `step` s (at least 1, at most 10), so a slow or dead Prometheus never
// holds up the daemon loop. The latest good sample is kept for Latest(); a
// failed query (refused, timed out, an HTTP error, an answer that is not one
// finite number) is logged, with the first failure and every 60th after it as a
// warning, and counted in aryl_demand_query_errors_total. What the samples mean
// is decided elsewhere (demand_control.h).
//
// Thread safety: Latest() and the destructor may be called from any thread.
// The destructor stops the thread within one query timeout.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "aryl/clock.h"
#include "aryl/daemon/demand_control.h"
#include "aryl/daemon/metrics.h"
#include "aryl/result.h"

namespace aryl::daemon {

// One query, blocking at most `timeout_s`: the value (ParsePrometheusQueryResponse).
Result<double> QueryPrometheus(const PrometheusDemandSpec& spec, double timeout_s);

class PrometheusDemandPoller {
 public:
  // `metrics` (may be null) outlives the poller; `clock` gives the time stamps
  // of samples (the daemon's wall clock).
  PrometheusDemandPoller(PrometheusDemandSpec spec, double step_s, Metrics* metrics, const Clock* clock);
  ~PrometheusDemandPoller();
  PrometheusDemandPoller(const PrometheusDemandPoller&) = delete;
  PrometheusDemandPoller& operator=(const PrometheusDemandPoller&) = delete;

  std::optional<DemandSample> Latest() const;

 private:
  void Loop();

  const PrometheusDemandSpec spec_;
  const double step_s_;
  Metrics* metrics_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::optional<DemandSample> latest_;
  std::thread thread_;
};

}  // namespace aryl::daemon
