// The metrics/status HTTP server, exercised with raw sockets.
#include "aryl/daemon/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "aryl/daemon/metrics.h"

namespace aryl::daemon {
namespace {

int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string Exchange(int port, const std::string& request) {
  int fd = Connect(port);
  if (fd < 0) return "";
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, n);
  ::close(fd);
  return out;
}

HttpResponse Handle(const std::string& path) {
  if (path == "/metrics") return {200, "text/plain; version=0.0.4", "aryl_up 1\n"};
  if (path == "/status") return {200, "application/json", R"({"ok":true})"};
  return {404, "text/plain", "not found\n"};
}

// GET of /metrics and /status answers with the handler's body; a query
// string does not change the route; HEAD answers without a body.
TEST(HttpServerTest, ServesPaths) {
  auto s = HttpServer::Start("127.0.0.1", 0, Handle);
  ASSERT_TRUE(s.ok()) << s.status();
  int port = (*s)->port();
  std::string r = Exchange(port, "GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("aryl_up 1"), std::string::npos);
  r = Exchange(port, "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_EQ(r.find("aryl_up 1"), std::string::npos) << r;
  auto g = HttpGet("127.0.0.1", port, "/status");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->first, 200);
  EXPECT_EQ(g->second, R"({"ok":true})");
  g = HttpGet("127.0.0.1", port, "/nope");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->first, 404);
}

// Garbage, wrong methods, oversize requests and silent clients get an error and never stall others.
TEST(HttpServerTest, BadRequests) {
  auto s = HttpServer::Start("127.0.0.1", 0, Handle);
  ASSERT_TRUE(s.ok());
  int port = (*s)->port();
  EXPECT_NE(Exchange(port, "garbage\r\n\r\n").find(" 400 "), std::string::npos);
  EXPECT_NE(Exchange(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").find(" 405 "),
            std::string::npos);
  EXPECT_NE(Exchange(port, "GET /" + std::string(20000, 'A') + " HTTP/1.1\r\n\r\n").find(" 414 "), std::string::npos);
  // A client that connects and says nothing is dropped after the read timeout.
  int silent = Connect(port);
  ASSERT_GE(silent, 0);
  auto t0 = std::chrono::steady_clock::now();
  auto g = HttpGet("127.0.0.1", port, "/metrics", 5.0);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->first, 200);
  EXPECT_LT(took, 4.0);
  ::close(silent);
}

// Stop returns promptly.
TEST(HttpServerTest, StopsPromptly) {
  auto s = HttpServer::Start("127.0.0.1", 0, Handle);
  ASSERT_TRUE(s.ok());
  auto t0 = std::chrono::steady_clock::now();
  (*s)->Stop();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_FALSE(HttpGet("127.0.0.1", (*s)->port(), "/metrics", 0.5).ok());
}

// A second server on a port in use is refused and says why; once the first
// stops after serving (its side holds TIME_WAIT connections), the port binds
// again at once, as a restarted daemon needs.
TEST(HttpServerTest, PortInUseRefusedAndRebindsAfterStop) {
  auto first = HttpServer::Start("127.0.0.1", 0, Handle);
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  auto second = HttpServer::Start("127.0.0.1", port, Handle);
  ASSERT_FALSE(second.ok()) << "two servers share port " << port;
  EXPECT_NE(second.status().ToString().find("Address already in use"), std::string::npos) << second.status();
  for (int i = 0; i < 3; ++i) EXPECT_NE(Exchange(port, "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n"), "");
  (*first)->Stop();
  first->reset();
  auto again = HttpServer::Start("127.0.0.1", port, Handle);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(HttpGet("127.0.0.1", port, "/metrics", 2.0).ok());
}

// Prometheus text format for counters, labelled gauges and histograms.
TEST(MetricsTest, Render) {
  Metrics m;
  m.DeclareCounter("aryl_rescales_total", "Rescales executed");
  m.DeclareGauge("aryl_jobs", "Jobs by state");
  m.DeclareHistogram("aryl_round_seconds", "Scheduling round time", {0.001, 0.01, 0.1});
  m.Inc("aryl_rescales_total");
  m.Inc("aryl_rescales_total");
  m.Set("aryl_jobs", "state=\"running\"", 3);
  m.Observe("aryl_round_seconds", 0.005);
  m.Observe("aryl_round_seconds", 0.5);
  std::string text = m.Render();
  EXPECT_NE(text.find("# TYPE aryl_rescales_total counter\naryl_rescales_total 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aryl_jobs{state=\"running\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("aryl_round_seconds_bucket{le=\"0.001\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("aryl_round_seconds_bucket{le=\"0.01\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("aryl_round_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("aryl_round_seconds_count 2\n"), std::string::npos);
  EXPECT_DOUBLE_EQ(m.Histogram("aryl_round_seconds").max, 0.5);
}

}  // namespace
}  // namespace aryl::daemon
