// The daemon's metrics through prometheus-cpp: label values escaped, build
// info and zero series present from the start, and the exposition accepted by
// `promtool check metrics` (Debian's prometheus package), both from the
// Metrics class and scraped from a real aryl-scheduler's /metrics, which also
// has every series deploy/grafana/aryl-cluster.json queries; the per-job,
// per-node and per-pool series (ClusterSeries) follow the live state, so their
// number does not grow with history, and escape names with `"` and `\`.
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
#include "aryl/daemon/cluster_series.h"
#include "aryl/daemon/http_server.h"
#include "aryl/daemon/metrics.h"
#include "aryl/protocol/messages.h"
#include "prom_check.h"

namespace aryl::daemon {
namespace {

namespace fs = std::filesystem;

using promcheck::HavePromtool;
using promcheck::Promtool;

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

// Lines of `text` that are samples of `family` (not its # HELP / # TYPE).
int SampleLines(const std::string& text, const std::string& family) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(family + "{", 0) == 0 || line.rfind(family + " ", 0) == 0) ++n;
  return n;
}

ClusterSnapshot Round(int i) {
  ClusterSnapshot s;
  // Two live jobs at a time; each round one finishes and a new one arrives.
  for (int id : {i, i + 1})
    s.jobs.push_back({static_cast<std::uint64_t>(id), "job-" + std::to_string(id), 2, 1.5, 0.2, 1, 3});
  // Nodes come and go too: one stays, one is replaced each round.
  s.nodes.push_back({"stays", "training", "available", 4, 2, false});
  s.nodes.push_back({"inf-" + std::to_string(i), "inference", i % 2 ? "loaned" : "reclaiming", 2, 1, i % 2 == 1});
  if (i % 2 == 0) s.reclaims.push_back({"inf-" + std::to_string(i), "inference", 4.5 - i});
  return s;
}

// Per-job, per-node and per-pool series follow the live state: after 500
// rounds of jobs finishing and nodes replaced there are exactly as many series
// as after one, and the finished ones are gone.
TEST(ClusterSeries, BoundedCardinality) {
  Metrics m;
  ClusterSeries series(m, {"available", "loaned", "reclaiming"});
  series.Publish(Round(0));
  std::string first = m.Render();
  std::map<std::string, std::size_t> counts;
  for (const auto& f : ClusterSeries::Families()) counts[f] = m.SeriesCount(f);
  EXPECT_EQ(counts["aryl_job_workers"], 2u);
  EXPECT_EQ(counts["aryl_node_state"], 6u);
  for (int i = 1; i <= 500; ++i) series.Publish(Round(i * 2));  // even rounds: one reclaim pending
  std::string last = m.Render();
  for (const auto& f : ClusterSeries::Families()) {
    EXPECT_EQ(m.SeriesCount(f), counts[f]) << f;
    EXPECT_EQ(SampleLines(last, f), SampleLines(first, f)) << f;
  }
  EXPECT_LT(std::abs(static_cast<long>(last.size()) - static_cast<long>(first.size())), 200) << last;
  EXPECT_EQ(last.find("job_id=\"0\""), std::string::npos);
  EXPECT_EQ(last.find("inf-0\""), std::string::npos);
  EXPECT_NE(last.find("aryl_job_workers{job_id=\"1001\",name=\"job-1001\"} 2"), std::string::npos) << last;
  EXPECT_NE(last.find("aryl_node_state{node=\"inf-1000\",state=\"reclaiming\"} 1"), std::string::npos) << last;
  EXPECT_NE(last.find("aryl_node_state{node=\"inf-1000\",state=\"loaned\"} 0"), std::string::npos) << last;
  EXPECT_NE(last.find("aryl_pool_reclaim_min_slack_seconds{pool=\"inference\"} -995.5"), std::string::npos) << last;
  // With nothing pending the slack series are gone; the pending count stays, at 0.
  series.Publish(Round(1));
  last = m.Render();
  EXPECT_EQ(SampleLines(last, "aryl_pool_reclaim_min_slack_seconds"), 0) << last;
  EXPECT_EQ(SampleLines(last, "aryl_reclaim_pending_slack_seconds"), 0) << last;
  EXPECT_NE(last.find("aryl_pool_reclaims_pending{pool=\"inference\"} 0"), std::string::npos) << last;
  // No live job, no node: only the pools' zero series are left.
  series.Publish({});
  last = m.Render();
  EXPECT_EQ(SampleLines(last, "aryl_job_workers") + SampleLines(last, "aryl_node_state"), 0) << last;
  EXPECT_EQ(SampleLines(last, "aryl_pool_gpus"), 2) << last;
}

// Before the first publication the pool series are there at 0; job and node
// names with `"` and `\` are escaped, and promtool accepts the result.
TEST(ClusterSeries, ZeroSeriesAndEscapedNames) {
  Metrics m;
  ClusterSeries series(m, {"available", "loaned"});
  std::string text = m.Render();
  for (const char* f : {"aryl_pool_gpus", "aryl_pool_gpus_busy", "aryl_pool_gpus_loaned", "aryl_pool_reclaims_pending"}) {
    EXPECT_NE(text.find(std::string(f) + "{pool=\"training\"} 0\n"), std::string::npos) << f << "\n" << text;
    EXPECT_NE(text.find(std::string(f) + "{pool=\"inference\"} 0\n"), std::string::npos) << f << "\n" << text;
  }
  // Families keyed by jobs or nodes have no sample yet, so no # TYPE line either.
  EXPECT_EQ(text.find("aryl_job_workers"), std::string::npos) << text;
  ClusterSnapshot s;
  s.jobs.push_back({7, "say \"hi\" \\ bye", 3, 2.5, 0.125, 2, 4});
  s.jobs.back().checkpoint_failures = 5;
  s.nodes.push_back({"rack\"1\\a", "inference", "loaned", 8, 6, true});
  s.reclaims.push_back({"rack\"1\\a", "inference", 3.25});
  series.Publish(s);
  text = m.Render();
  const std::string job = "{job_id=\"7\",name=\"say \\\"hi\\\" \\\\ bye\"}";
  EXPECT_NE(text.find("aryl_job_workers" + job + " 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_job_steps_per_second" + job + " 2.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_job_last_resize_pause_seconds" + job + " 0.125\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_job_preemptions_total" + job + " 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_job_checkpoint_failures_total" + job + " 5\n"), std::string::npos) << text;
  const std::string node = "node=\"rack\\\"1\\\\a\"";
  EXPECT_NE(text.find("aryl_node_gpus_busy{" + node + ",pool=\"inference\"} 6\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_node_gpus_loaned{" + node + ",pool=\"inference\"} 8\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_node_state{" + node + ",state=\"loaned\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_reclaim_pending_slack_seconds{" + node + ",pool=\"inference\"} 3.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_pool_gpus_loaned{pool=\"inference\"} 8\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_pool_reclaims_pending{pool=\"inference\"} 1\n"), std::string::npos) << text;
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
  s.argv = {ARYL_SCHEDULER_BIN, "--endpoint", "tcp://127.0.0.1:*", "--insecure", "--state", (dir / "state.db").string(),
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
  // Every series the Grafana dashboard queries is exported from the first
  // scrape, but those keyed by jobs or nodes (none yet; see
  // prometheus_demand_test.cc for a scrape of a running cluster).
  const auto& per_object = ClusterSeries::Families();
  auto names = promcheck::DashboardFamilies(ARYL_SOURCE_DIR);
  EXPECT_GT(names.size(), 20u);
  for (const auto& name : names) {
    bool zero_from_start = name.rfind("aryl_pool_", 0) == 0 && name != "aryl_pool_reclaim_min_slack_seconds";
    if (std::find(per_object.begin(), per_object.end(), name) != per_object.end() && !zero_from_start) continue;
    EXPECT_NE(text.find("# TYPE " + name + " "), std::string::npos) << name << " is on the dashboard but not exported";
  }
  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed (Debian: prometheus); format not checked";
  auto [rc, out] = Promtool(text);
  EXPECT_EQ(rc, 0) << out << "\n" << text;
}
#endif

// Every kind the scheduler writes to its event journal (the literal kind of
// each Journal(...) call in its sources) is one `aryl events --kind` accepts.
TEST(EventKinds, EveryKindTheSchedulerWritesIsListed) {
  const std::regex call(R"re(\bJournal\(\s*[^",;()]+(?:\([^()]*\))?,\s*"([a-z_]+)")re");
  int found = 0;
  for (const auto& e : fs::directory_iterator(fs::path(ARYL_SOURCE_DIR) / "scheduler/daemon/src")) {
    if (e.path().extension() != ".cc") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    for (std::sregex_iterator it(text.begin(), text.end(), call), end; it != end; ++it) {
      ++found;
      EXPECT_TRUE(protocol::IsEventKind((*it)[1].str())) << (*it)[1] << " in " << e.path().filename();
    }
  }
  EXPECT_GE(found, 15) << "the pattern no longer matches the scheduler's Journal calls";
}

}  // namespace
}  // namespace aryl::daemon
