// The queues file: parsing and checks against the training cluster.
#include "aryl/sched/queues.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace aryl::sched {
namespace {

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> SplitOn(std::string_view line, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t pos = line.find(sep, start);
    out.push_back(Trim(
        line.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start)));
    if (pos == std::string_view::npos) return out;
    start = pos + 1;
  }
}

// "FILE:LINE: field 'F': value 'V': why".
Status Bad(const std::string& where, const std::string& field, const std::string& value,
           const std::string& why) {
  return Status::InvalidArgument(where + ": field '" + field + "': value '" + value + "': " + why);
}

Result<double> Number(const std::string& where, const std::string& field, const std::string& v) {
  char* end = nullptr;
  const double x = v.empty() ? NAN : std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x)) return Bad(where, field, v, "not a number");
  return x;
}

Result<int> Count(const std::string& where, const std::string& field, const std::string& v,
                  int lowest) {
  ARYL_ASSIGN_OR_RETURN(double x, Number(where, field, v));
  if (x != std::floor(x) || x < lowest || x > 1e9)
    return Bad(where, field, v,
               lowest < 0 ? "not a whole number >= -1 (-1: no limit)" : "not a whole number >= 0");
  return static_cast<int>(x);
}

}  // namespace

const char* PriorityName(int priority) {
  switch (priority) {
    case kPriorityLow:
      return "low";
    case kPriorityNormal:
      return "normal";
    case kPriorityHigh:
      return "high";
  }
  return "?";
}

Result<int> ParsePriority(std::string_view name) {
  for (int p = 0; p < kPriorityClasses; ++p) {
    if (name == PriorityName(p)) return p;
  }
  return Status::InvalidArgument("priority '" + std::string(name) + "': one of low, normal, high");
}

bool QueueSpec::MayUse(std::string_view user) const {
  return users.empty() || std::find(users.begin(), users.end(), user) != users.end();
}

int QueueConfig::Find(std::string_view name) const {
  if (name.empty()) return queues.empty() ? -1 : default_queue;
  auto it = index_.find(std::string(name));
  return it == index_.end() ? -1 : it->second;
}

void QueueConfig::Index() {
  index_.clear();
  default_queue = 0;
  for (size_t i = 0; i < queues.size(); ++i) index_.emplace(queues[i].name, static_cast<int>(i));
  if (auto it = index_.find("default"); it != index_.end()) default_queue = it->second;
}

Result<QueueConfig> ParseQueuesCsv(std::string_view text, const std::string& file,
                                   const QueueCluster& cluster) {
  const std::vector<std::string> kRequired =
      cluster.open ? std::vector<std::string>{"queue", "quota_gpus", "weight", "gpu_type"}
                   : std::vector<std::string>{"queue", "quota_gpus", "weight", "jobs_share"};
  static const std::set<std::string> kKnown = {
      "queue",        "quota_gpus", "weight",       "jobs_share", "gpu_type",
      "borrow_limit", "lend_limit", "cohort",       "priority_mix", "users"};
  QueueConfig config;
  std::map<std::string, int> col;
  std::map<std::string, int> line_of;  // queue -> line, for duplicates
  std::map<std::string, int> quota_sum;
  std::vector<int> lines;
  int line_no = 0;
  std::istringstream in{std::string(text)};
  std::string raw;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    const std::string where = file + ":" + std::to_string(line_no);
    const std::vector<std::string> cells = SplitOn(line, ',');
    if (col.empty()) {
      for (size_t i = 0; i < cells.size(); ++i) {
        if (!kKnown.count(cells[i]))
          return Bad(where, "header", cells[i],
                     "unknown column (known: queue, quota_gpus, weight, jobs_share, "
                     "gpu_type, borrow_limit, lend_limit, cohort, priority_mix, users)");
        if (!col.emplace(cells[i], static_cast<int>(i)).second)
          return Bad(where, "header", cells[i], "repeated");
      }
      for (const std::string& r : kRequired) {
        if (!col.count(r)) return Bad(where, "header", line, "no column '" + r + "'");
      }
      continue;
    }
    if (cells.size() != col.size())
      return Bad(
          where, "row", line,
          std::to_string(cells.size()) + " fields, the header has " + std::to_string(col.size()));
    auto cell = [&](const std::string& name) -> std::string {
      auto it = col.find(name);
      return it == col.end() ? std::string() : cells[it->second];
    };
    QueueSpec q;
    q.name = cell("queue");
    if (q.name.empty()) return Bad(where, "queue", q.name, "empty");
    for (char c : q.name) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
        return Bad(where, "queue", q.name, "a name is letters, digits, '-', '_' or '.'");
    }
    if (auto [it, fresh] = line_of.emplace(q.name, line_no); !fresh)
      return Bad(where, "queue", q.name,
                 "duplicate name (first on line " + std::to_string(it->second) + ")");
    std::string type = col.count("gpu_type") ? cell("gpu_type") : "";
    if (type.empty()) type = cluster.default_type;
    if (cluster.open && type.empty()) return Bad(where, "gpu_type", type, "empty: name the type the quota is in");
    auto gpus = cluster.training_gpus.find(type);
    if (cluster.open) {
      // Sizes are the registered agents', not known here.
    } else if (gpus == cluster.training_gpus.end()) {
      std::string known;
      for (const auto& [t, n] : cluster.training_gpus) known += (known.empty() ? "" : ", ") + t;
      return Bad(where, "gpu_type", type, "unknown GPU type (training types: " + known + ")");
    }
    ARYL_ASSIGN_OR_RETURN(int quota, Count(where, "quota_gpus", cell("quota_gpus"), 0));
    if (!cluster.open && quota > gpus->second)
      return Bad(
          where, "quota_gpus", cell("quota_gpus"),
          "above the cluster's " + std::to_string(gpus->second) + " " + type + " training GPUs");
    quota_sum[type] += quota;
    if (!cluster.open && quota_sum[type] > gpus->second)
      return Bad(where, "quota_gpus", cell("quota_gpus"),
                 "the quotas of " + type + " sum to " + std::to_string(quota_sum[type]) +
                     ", above the cluster's " + std::to_string(gpus->second) + " training GPUs");
    q.quota[type] = quota;
    ARYL_ASSIGN_OR_RETURN(q.weight, Number(where, "weight", cell("weight")));
    if (!(q.weight > 0)) return Bad(where, "weight", cell("weight"), "must be > 0");
    if (col.count("jobs_share")) {
      ARYL_ASSIGN_OR_RETURN(q.jobs_share, Number(where, "jobs_share", cell("jobs_share")));
    }
    if (q.jobs_share < 0 || q.jobs_share > 1)
      return Bad(where, "jobs_share", cell("jobs_share"), "must be in [0, 1]");
    if (col.count("borrow_limit") && !cell("borrow_limit").empty()) {
      ARYL_ASSIGN_OR_RETURN(q.borrow_limit, Count(where, "borrow_limit", cell("borrow_limit"), -1));
    }
    if (col.count("lend_limit") && !cell("lend_limit").empty()) {
      ARYL_ASSIGN_OR_RETURN(q.lend_limit, Count(where, "lend_limit", cell("lend_limit"), -1));
    }
    q.cohort = cell("cohort");
    if (const std::string who = cell("users"); !who.empty() && who != "*") {
      for (const std::string& u : SplitOn(who, ';')) {
        if (u.empty()) return Bad(where, "users", who, "an empty name (names are separated by ';')");
        if (u == "*") return Bad(where, "users", who, "'*' (anyone) stands alone");
        q.users.push_back(u);
      }
    }
    if (col.count("priority_mix") && !cell("priority_mix").empty()) {
      const std::string v = cell("priority_mix");
      const auto parts = SplitOn(v, ':');
      if (parts.size() != kPriorityClasses)
        return Bad(where, "priority_mix", v, "not LOW:NORMAL:HIGH");
      double sum = 0;
      for (int p = 0; p < kPriorityClasses; ++p) {
        ARYL_ASSIGN_OR_RETURN(q.priority_mix[p], Number(where, "priority_mix", parts[p]));
        if (q.priority_mix[p] < 0) return Bad(where, "priority_mix", v, "a fraction is < 0");
        sum += q.priority_mix[p];
      }
      if (std::fabs(sum - 1) > 1e-6)
        return Bad(where, "priority_mix", v, "the fractions do not sum to 1");
    }
    config.queues.push_back(std::move(q));
    lines.push_back(line_no);
  }
  if (col.empty())
    return Status::InvalidArgument(file + ": no header (" +
                                   (cluster.open ? "queue,quota_gpus,weight,gpu_type" : "queue,quota_gpus,weight,jobs_share") + ")");
  if (config.queues.empty()) return Status::InvalidArgument(file + ": no queue");
  bool cohorts = false;
  double shares = 0;
  for (const QueueSpec& q : config.queues) {
    cohorts = cohorts || !q.cohort.empty();
    shares += q.jobs_share;
  }
  for (size_t i = 0; i < config.queues.size(); ++i) {
    if (cohorts && config.queues[i].cohort.empty())
      return Bad(file + ":" + std::to_string(lines[i]), "cohort", "",
                 "queue '" + config.queues[i].name + "' is in no cohort while others name one");
  }
  if (shares != 0 && std::fabs(shares - 1) > 1e-6) {
    std::ostringstream os;
    os << shares;
    return Bad(file, "jobs_share", os.str(), "the shares sum to this, not 1");
  }
  config.Index();
  return config;
}

std::vector<int> WeightedShares(const std::vector<double>& weights, const std::vector<int>& demands,
                                int capacity) {
  const size_t n = demands.size();
  std::vector<int> caps(n, 0);
  std::vector<bool> active(n, false);
  for (size_t i = 0; i < n; ++i) active[i] = demands[i] > 0;
  int left = capacity;
  while (left > 0) {
    double w = 0;
    for (size_t i = 0; i < n; ++i) w += active[i] ? weights[i] : 0;
    if (!(w > 0)) break;
    bool settled = false;  // a demand within its share took all of it
    for (size_t i = 0; i < n; ++i) {
      if (active[i] && demands[i] - caps[i] <= left * weights[i] / w) {
        left -= demands[i] - caps[i];
        caps[i] = demands[i];
        active[i] = false;
        settled = true;
      }
    }
    if (settled) continue;
    std::vector<std::pair<double, size_t>> rest;  // (-fraction, index)
    int given = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!active[i]) continue;
      const double exact = left * weights[i] / w;
      const int whole = static_cast<int>(exact);
      caps[i] += whole;
      given += whole;
      rest.emplace_back(-(exact - whole), i);
    }
    left -= given;
    std::sort(rest.begin(), rest.end());
    for (const auto& [f, i] : rest) {
      if (left == 0) break;
      ++caps[i];
      --left;
    }
    break;
  }
  return caps;
}

int QueueReach(const QueueConfig& queues, int q, const std::string& type, int training_gpus) {
  const QueueSpec& me = queues.queues[q];
  int lendable = training_gpus;
  for (const QueueSpec& p : queues.queues) lendable -= p.Nominal(type);
  lendable = std::max(0, lendable);
  for (const QueueSpec& p : queues.queues) {
    if (&p == &me || p.cohort != me.cohort) continue;
    lendable += p.lend_limit < 0 ? p.Nominal(type) : std::min(p.lend_limit, p.Nominal(type));
  }
  const int borrow = me.borrow_limit < 0 ? lendable : std::min(me.borrow_limit, lendable);
  return me.Nominal(type) + borrow;
}

Result<QueueConfig> ReadQueuesFile(const std::string& file, const QueueCluster& cluster) {
  std::ifstream in(file);
  if (!in) return Status::NotFound(file + ": cannot read the queues file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseQueuesCsv(ss.str(), file, cluster);
}

}  // namespace aryl::sched
