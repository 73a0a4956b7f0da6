// HttpServer: a tiny HTTP/1.0 server for Prometheus scrapes and JSON status.
//
// One background thread accepts connections on a TCP port, reads one GET
// request (at most 8 KiB, within 2 s), calls the handler and closes the
// connection. Anything else gets a 4xx; a slow or silent client is dropped
// after the read timeout, so no client can stall the server for long. Stop()
// (also the destructor) closes the socket and joins the thread within 200 ms.
//
// Thread safety: the handler runs on the server's thread; it must be
// thread-safe with respect to whatever it reads.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "aryl/result.h"

namespace aryl::daemon {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const std::string& path)>;

  // Listens on `address`:`port` ("127.0.0.1", "0.0.0.0"); port 0 picks a free one.
  static Result<std::unique_ptr<HttpServer>> Start(const std::string& address, int port,
                                                   Handler handler);
  ~HttpServer();
  void Stop();
  int port() const { return port_; }

 private:
  HttpServer() = default;
  void Loop();
  void Serve(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  Handler handler_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A blocking GET for tests and the CLI: returns the status code and body.
Result<std::pair<int, std::string>> HttpGet(const std::string& host, int port,
                                            const std::string& path, double timeout_s = 2.0);

}  // namespace aryl::daemon
