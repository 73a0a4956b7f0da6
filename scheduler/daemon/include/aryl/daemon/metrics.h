// Metrics: a small Prometheus registry (counters, gauges, histograms) rendered
// in the text exposition format (version 0.0.4).
//
// A metric is declared once with its type and help text; samples are keyed by
// a label string such as `state="running"` (already formatted, may be empty).
// Thread safety: every method is thread-safe (one mutex); the daemon updates
// from its loop thread while the HTTP thread renders.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace aryl::daemon {

class Metrics {
 public:
  void DeclareCounter(const std::string& name, const std::string& help);
  void DeclareGauge(const std::string& name, const std::string& help);
  // `bounds` are the upper bounds of the buckets, increasing; +Inf is implicit.
  void DeclareHistogram(const std::string& name, const std::string& help, std::vector<double> bounds);

  void Inc(const std::string& name, const std::string& labels = {}, double by = 1);
  void Set(const std::string& name, const std::string& labels, double value);
  // Drops every sample of a gauge (before re-setting a labelled family).
  void ClearGauge(const std::string& name);
  void Observe(const std::string& name, double value);

  double Value(const std::string& name, const std::string& labels = {}) const;
  // Histogram summary for tests and logs: count, sum and max observed.
  struct HistogramStats { std::uint64_t count = 0; double sum = 0; double max = 0; };
  HistogramStats Histogram(const std::string& name) const;

  std::string Render() const;

 private:
  struct Family {
    std::string type;  // counter | gauge | histogram
    std::string help;
    std::map<std::string, double> samples;
    std::vector<double> bounds;
    std::vector<std::uint64_t> buckets;
    HistogramStats hist;
  };
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

}  // namespace aryl::daemon
