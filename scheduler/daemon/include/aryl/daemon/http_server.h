// HttpServer: the daemon's HTTP endpoint (Prometheus /metrics, JSON /status,
// /healthz, /readyz) on cpp-httplib.
//
// A pool of threads serves connections concurrently, so slow or idle clients do
// not hold up a scrape: each connection gets read and write timeouts (2 s) and
// an idle keep-alive connection is closed after 2 s. Up to kThreads connections
// are served at once; beyond that, new ones wait for a free thread (at most the
// read timeout). GET and HEAD are served; a query string is ignored by the
// routing (the handler gets the path); other methods get 405. Stop() (also the
// destructor) stops accepting, and joins the threads.
//
// Bind it to loopback (the default) unless the network in front of it is
// trusted: it has no authentication (docs/security.md).
//
// Thread safety: the handler runs on the pool's threads, concurrently; it must be
// thread-safe with respect to whatever it reads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "aryl/result.h"

namespace httplib {
class Server;
}

namespace aryl::daemon {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  static constexpr int kThreads = 128;
  using Handler = std::function<HttpResponse(const std::string& path)>;

  // Listens on `address`:`port` ("127.0.0.1", "0.0.0.0"); port 0 picks a free one.
  static Result<std::unique_ptr<HttpServer>> Start(const std::string& address, int port,
                                                   Handler handler);
  ~HttpServer();
  void Stop();
  int port() const { return port_; }

 private:
  HttpServer();
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  Handler handler_;
  std::thread thread_;
};

// A blocking GET for tests and the CLI: returns the status code and body.
Result<std::pair<int, std::string>> HttpGet(const std::string& host, int port,
                                            const std::string& path, double timeout_s = 2.0);

}  // namespace aryl::daemon
