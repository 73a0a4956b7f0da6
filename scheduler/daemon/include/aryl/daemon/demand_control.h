// Inference demand: from a measured load to offers and reclaims of inference
// servers. Pure and deterministic (no sockets, no threads, no wall clock: the
// caller passes the time), so tests drive it sample by sample; the HTTP polling
// of Prometheus lives in prometheus_demand.h.
//
// The mapping (docs/operations.md, "Inference demand"):
//  1. A sample is a load L in the query's unit (requests/s, say). With a
//     capacity C per inference server (--demand-per-server), the servers the
//     load needs are L / C (fractional).
//  2. Required for reclaims: up = ceil(L / C) + headroom (--demand-headroom).
//     When up exceeds the servers inference holds, the difference is reclaimed
//     at once (never more than are loaned and not already coming back).
//  3. Required for offers: down = ceil(L / (C * (1 - hysteresis))) + headroom,
//     with 0 <= hysteresis < 1 (--demand-hysteresis): inference keeps m servers
//     until the load fits in m with a fraction `hysteresis` of them to spare
//     (0.2: from 3 servers, back to 2 at 1.6 servers' load or less, while 2
//     become 3 above 2). Servers are offered only when down stays below the
//     held count for `hold` seconds (--demand-hold); then held - down are
//     offered. A load that wobbles inside that band, or dips for less than
//     `hold` seconds, changes nothing: servers do not flap. At zero load every
//     server beyond the headroom is offered.
//  4. Both are clamped to [0, inference servers]. No sample (the query failed,
//     returned nothing, or is older than `max_age` seconds) changes nothing.
// A replayed curve (FILE or daily:...) gives servers directly: C = 1, no
// headroom, hysteresis or hold.
//
// Thread safety: a DemandController is used by one thread (the daemon loop).
#pragma once

#include <optional>
#include <string>

#include "aryl/result.h"

namespace aryl::daemon {

struct DemandControlConfig {
  double per_server = 1;   // load one inference server carries (> 0)
  int headroom = 0;        // servers kept beyond the load (>= 0)
  double hysteresis = 0;   // fraction of the kept servers left to spare before an offer, in [0, 1)
  double hold = 0;         // seconds the lower target must last before an offer (>= 0)
  double max_age = 1e300;  // samples older than this (s) are ignored
};

// One measurement: the load, and when it was taken.
struct DemandSample {
  double time = 0;
  double load = 0;
};

// The inference pool as the daemon sees it when deciding.
struct InferencePool {
  int servers = 0;     // connected inference servers
  int held = 0;        // not loaned (serving inference, or being emptied by a reclaim)
  int offerable = 0;   // held servers that may be offered (their reclaim is complete)
};

struct DemandDecision {
  int reclaim = 0;       // servers to reclaim now
  int offer = 0;         // servers to offer now
  int required_up = -1;  // the targets of this decision; -1 without a usable sample
  int required_down = -1;
};

class DemandController {
 public:
  explicit DemandController(DemandControlConfig config) : config_(config) {}

  // The decision at `now` for the latest sample (nullopt: none yet).
  DemandDecision Decide(double now, const std::optional<DemandSample>& sample, const InferencePool& pool);

  const DemandControlConfig& config() const { return config_; }

 private:
  DemandControlConfig config_;
  std::optional<double> low_since_;  // since when `down` has been below `held`
};

// --inference-demand prometheus:URL?query=PROMQL, parsed. URL is
// http://HOST[:PORT][/PREFIX]; PROMQL is everything after "query=", taken
// literally (it is percent-encoded when sent).
struct PrometheusDemandSpec {
  std::string host;
  int port = 80;
  std::string path_prefix;  // "" or "/prefix" (a Prometheus behind a reverse proxy)
  std::string query;
};
bool IsPrometheusDemand(const std::string& text);  // starts with "prometheus:"
Result<PrometheusDemandSpec> ParsePrometheusDemandSpec(const std::string& text);

// The value of an /api/v1/query answer: a scalar, or the sum of an instant
// vector's samples. An error status, an empty vector, a matrix or string, or a
// value that is not a finite number is an error naming what came back.
Result<double> ParsePrometheusQueryResponse(const std::string& body);

// The query string of `spec`'s request: "/PREFIX/api/v1/query?query=<encoded>".
std::string PrometheusQueryPath(const PrometheusDemandSpec& spec);

}  // namespace aryl::daemon
