// Inference demand: how many inference servers the inference side needs over time.
//
// Two sources, chosen by one flag value (`--inference-demand`, same formats in
// aryl-sim and the live daemon):
//   FILE   CSV with header `time_s,servers`: a step function; each row holds
//          from its time until the next row; before the first row the first
//          row's value holds. Rows need not be sorted; duplicate times are errors.
//   daily:peak=0.9,trough=0.3,peak_hour=14,weekend=0.6,noise=0.05,step=300
//          a generator, in fractions of the inference cluster: a cosine day
//          between trough (at peak_hour+12) and peak (at peak_hour), scaled by
//          `weekend` on days 5 and 6 (t=0 is a Monday 00:00), plus Gaussian noise
//          of standard deviation `noise`, clamped to [0,1], held constant for
//          `step` seconds. Deterministic in (parameters, seed); any key may be
//          omitted (defaults shown above).
// Demand is rounded to whole servers and clamped to [0, inference servers].
//
// Thread safety: a DemandCurve is immutable after construction; At() is const.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "aryl/result.h"

namespace aryl::sim {

struct DailyDemandParams {
  double peak = 0.9;
  double trough = 0.3;
  double peak_hour = 14;
  double weekend = 0.6;
  double noise = 0.05;
  double step = 300;
};

class DemandCurve {
 public:
  // A constant demand (also what "no demand" is: Constant(0)).
  static DemandCurve Constant(int servers);
  // A step function from (time, servers) points; sorted here.
  static Result<DemandCurve> FromPoints(std::vector<std::pair<double, int>> points, int inference_servers,
                                        std::string_view source = "demand");
  static DemandCurve Daily(const DailyDemandParams& params, int inference_servers, std::uint64_t seed);

  // Servers inference needs at time t.
  int At(double t) const;
  // The first time > t at which At() may change; +infinity when it never does.
  double NextChange(double t) const;
  // One line that describes the source (for the JSON config).
  std::string Describe() const { return description_; }

 private:
  enum class Kind { kConstant, kPoints, kDaily } kind_ = Kind::kConstant;
  int constant_ = 0;
  std::vector<std::pair<double, int>> points_;
  DailyDemandParams daily_;
  int servers_ = 0;
  std::uint64_t seed_ = 0;
  std::string description_;
};

// Parses "daily:k=v,..." or reads a CSV file. `inference_servers` scales and clamps.
Result<DemandCurve> ParseDemand(std::string_view spec, int inference_servers, std::uint64_t seed);
Result<DailyDemandParams> ParseDailyParams(std::string_view params);
// Parses CSV text `time_s,servers`; `source` names it in messages.
Result<DemandCurve> ParseDemandCsv(std::string_view text, std::string_view source, int inference_servers);

}  // namespace aryl::sim
