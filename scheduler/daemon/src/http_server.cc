#include "aryl/daemon/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace aryl::daemon {
namespace {

constexpr auto kTimeout = std::chrono::seconds(2);

// Why binding host:port fails, from a probe socket with the listener's options.
std::string BindError(const std::string& host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::strerror(errno);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  std::string why = "the address does not parse";
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1)
    why = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ? "a transient error" : std::strerror(errno);
  ::close(fd);
  return why;
}

}  // namespace

HttpServer::HttpServer() : server_(std::make_unique<httplib::Server>()) {}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address, int port,
                                                      Handler handler) {
  if (port < 0 || port > 65535) return Status::InvalidArgument("http port " + std::to_string(port) + " out of range");
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->handler_ = std::move(handler);
  httplib::Server& srv = *s->server_;
  srv.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  srv.set_read_timeout(kTimeout);
  srv.set_write_timeout(kTimeout);
  srv.set_keep_alive_timeout(2);
  srv.set_keep_alive_max_count(100);
  srv.set_payload_max_length(8192);
  // SO_REUSEADDR, not cpp-httplib's SO_REUSEPORT: a restart binds over its
  // own TIME_WAIT connections, and a second daemon on the port is refused
  // rather than handed half of the scrapes.
  srv.set_socket_options([](socket_t sock) {
    int one = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  HttpServer* raw = s.get();
  // GET routes also answer HEAD (cpp-httplib strips the body).
  srv.Get(".*", [raw](const httplib::Request& req, httplib::Response& res) {
    HttpResponse r;
    try {
      r = raw->handler_(req.path);
    } catch (const std::exception& e) {
      spdlog::error("http handler for {} failed: {}", req.path, e.what());
      r = {500, "text/plain; charset=utf-8", "internal error\n"};
    }
    res.status = r.status;
    res.set_content(r.body, r.content_type.c_str());
  });
  auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content("only GET and HEAD are supported\n", "text/plain; charset=utf-8");
  };
  srv.Post(".*", not_allowed);
  srv.Put(".*", not_allowed);
  srv.Delete(".*", not_allowed);
  srv.Patch(".*", not_allowed);
  std::string host = address == "*" ? "0.0.0.0" : address;
  if (port == 0) {
    s->port_ = srv.bind_to_any_port(host);
    if (s->port_ <= 0) return Status::IoError("bind http " + host + ":0 failed: " + BindError(host, 0));
  } else {
    if (!srv.bind_to_port(host, port))
      return Status::IoError("bind http " + host + ":" + std::to_string(port) + " failed: " + BindError(host, port));
    s->port_ = port;
  }
  s->thread_ = std::thread([raw] { raw->server_->listen_after_bind(); });
  // stop() before the loop runs would be lost: wait for it (bounded).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!srv.is_running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!srv.is_running()) return Status::Internal("http server on " + host + " did not start within 5 s");
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

Result<std::pair<int, std::string>> HttpGet(const std::string& host, int port, const std::string& path,
                                            double timeout_s) {
  httplib::Client cli(host, port);
  auto t = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(timeout_s));
  cli.set_connection_timeout(t);
  cli.set_read_timeout(t);
  cli.set_write_timeout(t);
  auto res = cli.Get(path);
  if (!res) {
    auto err = res.error();
    std::string what = "GET http://" + host + ":" + std::to_string(port) + path + ": " + httplib::to_string(err);
    if (err == httplib::Error::ConnectionTimeout || err == httplib::Error::Read) return Status::Timeout(what);
    return Status::Unavailable(what);
  }
  return std::make_pair(res->status, res->body);
}

}  // namespace aryl::daemon
