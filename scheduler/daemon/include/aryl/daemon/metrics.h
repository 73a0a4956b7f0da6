// Metrics: the daemon's Prometheus registry, on prometheus-cpp (Debian
// prometheus-cpp-dev), rendered in the text exposition format 0.0.4.
//
// A metric is declared once with its type and help text; samples are keyed by
// labels, either as a map (exact) or as the string `a="x",b="y"` (parsed; a
// value may hold escaped \" \\ \n, and an unescaped `"` that is not followed by
// `,name=` or the end is taken as part of the value). Label values are escaped
// by the library when rendered, so any text is safe in a label.
//
// From the start the output holds aryl_build_info{version,commit,torch,cuda,
// nccl} 1, every declared counter's zero series (unlabelled unless other label
// sets are named at declaration), the gauges' declared zero series, and every
// histogram with zero counts.
//
// Thread safety: every method is thread-safe (one mutex); the daemon updates
// from its loop thread while the HTTP thread renders.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace prometheus {
class Counter;
class Gauge;
class Registry;
}

namespace aryl::daemon {

class Metrics {
 public:
  using Labels = std::map<std::string, std::string>;

  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // `zero_series`: label strings whose series exist at 0 from the start (by
  // default the unlabelled one; pass {} for a family that is always labelled).
  void DeclareCounter(const std::string& name, const std::string& help,
                      const std::vector<std::string>& zero_series = {""});
  void DeclareGauge(const std::string& name, const std::string& help,
                    const std::vector<std::string>& zero_series = {""});
  // `bounds` are the upper bounds of the buckets, increasing; +Inf is implicit.
  void DeclareHistogram(const std::string& name, const std::string& help, std::vector<double> bounds);

  void Inc(const std::string& name, const std::string& labels = {}, double by = 1);
  void Inc(const std::string& name, const Labels& labels, double by = 1);
  void Set(const std::string& name, const std::string& labels, double value);
  void Set(const std::string& name, const Labels& labels, double value);
  // Drops every sample of a gauge (before re-setting a labelled family); the
  // zero series named at its declaration stay, at 0.
  void ClearGauge(const std::string& name);
  // Makes `samples` the whole family `name` (a gauge, or a counter whose
  // values only grow): series that exist are updated in place, new ones added,
  // and the others removed (zero series named at declaration stay, at 0). For
  // families keyed by jobs or nodes: O(series log series), no re-allocation of
  // the series that stay. A counter series asked to go down keeps its value.
  void Replace(const std::string& name, const std::map<Labels, double>& samples);
  // A series its caller keeps, for families keyed by jobs or nodes that are set
  // on every publication: Set skips the label lookup. Valid until Drop of the
  // same labels, or a ClearGauge / Replace of its family. Set is thread-safe.
  class Series {
   public:
    void Set(double value);  // a gauge: the value; a counter: raised to it (never lowered)
    bool valid() const { return gauge_ || counter_; }

   private:
    friend class Metrics;
    prometheus::Gauge* gauge_ = nullptr;
    prometheus::Counter* counter_ = nullptr;
  };
  // The series `labels` of the declared gauge or counter `name` (made when new).
  Series Hold(const std::string& name, const Labels& labels);
  void Drop(const std::string& name, const Labels& labels);
  // How many series the family has now (0 when unknown).
  std::size_t SeriesCount(const std::string& name) const;
  void Observe(const std::string& name, double value);

  double Value(const std::string& name, const std::string& labels = {}) const;
  // Histogram summary for tests and logs: count, sum and max observed.
  struct HistogramStats { std::uint64_t count = 0; double sum = 0; double max = 0; };
  HistogramStats Histogram(const std::string& name) const;

  std::string Render() const;

  // `a="x",b="y"` as a map (see the header comment for the quoting rules).
  static Labels ParseLabels(const std::string& text);

 private:
  struct Family;
  // The family `name`, registered with `type` and `help` when new; mu_ held.
  Family& FamilyOf(const std::string& name, const char* type, const std::string& help = {});

  mutable std::mutex mu_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::map<std::string, std::unique_ptr<Family>> families_;
};

}  // namespace aryl::daemon
