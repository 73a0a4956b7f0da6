#include "aryl/daemon/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <spdlog/spdlog.h>

namespace aryl::daemon {
namespace {

constexpr size_t kMaxRequest = 8192;
constexpr int kReadTimeoutMs = 2000;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Writes all of `data` or gives up after `timeout_ms` total.
bool WriteAll(int fd, const std::string& data, int timeout_ms) {
  size_t off = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (off < data.size()) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, left) <= 0) return false;
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 500: return "Internal Server Error";
    default: return "Unknown";
  }
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address, int port,
                                                      Handler handler) {
  if (port < 0 || port > 65535) return Status::InvalidArgument("http port " + std::to_string(port) + " out of range");
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->handler_ = std::move(handler);
  s->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s->listen_fd_ < 0) return Status::IoError(Errno("socket"));
  int one = 1;
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string host = address == "*" ? "0.0.0.0" : address;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("http address '" + address + "' is not an IPv4 address");
  }
  if (::bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    return Status::IoError(Errno("bind http " + host + ":" + std::to_string(port)));
  }
  if (::listen(s->listen_fd_, 64) < 0) return Status::IoError(Errno("listen"));
  socklen_t len = sizeof(addr);
  getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  s->port_ = ntohs(addr.sin_port);
  s->thread_ = std::thread([srv = s.get()] { srv->Loop(); });
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

void HttpServer::Loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    int r = poll(&p, 1, 200);
    if (r <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    Serve(fd);
    ::close(fd);
  }
}

void HttpServer::Serve(int fd) {
  std::string req;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReadTimeoutMs);
  HttpResponse resp;
  bool have_request = false;
  while (!stop_) {
    if (req.find("\r\n\r\n") != std::string::npos || req.find("\n\n") != std::string::npos) {
      have_request = true;
      break;
    }
    if (req.size() > kMaxRequest) {
      resp = {413, "text/plain; charset=utf-8", "request too large\n"};
      break;
    }
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0) {
      resp = {408, "text/plain; charset=utf-8", "request timeout\n"};
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, std::min(left, 200)) <= 0) continue;
    char buf[2048];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return;  // peer closed
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return;
    }
    req.append(buf, static_cast<size_t>(n));
  }
  if (stop_) return;
  if (have_request) {
    auto line_end = req.find_first_of("\r\n");
    std::string line = req.substr(0, line_end);
    auto sp1 = line.find(' ');
    auto sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
      resp = {400, "text/plain; charset=utf-8", "malformed request line\n"};
    } else if (line.substr(0, sp1) != "GET") {
      resp = {405, "text/plain; charset=utf-8", "only GET is supported\n"};
    } else {
      std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
      try {
        resp = handler_(path);
      } catch (const std::exception& e) {
        spdlog::error("http handler for {} failed: {}", path, e.what());
        resp = {500, "text/plain; charset=utf-8", "internal error\n"};
      }
    }
  }
  std::string out = "HTTP/1.0 " + std::to_string(resp.status) + " " + Reason(resp.status) +
                    "\r\nContent-Type: " + resp.content_type +
                    "\r\nContent-Length: " + std::to_string(resp.body.size()) +
                    "\r\nConnection: close\r\n\r\n" + resp.body;
  WriteAll(fd, out, kReadTimeoutMs);
}

Result<std::pair<int, std::string>> HttpGet(const std::string& host, int port, const std::string& path,
                                            double timeout_s) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::IoError(Errno("socket"));
  struct Closer { int fd; ~Closer() { ::close(fd); } } closer{fd};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("'" + host + "' is not an IPv4 address");
  }
  int timeout_ms = static_cast<int>(timeout_s * 1000);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0 && errno != EINPROGRESS) {
    return Status::Unavailable(Errno("connect " + host + ":" + std::to_string(port)));
  }
  pollfd p{fd, POLLOUT, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return Status::Timeout("connect " + host + ":" + std::to_string(port));
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    errno = err;
    return Status::Unavailable(Errno("connect " + host + ":" + std::to_string(port)));
  }
  if (!WriteAll(fd, "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n", timeout_ms)) {
    return Status::IoError("send request to " + host);
  }
  std::string resp;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0) return Status::Timeout("read response from " + host);
    pollfd q{fd, POLLIN, 0};
    if (poll(&q, 1, left) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::IoError(Errno("recv"));
    }
    resp.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  if (std::sscanf(resp.c_str(), "HTTP/%*s %d", &status) != 1) return Status::IoError("malformed HTTP response");
  auto body = resp.find("\r\n\r\n");
  return std::make_pair(status, body == std::string::npos ? std::string() : resp.substr(body + 4));
}

}  // namespace aryl::daemon
