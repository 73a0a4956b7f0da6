#include "aryl/sim/demand.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "aryl/sim/random.h"
#include "csv_util.h"

namespace aryl::sim {
namespace {
constexpr double kDay = 86400.0;
constexpr double kPi = 3.14159265358979323846;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string FormatDouble(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

DemandCurve DemandCurve::Constant(int servers) {
  DemandCurve c;
  c.kind_ = Kind::kConstant;
  c.constant_ = std::max(0, servers);
  c.description_ = "constant:" + std::to_string(c.constant_) + " servers";
  return c;
}

Result<DemandCurve> DemandCurve::FromPoints(std::vector<std::pair<double, int>> points, int inference_servers,
                                            std::string_view source) {
  if (points.empty()) return Status::InvalidArgument(std::string(source) + ": no demand rows");
  std::stable_sort(points.begin(), points.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (points[i].first == points[i - 1].first)
      return Status::InvalidArgument(std::string(source) + ": time_s " + FormatDouble(points[i].first) +
                                     " given twice");
  }
  DemandCurve c;
  c.kind_ = Kind::kPoints;
  c.servers_ = inference_servers;
  for (auto& p : points) p.second = std::clamp(p.second, 0, inference_servers);
  c.points_ = std::move(points);
  c.description_ = "file:" + std::string(source);
  return c;
}

DemandCurve DemandCurve::Daily(const DailyDemandParams& params, int inference_servers, std::uint64_t seed) {
  DemandCurve c;
  c.kind_ = Kind::kDaily;
  c.daily_ = params;
  c.servers_ = inference_servers;
  c.seed_ = seed;
  c.description_ = "daily:peak=" + FormatDouble(params.peak) + ",trough=" + FormatDouble(params.trough) +
                   ",peak_hour=" + FormatDouble(params.peak_hour) + ",weekend=" + FormatDouble(params.weekend) +
                   ",noise=" + FormatDouble(params.noise) + ",step=" + FormatDouble(params.step);
  return c;
}

int DemandCurve::At(double t) const {
  switch (kind_) {
    case Kind::kConstant:
      return constant_;
    case Kind::kPoints: {
      auto it = std::upper_bound(points_.begin(), points_.end(), t,
                                 [](double v, const auto& p) { return v < p.first; });
      if (it == points_.begin()) return points_.front().second;
      return std::prev(it)->second;
    }
    case Kind::kDaily: {
      const DailyDemandParams& p = daily_;
      double slot = std::floor(t / p.step);
      double ts = slot * p.step;  // the value holds for the whole step
      double hour = std::fmod(ts, kDay) / 3600.0;
      if (hour < 0) hour += 24;
      double frac = p.trough + (p.peak - p.trough) * 0.5 * (1.0 + std::cos(2.0 * kPi * (hour - p.peak_hour) / 24.0));
      long long day = static_cast<long long>(std::floor(ts / kDay));
      long long weekday = ((day % 7) + 7) % 7;
      if (weekday >= 5) frac *= p.weekend;
      if (p.noise > 0) {
        Rng rng(Mix64(seed_ ^ Mix64(static_cast<std::uint64_t>(static_cast<long long>(slot)))));
        frac += p.noise * rng.Normal();
      }
      frac = std::clamp(frac, 0.0, 1.0);
      return std::clamp(static_cast<int>(std::lround(frac * servers_)), 0, servers_);
    }
  }
  return 0;
}

double DemandCurve::NextChange(double t) const {
  switch (kind_) {
    case Kind::kConstant:
      return kInf;
    case Kind::kPoints: {
      auto it = std::upper_bound(points_.begin(), points_.end(), t,
                                 [](double v, const auto& p) { return v < p.first; });
      return it == points_.end() ? kInf : it->first;
    }
    case Kind::kDaily:
      return (std::floor(t / daily_.step) + 1.0) * daily_.step;
  }
  return kInf;
}

Result<DailyDemandParams> ParseDailyParams(std::string_view text) {
  DailyDemandParams p;
  if (internal::Trim(text).empty()) return p;
  for (std::string_view kv : internal::Split(text, ',')) {
    auto eq = kv.find('=');
    if (eq == std::string_view::npos)
      return Status::InvalidArgument("--inference-demand: expected key=value, got '" + std::string(kv) + "'");
    std::string key(internal::Trim(kv.substr(0, eq)));
    std::string_view value = internal::Trim(kv.substr(eq + 1));
    auto v = internal::ParseDouble(value);
    if (!v) return Status::InvalidArgument("--inference-demand: " + key + ": not a number: '" + std::string(value) + "'");
    auto fraction = [&](double* dst) -> Status {
      if (*v < 0 || *v > 1) return Status::OutOfRange("--inference-demand: " + key + " must be in [0,1], got " + FormatDouble(*v));
      *dst = *v;
      return Status::Ok();
    };
    if (key == "peak") {
      ARYL_RETURN_IF_ERROR(fraction(&p.peak));
    } else if (key == "trough") {
      ARYL_RETURN_IF_ERROR(fraction(&p.trough));
    } else if (key == "weekend") {
      ARYL_RETURN_IF_ERROR(fraction(&p.weekend));
    } else if (key == "noise") {
      ARYL_RETURN_IF_ERROR(fraction(&p.noise));
    } else if (key == "peak_hour") {
      if (*v < 0 || *v >= 24) return Status::OutOfRange("--inference-demand: peak_hour must be in [0,24), got " + FormatDouble(*v));
      p.peak_hour = *v;
    } else if (key == "step") {
      if (*v < 1) return Status::OutOfRange("--inference-demand: step must be >= 1 s, got " + FormatDouble(*v));
      p.step = *v;
    } else {
      return Status::InvalidArgument("--inference-demand: unknown key '" + key +
                                     "' (known: peak, trough, peak_hour, weekend, noise, step)");
    }
  }
  if (p.trough > p.peak)
    return Status::InvalidArgument("--inference-demand: trough " + FormatDouble(p.trough) + " > peak " + FormatDouble(p.peak));
  return p;
}

Result<DemandCurve> ParseDemandCsv(std::string_view text, std::string_view source, int inference_servers) {
  std::vector<std::pair<double, int>> points;
  Status error;
  bool header_seen = false;
  internal::ForEachLine(text, [&](int line_no, std::string_view line) {
    std::string where = std::string(source) + ":" + std::to_string(line_no);
    std::string_view t = internal::Trim(line);
    if (t.empty() || t.front() == '#') return true;
    auto split = internal::SplitCsv(t);
    if (!split.ok()) {
      error = Status::InvalidArgument(where + ": " + split.status().message());
      return false;
    }
    const std::vector<std::string>& fields = *split;
    if (!header_seen) {
      header_seen = true;
      if (fields.size() == 2 && fields[0] == "time_s" && fields[1] == "servers") return true;
      error = Status::InvalidArgument(where + ": header: expected 'time_s,servers'");
      return false;
    }
    if (fields.size() != 2) {
      error = Status::InvalidArgument(where + ": expected 2 columns, got " + std::to_string(fields.size()));
      return false;
    }
    auto time = internal::ParseDouble(fields[0]);
    if (!time || *time < 0) {
      error = Status::InvalidArgument(where + ": time_s: not a non-negative number: '" + std::string(fields[0]) + "'");
      return false;
    }
    auto servers = internal::ParseInt(fields[1]);
    if (!servers || *servers < 0) {
      error = Status::InvalidArgument(where + ": servers: not a non-negative integer: '" + std::string(fields[1]) + "'");
      return false;
    }
    if (*servers > inference_servers) {
      error = Status::OutOfRange(where + ": servers: " + std::to_string(*servers) + " > " +
                                 std::to_string(inference_servers) + " inference servers");
      return false;
    }
    points.emplace_back(*time, static_cast<int>(*servers));
    return true;
  });
  if (!error.ok()) return error;
  return DemandCurve::FromPoints(std::move(points), inference_servers, source);
}

Result<DemandCurve> ParseDemand(std::string_view spec, int inference_servers, std::uint64_t seed) {
  spec = internal::Trim(spec);
  if (spec.empty() || spec == "none") return DemandCurve::Constant(0);
  if (spec.rfind("daily", 0) == 0 && (spec.size() == 5 || spec[5] == ':')) {
    ARYL_ASSIGN_OR_RETURN(DailyDemandParams p, ParseDailyParams(spec.size() > 5 ? spec.substr(6) : ""));
    return DemandCurve::Daily(p, inference_servers, seed);
  }
  if (spec.rfind("constant:", 0) == 0) {
    auto v = internal::ParseDouble(spec.substr(9));
    if (!v || *v < 0 || *v > 1)
      return Status::InvalidArgument("--inference-demand: constant:F needs a fraction in [0,1], got '" + std::string(spec) + "'");
    return DemandCurve::Constant(static_cast<int>(std::lround(*v * inference_servers)));
  }
  std::string path(spec);
  ARYL_ASSIGN_OR_RETURN(std::string text, internal::ReadFileToString(path));
  return ParseDemandCsv(text, path, inference_servers);
}

}  // namespace aryl::sim
