// The daemon's metrics through prometheus-cpp: label values escaped, build
// info and zero series present from the start, and the exposition accepted by
// `promtool check metrics` (Debian's prometheus package), both from the
// Metrics class and scraped from a real aryl-scheduler's /metrics, which also
// has every series deploy/grafana/aryl-cluster.json queries.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "aryl/agent/process.h"
#include "aryl/daemon/http_server.h"
#include "aryl/daemon/metrics.h"

namespace aryl::daemon {
namespace {

namespace fs = std::filesystem;

bool HavePromtool() { return std::system("command -v promtool >/dev/null 2>&1") == 0; }

// Runs `promtool check metrics` on `text`; returns its exit code and output.
std::pair<int, std::string> Promtool(const std::string& text) {
  fs::path file = fs::temp_directory_path() / ("aryl-metrics-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << text;
  std::string cmd = "promtool check metrics < " + file.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while (p && (n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = p ? pclose(p) : -1;
  fs::remove(file);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// A `"`, a backslash and a newline in label values come out escaped; the parse
// of the daemon's label strings keeps them whole.
TEST(PrometheusMetrics, LabelValuesAreEscaped) {
  Metrics m;
  m.DeclareGauge("aryl_job_workers", "Workers of a job", {});
  m.Set("aryl_job_workers", "job=\"7\",name=\"say \"hi\"\"", 3);
  m.Set("aryl_job_workers", Metrics::Labels{{"job", "8"}, {"name", "back\\slash\nnewline"}}, 2);
  std::string text = m.Render();
  EXPECT_NE(text.find("aryl_job_workers{job=\"7\",name=\"say \\\"hi\\\"\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_job_workers{job=\"8\",name=\"back\\\\slash\\nnewline\"} 2"), std::string::npos) << text;
  EXPECT_DOUBLE_EQ(m.Value("aryl_job_workers", "job=\"7\",name=\"say \"hi\"\""), 3);
  EXPECT_EQ(Metrics::ParseLabels("pool=\"training\",use=\"used\""),
            (Metrics::Labels{{"pool", "training"}, {"use", "used"}}));
  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed (Debian: prometheus); format not checked";
  auto [rc, out] = Promtool(text);
  EXPECT_EQ(rc, 0) << out << "\n" << text;
}

// Before anything happens: aryl_build_info, counters at 0 and empty histograms.
TEST(PrometheusMetrics, SeriesPresentFromTheStart) {
  Metrics m;
  m.DeclareCounter("aryl_reclaims_total", "Servers reclaimed by inference");
  m.DeclareCounter("aryl_jobs_finished_total", "Jobs that ended, by state",
                   {"state=\"completed\"", "state=\"failed\"", "state=\"cancelled\""});
  m.DeclareHistogram("aryl_resize_pause_seconds", "Training pause of one resize", {0.1, 1, 10});
  m.DeclareGauge("aryl_loaned_servers", "Inference servers loaned to training");
  std::string text = m.Render();
  EXPECT_NE(text.find("aryl_build_info{"), std::string::npos) << text;
  EXPECT_NE(text.find("commit=\""), std::string::npos) << text;
  EXPECT_NE(text.find("version=\""), std::string::npos) << text;
  EXPECT_NE(text.find("\naryl_reclaims_total 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_jobs_finished_total{state=\"failed\"} 0\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("\naryl_jobs_finished_total 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_resize_pause_seconds_count 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\naryl_loaned_servers 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_resize_pause_seconds_bucket{le=\"+Inf\"} 0\n"), std::string::npos) << text;
  m.Inc("aryl_jobs_finished_total", "state=\"failed\"");
  EXPECT_DOUBLE_EQ(m.Value("aryl_jobs_finished_total", "state=\"failed\""), 1);
  m.ClearGauge("aryl_build_info");  // gauges can be cleared and set again
  EXPECT_EQ(m.Render().find("aryl_build_info{"), std::string::npos);
  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed (Debian: prometheus); format not checked";
  auto [rc, out] = Promtool(text);
  EXPECT_EQ(rc, 0) << out << "\n" << text;
}

#ifdef ARYL_SCHEDULER_BIN
// A real aryl-scheduler's /metrics passes promtool from its first scrape.
TEST(PrometheusMetrics, SchedulerScrapePassesPromtool) {
  fs::path dir = fs::temp_directory_path() / ("aryl-metrics-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  agent::ProcessLauncher launcher;
  agent::LaunchSpec s;
  s.argv = {ARYL_SCHEDULER_BIN, "--endpoint", "tcp://127.0.0.1:*", "--state", (dir / "state.db").string(),
            "--http-port", "0", "--http-address", "127.0.0.1"};
  s.stdout_path = (dir / "scheduler.log").string();
  ASSERT_TRUE(launcher.Launch(s).ok());
  int port = -1;
  for (int i = 0; i < 200 && port < 0; ++i) {
    std::ifstream in(dir / "scheduler.log");
    std::string line;
    while (std::getline(in, line)) {
      auto at = line.find("http on 127.0.0.1:");
      if (at != std::string::npos) port = std::stoi(line.substr(at + 18));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(port, 0);
  auto got = HttpGet("127.0.0.1", port, "/metrics", 5.0);
  launcher.StopAll(2);
  fs::remove_all(dir);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->first, 200);
  const std::string& text = got->second;
  EXPECT_NE(text.find("aryl_build_info{"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_reclaims_total 0"), std::string::npos) << text;
  // Every series the Grafana dashboard queries is exported from the first scrape.
  std::ifstream dash(std::string(ARYL_SOURCE_DIR) + "/deploy/grafana/aryl-cluster.json");
  ASSERT_TRUE(dash.good());
  std::stringstream ds;
  ds << dash.rdbuf();
  const std::string json = ds.str();
  std::regex name_re("aryl_[a-z_]+");
  int checked = 0;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), name_re); it != std::sregex_iterator(); ++it) {
    std::string name = it->str();
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string sfx = suffix;
      if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0)
        name.resize(name.size() - sfx.size());
    }
    EXPECT_NE(text.find("# TYPE " + name + " "), std::string::npos) << name << " is on the dashboard but not exported";
    ++checked;
  }
  EXPECT_GT(checked, 10);
  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed (Debian: prometheus); format not checked";
  auto [rc, out] = Promtool(text);
  EXPECT_EQ(rc, 0) << out << "\n" << text;
}
#endif

}  // namespace
}  // namespace aryl::daemon
