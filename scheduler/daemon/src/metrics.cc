#include "aryl/daemon/metrics.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace aryl::daemon {
namespace {
std::string Num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}
}  // namespace

void Metrics::DeclareCounter(const std::string& name, const std::string& help) {
  std::lock_guard lock(mu_);
  families_[name].type = "counter";
  families_[name].help = help;
}

void Metrics::DeclareGauge(const std::string& name, const std::string& help) {
  std::lock_guard lock(mu_);
  families_[name].type = "gauge";
  families_[name].help = help;
}

void Metrics::DeclareHistogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  std::lock_guard lock(mu_);
  auto& f = families_[name];
  f.type = "histogram";
  f.help = help;
  std::sort(bounds.begin(), bounds.end());
  f.bounds = std::move(bounds);
  f.buckets.assign(f.bounds.size() + 1, 0);
}

void Metrics::Inc(const std::string& name, const std::string& labels, double by) {
  std::lock_guard lock(mu_);
  families_[name].samples[labels] += by;
}

void Metrics::Set(const std::string& name, const std::string& labels, double value) {
  std::lock_guard lock(mu_);
  families_[name].samples[labels] = value;
}

void Metrics::ClearGauge(const std::string& name) {
  std::lock_guard lock(mu_);
  families_[name].samples.clear();
}

void Metrics::Observe(const std::string& name, double value) {
  std::lock_guard lock(mu_);
  auto& f = families_[name];
  if (f.buckets.size() != f.bounds.size() + 1) f.buckets.assign(f.bounds.size() + 1, 0);
  size_t i = std::lower_bound(f.bounds.begin(), f.bounds.end(), value) - f.bounds.begin();
  f.buckets[i]++;
  f.hist.count++;
  f.hist.sum += value;
  f.hist.max = std::max(f.hist.max, value);
}

double Metrics::Value(const std::string& name, const std::string& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.samples.find(labels);
  return s == it->second.samples.end() ? 0 : s->second;
}

Metrics::HistogramStats Metrics::Histogram(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  return it == families_.end() ? HistogramStats{} : it->second.hist;
}

std::string Metrics::Render() const {
  std::lock_guard lock(mu_);
  std::ostringstream os;
  for (const auto& [name, f] : families_) {
    os << "# HELP " << name << " " << f.help << "\n# TYPE " << name << " " << (f.type.empty() ? "untyped" : f.type) << "\n";
    if (f.type == "histogram") {
      std::uint64_t cum = 0;
      for (size_t i = 0; i < f.buckets.size(); ++i) {
        cum += f.buckets[i];
        double le = i < f.bounds.size() ? f.bounds[i] : INFINITY;
        os << name << "_bucket{le=\"" << Num(le) << "\"} " << cum << "\n";
      }
      os << name << "_sum " << Num(f.hist.sum) << "\n" << name << "_count " << f.hist.count << "\n";
      continue;
    }
    if (f.samples.empty() && f.type == "counter") os << name << " 0\n";
    for (const auto& [labels, v] : f.samples) {
      os << name;
      if (!labels.empty()) os << "{" << labels << "}";
      os << " " << Num(v) << "\n";
    }
  }
  return os.str();
}

}  // namespace aryl::daemon
