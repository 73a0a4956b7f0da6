// The inference-demand controller (pure: samples and a clock in, offers and
// reclaims out), the parsing of --inference-demand prometheus:... and of the
// Prometheus HTTP API's answers, and the poller against a real HTTP server.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "aryl/daemon/demand_control.h"
#include "aryl/daemon/http_server.h"
#include "aryl/daemon/prometheus_demand.h"

namespace aryl::daemon {
namespace {

DemandControlConfig Config(double per_server, int headroom, double hysteresis, double hold) {
  DemandControlConfig c;
  c.per_server = per_server;
  c.headroom = headroom;
  c.hysteresis = hysteresis;
  c.hold = hold;
  c.max_age = 10;
  return c;
}

// 4 inference servers, all loaned: a load of 25 at 10 per server needs 3, so 3 are reclaimed at once.
TEST(DemandController, RiseReclaimsAtOnce) {
  DemandController c(Config(10, 0, 0.5, 30));
  auto d = c.Decide(100, DemandSample{100, 25}, {4, 0, 0});
  EXPECT_EQ(d.required_up, 3);
  EXPECT_EQ(d.reclaim, 3);
  EXPECT_EQ(d.offer, 0);
}

// Headroom adds servers; the target never exceeds the pool.
TEST(DemandController, HeadroomAndClamp) {
  DemandController c(Config(10, 1, 0, 0));
  EXPECT_EQ(c.Decide(0, DemandSample{0, 25}, {4, 0, 0}).reclaim, 4);   // ceil(2.5) + 1
  EXPECT_EQ(c.Decide(0, DemandSample{0, 500}, {4, 1, 1}).reclaim, 3);  // clamped to 4 servers
  EXPECT_EQ(c.Decide(0, DemandSample{0, 30}, {4, 4, 4}).offer, 0);     // exactly 3 + 1: nothing to do
  EXPECT_EQ(c.Decide(0, DemandSample{0, -5}, {4, 4, 4}).offer, 3);     // a negative load counts as 0
  DemandController z(Config(10, 0, 0.2, 0));
  EXPECT_EQ(z.Decide(0, DemandSample{0, 0}, {4, 4, 4}).offer, 4);     // no load, no headroom: all offered
}

// A fall offers only after the lower target has lasted `hold` seconds, and
// only the servers whose reclaim is complete.
TEST(DemandController, FallOffersAfterHold) {
  DemandController c(Config(10, 0, 0.2, 30));
  InferencePool pool{4, 4, 4};
  EXPECT_EQ(c.Decide(0, DemandSample{0, 5}, pool).offer, 0);  // down = ceil(0.5 / 0.8) = 1 < 4: hold starts
  EXPECT_EQ(c.Decide(29, DemandSample{29, 5}, pool).offer, 0);
  auto d = c.Decide(30, DemandSample{30, 5}, pool);
  EXPECT_EQ(d.required_down, 1);
  EXPECT_EQ(d.offer, 3);
  pool.offerable = 1;  // two still being emptied by their reclaim
  EXPECT_EQ(c.Decide(31, DemandSample{31, 5}, pool).offer, 1);
}

// A load that wobbles across a boundary inside the hysteresis band never
// offers; one that dips shorter than the hold never offers either.
TEST(DemandController, NoFlapping) {
  DemandController c(Config(10, 0, 0.2, 5));
  InferencePool pool{4, 3, 3};  // 3 held: kept for loads above 16, reclaimed above 30
  for (int t = 0; t < 100; ++t) {
    double load = t % 2 ? 29.9 : 16.1;  // up <= 3, down = ceil(1.61 / 0.8) = 3
    auto d = c.Decide(t, DemandSample{double(t), load}, pool);
    EXPECT_EQ(d.offer, 0) << "t=" << t;
    EXPECT_EQ(d.reclaim, 0) << "t=" << t;
  }
  for (int t = 100; t < 200; ++t) {  // 4 s below (offerable), 1 s above, again and again
    double load = t % 5 == 4 ? 25 : 10;
    EXPECT_EQ(c.Decide(t, DemandSample{double(t), load}, pool).offer, 0) << "t=" << t;
  }
  EXPECT_EQ(c.Decide(200, DemandSample{200, 10}, pool).offer, 0);
  EXPECT_EQ(c.Decide(205, DemandSample{205, 10}, pool).offer, 1);  // 5 s below: 3 - ceil(1 / 0.8)
}

// No sample, a stale one, or an empty pool: nothing happens, and the hold restarts.
TEST(DemandController, NoUsableSampleHoldsStill) {
  DemandController c(Config(10, 0, 0, 5));
  InferencePool pool{2, 2, 2};
  EXPECT_EQ(c.Decide(0, std::nullopt, pool).required_up, -1);
  EXPECT_EQ(c.Decide(0, DemandSample{0, 0}, pool).offer, 0);  // hold starts at 0
  EXPECT_EQ(c.Decide(11, DemandSample{0, 0}, pool).offer, 0);  // 11 s old > max_age 10: ignored, hold reset
  EXPECT_EQ(c.Decide(12, DemandSample{12, 0}, pool).offer, 0);
  EXPECT_EQ(c.Decide(17, DemandSample{17, 0}, pool).offer, 2);
  EXPECT_EQ(c.Decide(18, DemandSample{18, 100}, {0, 0, 0}).reclaim, 0);
}

// Deterministic: the same samples give the same decisions.
TEST(DemandController, Deterministic) {
  auto run = [] {
    DemandController c(Config(7, 1, 0.3, 2));
    std::vector<int> out;
    InferencePool pool{6, 2, 2};
    for (int t = 0; t < 60; ++t) {
      auto d = c.Decide(t * 0.5, DemandSample{t * 0.5, double((t * 37) % 41)}, pool);
      pool.held = std::clamp(pool.held + d.reclaim - d.offer, 0, 6);
      pool.offerable = pool.held;
      out.push_back(d.reclaim * 100 + d.offer);
    }
    return out;
  };
  EXPECT_EQ(run(), run());
}

TEST(PrometheusDemandSpec, Parses) {
  auto s = ParsePrometheusDemandSpec("prometheus:http://127.0.0.1:9090?query=sum(rate(req_total[1m]))");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->host, "127.0.0.1");
  EXPECT_EQ(s->port, 9090);
  EXPECT_EQ(s->path_prefix, "");
  EXPECT_EQ(s->query, "sum(rate(req_total[1m]))");
  EXPECT_EQ(PrometheusQueryPath(*s), "/api/v1/query?query=sum%28rate%28req_total%5B1m%5D%29%29");
  s = ParsePrometheusDemandSpec("prometheus:http://prom.example/monitor/?query=up{job=\"a b\"}");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->port, 80);
  EXPECT_EQ(s->path_prefix, "/monitor");
  EXPECT_EQ(PrometheusQueryPath(*s), "/monitor/api/v1/query?query=up%7Bjob%3D%22a%20b%22%7D");
  s = ParsePrometheusDemandSpec("prometheus:http://[::1]:9091?query=x");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->host, "::1");
  EXPECT_EQ(s->port, 9091);
}

TEST(PrometheusDemandSpec, BadOnesSayWhy) {
  struct Case { const char* text; const char* says; };
  for (const Case& c : {Case{"prometheus:http://h:9090", "query="}, Case{"prometheus:http://h:9090?query=", "empty"},
                        Case{"prometheus:https://h:9090?query=x", "https"}, Case{"prometheus:h:9090?query=x", "http://"},
                        Case{"prometheus:http://:9090?query=x", "no host"}, Case{"prometheus:http://h:0?query=x", "port"},
                        Case{"prometheus:http://h:70000?query=x", "port"}, Case{"prometheus:http://h:9x?query=x", "port"},
                        Case{"prometheus:http://h:?query=x", "port"}, Case{"daily:peak=1", "prometheus:"}}) {
    auto s = ParsePrometheusDemandSpec(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.status().message().find(c.says), std::string::npos) << c.text << ": " << s.status();
  }
}

TEST(PrometheusQueryResponse, ValuesAndErrors) {
  auto v = ParsePrometheusQueryResponse(
      R"({"status":"success","data":{"resultType":"vector","result":[)"
      R"({"metric":{"i":"a"},"value":[1.5,"12.5"]},{"metric":{"i":"b"},"value":[1.5,"2"]}]}})");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_DOUBLE_EQ(*v, 14.5);
  v = ParsePrometheusQueryResponse(R"({"status":"success","data":{"resultType":"scalar","result":[1.5,"3"]}})");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_DOUBLE_EQ(*v, 3);
  struct Case { const char* body; const char* says; };
  for (const Case& c : {Case{R"({"status":"success","data":{"resultType":"vector","result":[]}})", "empty vector"},
                        Case{R"({"status":"error","errorType":"bad_data","error":"parse error"})", "parse error"},
                        Case{R"({"status":"success","data":{"resultType":"vector","result":[{"value":[1,"NaN"]}]}})", "NaN"},
                        Case{R"({"status":"success","data":{"resultType":"matrix","result":[]}})", "matrix"},
                        Case{R"({"status":"success","data":{"resultType":"scalar","result":[1,"12abc"]}})", "12abc"},
                        Case{"<html>", "not JSON"}, Case{"[1]", "not a JSON object"}}) {
    auto r = ParsePrometheusQueryResponse(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << c.body << ": " << r.status();
  }
}

// Against real HTTP servers: an answer, an HTTP 400 with Prometheus' error,
// and a port where nothing listens (refused fast, never past the timeout).
TEST(PrometheusQuery, RealHttp) {
  std::atomic<int> mode{0};
  auto srv = HttpServer::Start("127.0.0.1", 0, [&](const std::string& path) -> HttpResponse {
    if (path != "/api/v1/query") return {404, "text/plain", "no"};
    if (mode == 1) return {400, "application/json", R"({"status":"error","errorType":"bad_data","error":"bad query"})"};
    return {200, "application/json", R"({"status":"success","data":{"resultType":"scalar","result":[1,"42"]}})"};
  });
  ASSERT_TRUE(srv.ok()) << srv.status();
  PrometheusDemandSpec spec{"127.0.0.1", (*srv)->port(), "", "rate(x[1m])"};
  auto v = QueryPrometheus(spec, 2);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_DOUBLE_EQ(*v, 42);
  mode = 1;
  v = QueryPrometheus(spec, 2);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("HTTP 400: prometheus answered error: bad_data bad query"), std::string::npos)
      << v.status();
  int port = (*srv)->port();
  (*srv)->Stop();
  auto t0 = std::chrono::steady_clock::now();
  v = QueryPrometheus({"127.0.0.1", port, "", "x"}, 1);
  EXPECT_FALSE(v.ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5);
}

// The poller keeps the latest good sample, and counts the failures once the
// server is gone (it goes on polling; Latest keeps the last good sample).
TEST(PrometheusDemandPoller, PollsAndCountsErrors) {
  std::atomic<int> value{5};
  auto srv = HttpServer::Start("127.0.0.1", 0, [&](const std::string&) -> HttpResponse {
    return {200, "application/json",
            R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,")" +
                std::to_string(value.load()) + R"("]}]}})"};
  });
  ASSERT_TRUE(srv.ok()) << srv.status();
  Metrics m;
  m.DeclareCounter("aryl_demand_queries_total", "q");
  m.DeclareCounter("aryl_demand_query_errors_total", "e");
  m.DeclareGauge("aryl_demand_load", "l");
  ManualClock clock(1000);
  PrometheusDemandPoller poller({"127.0.0.1", (*srv)->port(), "", "x"}, 0.05, &m, &clock);
  auto wait = [](auto pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!pred() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return pred();
  };
  ASSERT_TRUE(wait([&] { return poller.Latest().has_value(); }));
  EXPECT_DOUBLE_EQ(poller.Latest()->load, 5);
  EXPECT_DOUBLE_EQ(poller.Latest()->time, 1000);
  value = 9;
  ASSERT_TRUE(wait([&] { return poller.Latest()->load == 9; }));
  EXPECT_DOUBLE_EQ(m.Value("aryl_demand_load"), 9);
  EXPECT_EQ(m.Value("aryl_demand_query_errors_total"), 0);
  (*srv)->Stop();
  ASSERT_TRUE(wait([&] { return m.Value("aryl_demand_query_errors_total") >= 2; }));
  EXPECT_DOUBLE_EQ(poller.Latest()->load, 9);
  EXPECT_GE(m.Value("aryl_demand_queries_total"), 4);
}

}  // namespace
}  // namespace aryl::daemon
