// Inference demand from a real Prometheus server (Debian's `prometheus`,
// started here on loopback with a temporary config and TSDB): it scrapes a
// small exporter of a synthetic request counter served by this test, and a real
// aryl-scheduler queries sum(rate(...)) through --inference-demand
// prometheus:... with real aryl-agent processes. A rise in the rate reclaims
// the loaned inference servers within the reclaim deadline; a fall offers them
// again, one at a time as the hysteresis allows; a dead Prometheus is counted
// as query errors and changes nothing. Skipped (with the reason) when the
// prometheus binary is not installed.
#include <atomic>
#include <cctype>
#include <fstream>
#include <functional>
#include <mutex>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aryl/daemon/cluster_series.h"
#include "aryl/daemon/http_server.h"
#include "live_cluster.h"
#include "scrape.h"
#include "prom_check.h"

namespace aryl::livetest {
namespace {

using daemon::HttpGet;
using daemon::HttpResponse;
using daemon::HttpServer;

// A counter that grows at `rate` per second, as an inference server's request count would.
class SyntheticExporter {
 public:
  void SetRate(double r) {
    std::lock_guard lock(mu_);
    Advance();
    rate_ = r;
  }
  std::string Text() {
    std::lock_guard lock(mu_);
    Advance();
    return "# HELP aryl_test_requests_total Synthetic inference requests served.\n"
           "# TYPE aryl_test_requests_total counter\n"
           "aryl_test_requests_total " + std::to_string(count_) + "\n";
  }

 private:
  void Advance() {
    auto now = Clock::now();
    count_ += rate_ * std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  std::mutex mu_;
  double rate_ = 0, count_ = 0;
  Clock::time_point last_ = Clock::now();
};

std::optional<std::string> Which(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');)
    if (!dir.empty() && ::access((fs::path(dir) / name).c_str(), X_OK) == 0) return (fs::path(dir) / name).string();
  return std::nullopt;
}

class PrometheusDemand : public LiveCluster {
 protected:
  // Counts of inference nodes by state, and the job's staying workers.
  struct View { int loaned = 0, reclaiming = 0, held = 0, workers = -1; };
  View Look(p::Client& c, p::JobId job) {
    View v;
    auto r = c.Call<p::NodesReply>(p::ListNodes{}, milliseconds(1000));
    if (r.ok())
      for (const auto& n : r->nodes) {
        if (n.pool != p::Pool::kInference) continue;
        v.loaned += n.state == p::NodeState::kLoaned;
        v.reclaiming += n.state == p::NodeState::kReclaiming;
        v.held += n.state == p::NodeState::kHeld || n.state == p::NodeState::kAvailable;
      }
    auto s = Status(c, job);
    if (s.ok()) v.workers = s->row.workers;
    return v;
  }
  // A scrape of the running cluster: the job's and the nodes' series, every
  // family the dashboard queries (but the pending-reclaim ones: none is
  // pending now), and promtool accepts it.
  void CheckScrape(p::JobId job) {
    // The series are published within 0.5 s of a change.
    const std::string js = "{job_id=\"" + std::to_string(job) + "\",name=\"sleep\"}";
    std::string text;
    EXPECT_TRUE(WaitFor([&] {
      auto got = HttpGet("127.0.0.1", http_port_, "/metrics", 3);
      text = got.ok() ? got->second : "";
      return text.find("aryl_job_workers" + js + " 3\n") != std::string::npos &&
             text.find("aryl_pool_gpus_busy{pool=\"inference\"} 2\n") != std::string::npos;
    }, 5)) << text;
    EXPECT_NE(text.find("aryl_job_workers" + js + " 3\n"), std::string::npos) << text;
    EXPECT_NE(text.find("aryl_job_preemptions_total" + js + " 0\n"), std::string::npos) << text;
    EXPECT_NE(text.find("aryl_node_gpus_loaned{node=\"i1\",pool=\"inference\"} 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("aryl_node_state{node=\"i1\",state=\"loaned\"} 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("aryl_pool_gpus_busy{pool=\"inference\"} 2\n"), std::string::npos) << text;
    EXPECT_NE(text.find("aryl_pool_gpus_busy{pool=\"training\"} 1\n"), std::string::npos) << text;
    for (const auto& name : promcheck::DashboardFamilies(ARYL_SOURCE_DIR)) {
      if (name == "aryl_pool_reclaim_min_slack_seconds") continue;
      if (name.rfind("aryl_queue_", 0) == 0) continue;  // with --queues only (teams_test scrapes them)
      EXPECT_NE(text.find("# TYPE " + name + " "), std::string::npos) << name << " is on the dashboard but not exported";
    }
    if (!promcheck::HavePromtool()) return;
    auto [rc, out] = promcheck::Promtool(text);
    EXPECT_EQ(rc, 0) << out << "\n" << text;
  }
};

// Prometheus's answer to one instant query (its HTTP API).
nlohmann::json PromQuery(int port, const std::string& expr) {
  std::string q;
  for (unsigned char c : expr) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-') q += static_cast<char>(c);
    else q += fmt::format("%{:02X}", c);
  }
  auto r = HttpGet("127.0.0.1", port, "/api/v1/query?query=" + q, 3);
  if (!r.ok() || r->first != 200) return nlohmann::json{{"status", "error"}, {"error", r.ok() ? r->second : r.status().ToString()}};
  return nlohmann::json::parse(r->second, nullptr, false);
}

// Scraped by a real Prometheus: a job's series keep the job's id as job_id
// beside Prometheus's own job label (no exported_job), and every query of the
// Grafana dashboard is valid PromQL that Prometheus evaluates.
void CheckDashboardQueries(int prom_port, p::JobId job) {
  nlohmann::json r;
  EXPECT_TRUE(WaitFor([&] {
    r = PromQuery(prom_port, "aryl_job_workers");
    return r.value("status", "") == "success" && !r["data"]["result"].empty();
  }, 10)) << r.dump();
  if (r["data"]["result"].empty()) return;
  const auto& labels = r["data"]["result"][0]["metric"];
  EXPECT_EQ(labels.value("job_id", ""), std::to_string(job)) << labels.dump();
  EXPECT_EQ(labels.value("job", ""), "aryl") << labels.dump();
  EXPECT_FALSE(labels.contains("exported_job")) << labels.dump();
  std::ifstream in(fs::path(ARYL_SOURCE_DIR) / "deploy/grafana/aryl-cluster.json");
  auto dashboard = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(dashboard.is_discarded());
  int queries = 0;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& x) {
    if (x.is_object()) {
      if (x.contains("expr") && x["expr"].is_string()) {
        std::string expr = x["expr"];
        for (auto at = expr.find("$__rate_interval"); at != std::string::npos; at = expr.find("$__rate_interval"))
          expr.replace(at, 16, "1m");
        auto answer = PromQuery(prom_port, expr);
        EXPECT_EQ(answer.value("status", ""), "success") << expr << ": " << answer.dump();
        ++queries;
      }
      for (const auto& [k, v] : x.items()) walk(v);
    } else if (x.is_array()) {
      for (const auto& v : x) walk(v);
    }
  };
  walk(dashboard);
  EXPECT_GE(queries, 25);
  // The per-job panels group by job_id: one series per job.
  auto per_job = PromQuery(prom_port, "max by (job_id, name) (aryl_job_workers)");
  ASSERT_EQ(per_job.value("status", ""), "success");
  EXPECT_EQ(per_job["data"]["result"].size(), 1u) << per_job.dump();
}

TEST_F(PrometheusDemand, RiseReclaimsWithinDeadlineFallOffers) {
  auto prometheus = Which("prometheus");
  if (!prometheus) GTEST_SKIP() << "prometheus is not installed (Debian package prometheus; ./dev installs it)";
  auto test_start = Clock::now();
  SyntheticExporter exporter;
  auto exp = HttpServer::Start("127.0.0.1", 0, [&](const std::string& path) -> HttpResponse {
    if (path != "/metrics") return {404, "text/plain", "not found\n"};
    return {200, "text/plain; version=0.0.4", exporter.Text()};
  });
  ASSERT_TRUE(exp.ok()) << exp.status();
  const int prom_port = FreePort();
  {
    std::ofstream cfg(dir_ / "prometheus.yml");
    cfg << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "scrape_configs:\n  - job_name: synthetic\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << (*exp)->port() << "']\n"
        << "  - job_name: aryl\n    static_configs:\n"  // the scheduler, as docs/operations.md scrapes it
        << "      - targets: ['127.0.0.1:" << http_port_ << "']\n";
  }
  agent::LaunchSpec ps;
  ps.argv = {*prometheus, "--config.file=" + (dir_ / "prometheus.yml").string(),
             "--storage.tsdb.path=" + (dir_ / "tsdb").string(),
             "--web.listen-address=127.0.0.1:" + std::to_string(prom_port), "--log.level=warn"};
  ps.stdout_path = (dir_ / "prometheus.log").string();
  auto prom_pid = launcher_.Launch(ps);
  ASSERT_TRUE(prom_pid.ok()) << prom_pid.status();
  ASSERT_TRUE(WaitFor([&] {
    auto r = HttpGet("127.0.0.1", prom_port, "/-/ready", 1);
    return r.ok() && r->first == 200;
  }, 20)) << Logs();

  // 10 requests/s per server; the reclaim deadline is 8 s.
  const double deadline = 8;
  StartScheduler({"--inference-demand",
                  "prometheus:http://127.0.0.1:" + std::to_string(prom_port) +
                      "?query=sum(rate(aryl_test_requests_total[4s]))",
                  "--demand-step", "0.5", "--demand-per-server", "10", "--demand-headroom", "0",
                  "--demand-hysteresis", "0.2", "--demand-hold", "2", "--demand-reclaim-deadline", "8",
                  // The reclaim's forced shrink holds the job's size for the
                  // resize dwell (sched/resize_rule.h) before the regrow below.
                  "--resize-dwell", "2"});
  StartAgent("t1", 1);
  StartAgent("i1", 1, "inference");
  StartAgent("i2", 1, "inference");
  auto c = Client();
  ASSERT_TRUE(c);
  ASSERT_TRUE(WaitAgents(*c, 3, 15)) << Logs();
  auto job = Submit(*c, {"sleep", "300"}, 0, 1, 3);
  ASSERT_TRUE(job.ok()) << job.status();

  // No requests: both inference servers are offered and the job grows onto them.
  ASSERT_TRUE(WaitFor([&] {
    auto v = Look(*c, *job);
    return v.loaned == 2 && v.workers == 3;
  }, 25)) << Logs();
  CheckScrape(*job);
  CheckDashboardQueries(prom_port, *job);

  // 25 requests/s need 3 servers (2 exist): both are reclaimed, and each is
  // empty before its deadline.
  exporter.SetRate(25);
  auto rise = Clock::now();
  ASSERT_TRUE(WaitFor([&] {
    auto v = Look(*c, *job);
    return v.loaned == 0 && v.reclaiming == 0 && v.held == 2 && v.workers == 1;
  }, 25)) << Logs();
  double back_after = std::chrono::duration<double>(Clock::now() - rise).count();
  // Seeing the rise takes a scrape (1 s), the rate window filling (4 s) and a
  // poll (0.5 s); the rest is the reclaim, bounded by its deadline.
  EXPECT_LT(back_after, deadline + 10);
  nlohmann::json st;  // /status is published within 0.5 s of a change
  ASSERT_TRUE(WaitFor([&] {
    auto status = HttpGet("127.0.0.1", http_port_, "/status", 3);
    if (status.ok()) st = nlohmann::json::parse(status->second, nullptr, false);
    return st.is_object() && st["reclaim_latency"]["count"].get<int>() >= 2;
  }, 5)) << st.dump();
  EXPECT_LT(st["reclaim_latency"]["max_seconds"].get<double>(), deadline) << st.dump();
  EXPECT_EQ(ScrapeValue(http_port_, "aryl_reclaims_late_total"), 0);
  EXPECT_EQ(ScrapeValue(http_port_, "aryl_reclaim_slack_seconds_bucket{le=\"0\"}"), 0);  // every reclaim had slack left
  EXPECT_EQ(ScrapeValue(http_port_, "aryl_demand_reclaims_total"), 2);
  std::printf("rate 0 -> 25/s: both servers back to inference %.1f s after the rise (deadline %.0f s after the "
              "scheduler saw it; longest reclaim %.2f s)\n",
              back_after, deadline, st["reclaim_latency"]["max_seconds"].get<double>());

  // 3 requests/s need 1 server: after the 2 s hold one is offered, and it
  // stays so (no flapping) while the rate holds.
  exporter.SetRate(3);
  auto fall = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return Look(*c, *job).loaned == 1; }, 20)) << Logs();
  double offered_after = std::chrono::duration<double>(Clock::now() - fall).count();
  ASSERT_TRUE(WaitFor([&] { return Look(*c, *job).workers == 2; }, 10)) << Logs();
  auto steady_until = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < steady_until) {
    auto v = Look(*c, *job);
    ASSERT_EQ(v.loaned, 1) << Logs();
    std::this_thread::sleep_for(milliseconds(200));
  }
  EXPECT_EQ(ScrapeValue(http_port_, "aryl_demand_reclaims_total"), 2);
  EXPECT_EQ(ScrapeValue(http_port_, "aryl_demand_offers_total"), 3);
  std::printf("rate 25 -> 3/s: one server offered %.1f s after the fall\n", offered_after);

  // Prometheus dies: queries fail and are counted, the scheduler serves on and
  // the pool stays as it was.
  double errors_before = ScrapeValue(http_port_, "aryl_demand_query_errors_total");
  Kill(*prom_pid);
  ASSERT_TRUE(WaitFor([&] { return ScrapeValue(http_port_, "aryl_demand_query_errors_total") >= errors_before + 2; }, 15))
      << Logs();
  auto v = Look(*c, *job);
  EXPECT_EQ(v.loaned, 1);
  EXPECT_EQ(v.workers, 2);
  EXPECT_NE(ReadFile(dir_ / "scheduler.log").find("inference demand: "), std::string::npos);
  // The job ends: its series are gone from the next scrape.
  p::CancelJob cancel;
  cancel.job = *job;
  ASSERT_TRUE(c->Call<p::Ok>(cancel, milliseconds(3000)).ok());
  ASSERT_TRUE(WaitFor([&] {
    auto got = HttpGet("127.0.0.1", http_port_, "/metrics", 3);
    return got.ok() && got->second.find("aryl_job_workers{") == std::string::npos;
  }, 15)) << Logs();
  double took = std::chrono::duration<double>(Clock::now() - test_start).count();
  std::printf("whole scenario: %.1f s\n", took);
  EXPECT_LT(took, 60);
}

}  // namespace
}  // namespace aryl::livetest
