#include "aryl/sim/report.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace aryl::sim {
namespace {

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

struct Column {
  const char* header;
  int width;
  // value of a run, as text
  std::string (*value)(const RunMetrics&);
  // ratio to baseline: +1 = run/baseline, -1 = baseline/run ("x lower"), 0 = none
  int ratio_sense;
  double (*number)(const RunMetrics&);
};

constexpr double kHour = 3600.0;

const Column kColumns[] = {
    {"jobs done", 9, [](const RunMetrics& m) { return std::to_string(m.jobs_completed); }, 0,
     [](const RunMetrics& m) { return static_cast<double>(m.jobs_completed); }},
    {"avg JCT h", 9, [](const RunMetrics& m) { return Fmt("%.2f", m.avg_jct_s / kHour); }, -1,
     [](const RunMetrics& m) { return m.avg_jct_s; }},
    {"p50 JCT h", 9, [](const RunMetrics& m) { return Fmt("%.2f", m.p50_jct_s / kHour); }, -1,
     [](const RunMetrics& m) { return m.p50_jct_s; }},
    {"p95 JCT h", 9, [](const RunMetrics& m) { return Fmt("%.2f", m.p95_jct_s / kHour); }, -1,
     [](const RunMetrics& m) { return m.p95_jct_s; }},
    {"p99 JCT h", 9, [](const RunMetrics& m) { return Fmt("%.2f", m.p99_jct_s / kHour); }, -1,
     [](const RunMetrics& m) { return m.p99_jct_s; }},
    {"avg wait h", 10, [](const RunMetrics& m) { return Fmt("%.2f", m.avg_wait_s / kHour); }, -1,
     [](const RunMetrics& m) { return m.avg_wait_s; }},
    {"p50 wait h", 10, [](const RunMetrics& m) { return Fmt("%.2f", m.p50_wait_s / kHour); }, -1,
     [](const RunMetrics& m) { return m.p50_wait_s; }},
    {"p95 wait h", 10, [](const RunMetrics& m) { return Fmt("%.2f", m.p95_wait_s / kHour); }, -1,
     [](const RunMetrics& m) { return m.p95_wait_s; }},
    {"1st start h", 11, [](const RunMetrics& m) { return Fmt("%.2f", m.avg_queue_s / kHour); }, -1,
     [](const RunMetrics& m) { return m.avg_queue_s; }},
    {"p95 1st h", 9, [](const RunMetrics& m) { return Fmt("%.2f", m.p95_queue_s / kHour); }, -1,
     [](const RunMetrics& m) { return m.p95_queue_s; }},
    {"train use", 9, [](const RunMetrics& m) { return Fmt("%.1f%%", m.training_usage * 100); }, 1,
     [](const RunMetrics& m) { return m.training_usage; }},
    {"overall use", 11, [](const RunMetrics& m) { return Fmt("%.1f%%", m.overall_usage * 100); }, 1,
     [](const RunMetrics& m) { return m.overall_usage; }},
    {"loaned GPU-h", 12, [](const RunMetrics& m) { return Fmt("%.0f", m.loaned_gpu_hours); }, 0,
     [](const RunMetrics& m) { return m.loaned_gpu_hours; }},
    {"useful GPU-h", 12, [](const RunMetrics& m) { return Fmt("%.0f", m.useful_gpu_hours); }, 0,
     [](const RunMetrics& m) { return m.useful_gpu_hours; }},
    {"norm GPU-h", 10, [](const RunMetrics& m) { return Fmt("%.0f", m.useful_norm_gpu_hours); }, 0,
     [](const RunMetrics& m) { return m.useful_norm_gpu_hours; }},
    {"wasted GPU-h", 12, [](const RunMetrics& m) { return Fmt("%.0f", std::round(m.wasted_gpu_hours) + 0.0); }, 0,  // + 0.0: never "-0"
     [](const RunMetrics& m) { return m.wasted_gpu_hours; }},
    {"preempt", 7, [](const RunMetrics& m) { return std::to_string(m.preemptions); }, 0,
     [](const RunMetrics& m) { return static_cast<double>(m.preemptions); }},
    {"rescale", 7, [](const RunMetrics& m) { return std::to_string(m.rescales); }, 0,
     [](const RunMetrics& m) { return static_cast<double>(m.rescales); }},
    {"pause GPU-h", 11, [](const RunMetrics& m) { return Fmt("%.0f", m.rescale_pause_gpu_hours); }, 0,
     [](const RunMetrics& m) { return m.rescale_pause_gpu_hours; }},
    {"reclaims", 8, [](const RunMetrics& m) { return std::to_string(m.reclaims); }, 0,
     [](const RunMetrics& m) { return static_cast<double>(m.reclaims); }},
    {"late", 4, [](const RunMetrics& m) { return std::to_string(m.reclaims_late); }, 0,
     [](const RunMetrics& m) { return static_cast<double>(m.reclaims_late); }},
    {"wall s", 7, [](const RunMetrics& m) { return Fmt("%.2f", m.sim_wall_s); }, 0,
     [](const RunMetrics& m) { return m.sim_wall_s; }},
};

std::string Pad(const std::string& s, int width, bool left = false) {
  if (static_cast<int>(s.size()) >= width) return s;
  std::string pad(width - s.size(), ' ');
  return left ? s + pad : pad + s;
}

}  // namespace

std::string FormatTable(const std::vector<RunMetrics>& runs) {
  int name_width = 6;
  for (const auto& r : runs) name_width = std::max<int>(name_width, static_cast<int>(r.policy.size()));
  std::ostringstream os;
  os << Pad("policy", name_width, true);
  for (const auto& c : kColumns) os << "  " << Pad(c.header, c.width);
  os << "\n";
  for (const auto& r : runs) {
    os << Pad(r.policy, name_width, true);
    for (const auto& c : kColumns) os << "  " << Pad(c.value(r), c.width);
    os << "\n";
  }
  // The simulator lends idle inference servers under every policy and
  // reclaims them as demand rises, so a run that never trains on them
  // (baseline) still counts reclaims: say what they were.
  for (const auto& r : runs) {
    if (r.reclaims > 0 && r.loaned_gpu_hours < 0.5) {  // printed as 0
      os << r.policy << ": " << r.reclaims
         << " reclaims of lent servers it never ran on (0 loaned GPU-h)\n";
    }
  }
  const RunMetrics* base = nullptr;
  for (const auto& r : runs) {
    if (r.policy == "baseline") {
      base = &r;
      break;
    }
  }
  if (base != nullptr && runs.size() > 1) {
    os << "\nratio to baseline (JCT and queue: baseline/policy, so >1 means lower; others: policy/baseline)\n";
    os << Pad("policy", name_width, true);
    for (const auto& c : kColumns) {
      if (c.ratio_sense != 0) os << "  " << Pad(c.header, c.width);
    }
    os << "\n";
    for (const auto& r : runs) {
      os << Pad(r.policy, name_width, true);
      for (const auto& c : kColumns) {
        if (c.ratio_sense == 0) continue;
        double a = c.number(r);
        double b = c.number(*base);
        double num = c.ratio_sense > 0 ? a : b;
        double den = c.ratio_sense > 0 ? b : a;
        os << "  " << Pad(den > 0 ? Fmt("%.2fx", num / den) : std::string("-"), c.width);
      }
      os << "\n";
    }
  }
  return os.str();
}

std::string FormatQueueTable(const std::vector<RunMetrics>& runs) {
  std::string out;
  for (const RunMetrics& m : runs) {
    if (m.queues.empty()) continue;
    if (out.empty()) {
      char head[256];
      std::snprintf(head, sizeof head, "%-13s %-10s %6s %6s %10s %12s %10s %11s %9s %11s\n", "policy", "queue", "jobs",
                    "quota", "GPU-h", "borrowed GPU-h", "loaned GPU-h", "1st start h", "avg JCT h", "quota held");
      out += head;
    }
    for (const QueueMetrics& q : m.queues) {
      char row[256];
      std::snprintf(row, sizeof row, "%-13s %-10s %6lld %6d %10.0f %14.0f %12.0f %11.2f %9.2f %10.1f%%\n",
                    m.policy.c_str(), q.queue.c_str(), static_cast<long long>(q.jobs), q.quota_gpus, q.gpu_hours,
                    q.borrowed_gpu_hours, q.loaned_gpu_hours, q.avg_queue_s / 3600, q.avg_jct_s / 3600,
                    100 * q.quota_held_fraction);
      out += row;
    }
  }
  return out;
}

nlohmann::ordered_json RunToJson(const RunMetrics& m) {
  nlohmann::ordered_json j;
  j["policy"] = m.policy;
  j["jobs_completed"] = m.jobs_completed;
  j["avg_jct_s"] = m.avg_jct_s;
  j["p50_jct_s"] = m.p50_jct_s;
  j["p95_jct_s"] = m.p95_jct_s;
  j["p99_jct_s"] = m.p99_jct_s;
  j["avg_wait_s"] = m.avg_wait_s;
  j["p50_wait_s"] = m.p50_wait_s;
  j["p95_wait_s"] = m.p95_wait_s;
  j["p99_wait_s"] = m.p99_wait_s;
  j["avg_queue_s"] = m.avg_queue_s;
  j["p50_queue_s"] = m.p50_queue_s;
  j["p95_queue_s"] = m.p95_queue_s;
  j["p99_queue_s"] = m.p99_queue_s;
  j["training_usage"] = m.training_usage;
  j["overall_usage"] = m.overall_usage;
  j["loaned_gpu_hours"] = m.loaned_gpu_hours;
  j["allocated_gpu_hours"] = m.allocated_gpu_hours;
  j["useful_gpu_hours"] = m.useful_gpu_hours;
  j["useful_norm_gpu_hours"] = m.useful_norm_gpu_hours;
  j["wasted_gpu_hours"] = m.wasted_gpu_hours;
  j["lost_gpu_hours"] = m.lost_gpu_hours;
  j["preemptions"] = m.preemptions;
  j["rescales"] = m.rescales;
  j["rescale_pause_gpu_hours"] = m.rescale_pause_gpu_hours;
  j["reclaims"] = m.reclaims;
  j["reclaims_late"] = m.reclaims_late;
  j["sim_wall_s"] = m.sim_wall_s;
  if (!m.queues.empty()) {
    auto& qs = j["queues"] = nlohmann::ordered_json::array();
    for (const QueueMetrics& q : m.queues) {
      nlohmann::ordered_json x;
      x["queue"] = q.queue;
      x["quota_gpus"] = q.quota_gpus;
      x["weight"] = q.weight;
      x["jobs"] = q.jobs;
      x["gpu_hours"] = q.gpu_hours;
      x["borrowed_gpu_hours"] = q.borrowed_gpu_hours;
      x["loaned_gpu_hours"] = q.loaned_gpu_hours;
      x["avg_queue_s"] = q.avg_queue_s;
      x["avg_jct_s"] = q.avg_jct_s;
      x["quota_held_fraction"] = q.quota_held_fraction;
      x["quota_missed_s"] = q.quota_missed_s;
      x["quota_missed_fitting_s"] = q.quota_missed_fitting_s;
      qs.push_back(std::move(x));
    }
  }
  return j;
}

Status WriteJson(const std::string& path, const nlohmann::ordered_json& config,
                 const std::vector<RunMetrics>& runs) {
  nlohmann::ordered_json doc;
  doc["config"] = config;
  doc["runs"] = nlohmann::ordered_json::array();
  for (const auto& r : runs) doc["runs"].push_back(RunToJson(r));
  std::ofstream out(path);
  if (!out) return Status::IoError("--json: cannot write '" + path + "'");
  out << doc.dump(2) << "\n";
  if (!out) return Status::IoError("--json: error writing '" + path + "'");
  return Status::Ok();
}

Status WriteTimelineCsv(const std::string& path, const std::vector<RunResult>& runs) {
  std::ofstream out(path);
  if (!out) return Status::IoError("--timeline: cannot write '" + path + "'");
  out << "policy,time_s,queued_jobs,running_jobs,busy_training_gpus,busy_loaned_gpus,loaned_servers,"
         "demand_servers,held_servers\n";
  for (const auto& r : runs) {
    for (const auto& s : r.timeline) {
      out << r.metrics.policy << ',' << Fmt("%.0f", s.time) << ',' << s.queued_jobs << ',' << s.running_jobs
          << ',' << s.busy_training_gpus << ',' << s.busy_loaned_gpus << ',' << s.loaned_servers << ','
          << s.demand_servers << ',' << s.held_servers << '\n';
    }
  }
  if (!out) return Status::IoError("--timeline: error writing '" + path + "'");
  return Status::Ok();
}

Status WriteJobsCsv(const std::string& path, const std::vector<RunResult>& runs) {
  std::ofstream out(path);
  if (!out) return Status::IoError("--jobs-csv: cannot write '" + path + "'");
  out << "policy,job_id,submit_s,first_start_s,finish_s,waiting_s,preemptions,rescales,gpu_types\n";
  for (const auto& r : runs) {
    for (const auto& j : r.jobs) {
      // Trace ids are quoted only when they need it (a comma or a quote).
      std::string id = j.name;
      if (id.find_first_of(",\"\n") != std::string::npos) {
        std::string q = "\"";
        for (char c : id) q += c == '"' ? std::string("\"\"") : std::string(1, c);
        id = q + "\"";
      }
      out << r.metrics.policy << ',' << id << ',' << Fmt("%.3f", j.submit) << ',' << Fmt("%.3f", j.first_start)
          << ',' << Fmt("%.3f", j.finish) << ',' << Fmt("%.3f", j.waiting()) << ',' << j.preemptions << ','
          << j.rescales << ',' << j.gpu_types << '\n';
    }
  }
  if (!out) return Status::IoError("--jobs-csv: error writing '" + path + "'");
  return Status::Ok();
}

}  // namespace aryl::sim
