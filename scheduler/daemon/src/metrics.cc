#include "aryl/daemon/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include <spdlog/spdlog.h>

#include "aryl/version.h"

namespace aryl::daemon {

// One declared metric: its prometheus-cpp family and the series made so far.
struct Metrics::Family {
  std::string type;  // counter | gauge | histogram
  prometheus::Family<prometheus::Counter>* counters = nullptr;
  prometheus::Family<prometheus::Gauge>* gauges = nullptr;
  prometheus::Family<prometheus::Histogram>* histograms = nullptr;
  std::map<Labels, prometheus::Counter*> counter_series;
  std::map<Labels, prometheus::Gauge*> gauge_series;
  std::vector<Labels> zero_series;  // gauges: kept at 0 by ClearGauge
  prometheus::Histogram* histogram = nullptr;
  HistogramStats stats;
};

namespace {

bool IsLabelNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// After a closing quote at `i`: does `,name=` or the end follow?
bool EndsValue(const std::string& t, size_t i) {
  size_t j = i + 1;
  if (j >= t.size()) return true;
  if (t[j] != ',') return false;
  ++j;
  while (j < t.size() && t[j] == ' ') ++j;
  size_t start = j;
  while (j < t.size() && IsLabelNameChar(t[j])) ++j;
  return j > start && j < t.size() && t[j] == '=' && j + 1 < t.size() && t[j + 1] == '"';
}

}  // namespace

Metrics::Labels Metrics::ParseLabels(const std::string& t) {
  Labels out;
  size_t i = 0;
  while (i < t.size()) {
    while (i < t.size() && (t[i] == ',' || t[i] == ' ')) ++i;
    size_t eq = t.find('=', i);
    if (eq == std::string::npos) break;
    std::string key = t.substr(i, eq - i);
    i = eq + 1;
    std::string value;
    if (i < t.size() && t[i] == '"') {
      ++i;
      for (; i < t.size(); ++i) {
        char c = t[i];
        if (c == '\\' && i + 1 < t.size()) {
          char n = t[++i];
          value += n == 'n' ? '\n' : n;
        } else if (c == '"' && EndsValue(t, i)) {
          ++i;
          break;
        } else {
          value += c;
        }
      }
    } else {  // unquoted: up to the next comma
      size_t comma = t.find(',', i);
      value = t.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
      i = comma == std::string::npos ? t.size() : comma;
    }
    out[key] = value;
  }
  return out;
}

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  const BuildInfo& b = GetBuildInfo();
  auto on = [](bool v) { return std::string(v ? "on" : "off"); };
  DeclareGauge("aryl_build_info", "Build of this aryl-scheduler: version, commit and options (always 1)", {});
  Set("aryl_build_info",
      Labels{{"version", std::string(b.version)},
             {"commit", std::string(b.git_commit)},
             {"torch", on(b.torch)},
             {"cuda", on(b.cuda)},
             {"nccl", on(b.nccl)}},
      1);
}

Metrics::~Metrics() = default;

Metrics::Family& Metrics::FamilyOf(const std::string& name, const char* type, const std::string& help) {
  auto it = families_.find(name);
  if (it != families_.end()) return *it->second;
  // Declared here, or used before being declared (then without help text).
  auto f = std::make_unique<Family>();
  f->type = type;
  std::string t = type;
  if (t == "counter") f->counters = &prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
  else if (t == "gauge") f->gauges = &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
  else f->histograms = &prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_);
  return *families_.emplace(name, std::move(f)).first->second;
}

void Metrics::DeclareCounter(const std::string& name, const std::string& help,
                             const std::vector<std::string>& zero_series) {
  {
    std::lock_guard lock(mu_);
    FamilyOf(name, "counter", help);
  }
  for (const auto& labels : zero_series) Inc(name, labels, 0);
}

void Metrics::DeclareGauge(const std::string& name, const std::string& help,
                           const std::vector<std::string>& zero_series) {
  {
    std::lock_guard lock(mu_);
    FamilyOf(name, "gauge", help).zero_series.clear();
  }
  for (const auto& labels : zero_series) {
    Set(name, labels, 0);
    std::lock_guard lock(mu_);
    families_[name]->zero_series.push_back(ParseLabels(labels));
  }
}

void Metrics::DeclareHistogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  std::lock_guard lock(mu_);
  Family& f = FamilyOf(name, "histogram", help);
  if (f.histogram || !f.histograms) return;
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  f.histogram = &f.histograms->Add({}, prometheus::Histogram::BucketBoundaries(bounds.begin(), bounds.end()));
}

void Metrics::Inc(const std::string& name, const std::string& labels, double by) {
  Inc(name, ParseLabels(labels), by);
}

void Metrics::Inc(const std::string& name, const Labels& labels, double by) {
  std::lock_guard lock(mu_);
  try {
    Family& f = FamilyOf(name, "counter");
    if (!f.counters) return;
    auto [it, fresh] = f.counter_series.try_emplace(labels, nullptr);
    if (fresh) it->second = &f.counters->Add(labels);
    if (by > 0) it->second->Increment(by);
  } catch (const std::exception& e) {  // an invalid metric or label name
    spdlog::warn("metrics: {}: {}", name, e.what());
  }
}

void Metrics::Set(const std::string& name, const std::string& labels, double value) {
  Set(name, ParseLabels(labels), value);
}

void Metrics::Set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  try {
    Family& f = FamilyOf(name, "gauge");
    if (!f.gauges) return;
    auto [it, fresh] = f.gauge_series.try_emplace(labels, nullptr);
    if (fresh) it->second = &f.gauges->Add(labels);
    it->second->Set(value);
  } catch (const std::exception& e) {
    spdlog::warn("metrics: {}: {}", name, e.what());
  }
}

void Metrics::ClearGauge(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || !it->second->gauges) return;
  Family& f = *it->second;
  for (auto g = f.gauge_series.begin(); g != f.gauge_series.end();) {
    if (std::find(f.zero_series.begin(), f.zero_series.end(), g->first) != f.zero_series.end()) {
      g->second->Set(0);
      ++g;
    } else {
      f.gauges->Remove(g->second);
      g = f.gauge_series.erase(g);
    }
  }
}

namespace {

// Metrics::Replace for one family of gauges or counters; `set` sets a value.
template <typename T, typename Set>
void ReplaceIn(prometheus::Family<T>& family, std::map<Metrics::Labels, T*>& series,
               const std::vector<Metrics::Labels>& zero_series, const std::map<Metrics::Labels, double>& samples,
               Set set) {
  for (auto s = series.begin(); s != series.end();) {
    if (samples.count(s->first)) {
      ++s;
    } else if (std::find(zero_series.begin(), zero_series.end(), s->first) != zero_series.end()) {
      set(*s->second, 0);
      ++s;
    } else {
      family.Remove(s->second);
      s = series.erase(s);
    }
  }
  for (const auto& [labels, v] : samples) {
    auto [s, fresh] = series.try_emplace(labels, nullptr);
    if (fresh) s->second = &family.Add(labels);
    set(*s->second, v);
  }
}

}  // namespace

void Metrics::Replace(const std::string& name, const std::map<Labels, double>& samples) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return;  // declare it first
  Family& f = *it->second;
  try {
    if (f.gauges) {
      ReplaceIn(*f.gauges, f.gauge_series, f.zero_series, samples, [](prometheus::Gauge& g, double v) { g.Set(v); });
    } else if (f.counters) {
      ReplaceIn(*f.counters, f.counter_series, {}, samples, [](prometheus::Counter& c, double v) {
        if (v > c.Value()) c.Increment(v - c.Value());
      });
    }
  } catch (const std::exception& e) {  // an invalid label name
    spdlog::warn("metrics: {}: {}", name, e.what());
  }
}

void Metrics::Series::Set(double value) {
  if (gauge_) gauge_->Set(value);
  else if (counter_ && value > counter_->Value()) counter_->Increment(value - counter_->Value());
}

Metrics::Series Metrics::Hold(const std::string& name, const Labels& labels) {
  std::lock_guard lock(mu_);
  Series s;
  auto it = families_.find(name);
  if (it == families_.end()) return s;  // declare it first
  Family& f = *it->second;
  try {
    if (f.gauges) {
      auto [g, fresh] = f.gauge_series.try_emplace(labels, nullptr);
      if (fresh) g->second = &f.gauges->Add(labels);
      s.gauge_ = g->second;
    } else if (f.counters) {
      auto [c, fresh] = f.counter_series.try_emplace(labels, nullptr);
      if (fresh) c->second = &f.counters->Add(labels);
      s.counter_ = c->second;
    }
  } catch (const std::exception& e) {  // an invalid label name
    spdlog::warn("metrics: {}: {}", name, e.what());
  }
  return s;
}

void Metrics::Drop(const std::string& name, const Labels& labels) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return;
  Family& f = *it->second;
  if (auto g = f.gauge_series.find(labels); g != f.gauge_series.end()) {
    f.gauges->Remove(g->second);
    f.gauge_series.erase(g);
  }
  if (auto c = f.counter_series.find(labels); c != f.counter_series.end()) {
    f.counters->Remove(c->second);
    f.counter_series.erase(c);
  }
}

std::size_t Metrics::SeriesCount(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  return it->second->gauge_series.size() + it->second->counter_series.size() + (it->second->histogram ? 1 : 0);
}

void Metrics::Observe(const std::string& name, double value) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || !it->second->histogram) return;  // histograms need their buckets declared
  Family& f = *it->second;
  f.histogram->Observe(value);
  f.stats.count++;
  f.stats.sum += value;
  f.stats.max = std::max(f.stats.max, value);
}

double Metrics::Value(const std::string& name, const std::string& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  const Family& f = *it->second;
  Labels key = ParseLabels(labels);
  if (auto c = f.counter_series.find(key); c != f.counter_series.end()) return c->second->Value();
  if (auto g = f.gauge_series.find(key); g != f.gauge_series.end()) return g->second->Value();
  return 0;
}

Metrics::HistogramStats Metrics::Histogram(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  return it == families_.end() ? HistogramStats{} : it->second->stats;
}

std::string Metrics::Render() const {
  // No mu_: the registry and its families lock themselves, so a scrape of a
  // large cluster does not hold up the daemon's updates.
  std::ostringstream os;
  prometheus::TextSerializer().Serialize(os, registry_->Collect());
  return os.str();
}

}  // namespace aryl::daemon
