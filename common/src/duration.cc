#include "aryl/duration.h"

#include <cmath>
#include <cstdio>

namespace aryl {
namespace {

// `v` with at most `digits` decimals, trailing zeros (and a bare '.') dropped.
std::string Trimmed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

// "2 min 5 s", "2 min": `n` of the larger unit of `per` smaller ones.
std::string TwoUnits(long long n, long long per, const char* big, const char* small) {
  std::string s = std::to_string(n / per) + " " + big;
  if (n % per != 0) s += " " + std::to_string(n % per) + " " + small;
  return s;
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds)) return "unknown";
  if (seconds < 0) return "-" + FormatDuration(-seconds);
  if (std::round(seconds * 1000) < 1000) return Trimmed(std::round(seconds * 1000), 0) + " ms";
  if (std::round(seconds * 100) < 1000) return Trimmed(seconds, 2) + " s";
  if (std::round(seconds * 10) < 1200) return Trimmed(seconds, 1) + " s";
  if (std::llround(seconds) < 3600) return TwoUnits(std::llround(seconds), 60, "min", "s");
  if (std::llround(seconds / 60) < 24 * 60)
    return TwoUnits(std::llround(seconds / 60), 60, "h", "min");
  return TwoUnits(std::llround(seconds / 3600), 24, "d", "h");
}

}  // namespace aryl
