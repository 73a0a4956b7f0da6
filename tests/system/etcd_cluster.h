// EtcdCluster: a test fixture that runs a real etcd cluster (1 or 3 members) as
// child processes on 127.0.0.1, each with FreePort() client and peer ports (never
// 2379/2380: a system etcd may be there), its own data dir under one temp dir and
// a log file. Needs /usr/bin/etcd (Debian etcd-server); tests call Available() and
// GTEST_SKIP() with kMissing when it is not installed.
//
// Members are started with --heartbeat-interval 100 --election-timeout 1000 (etcd's
// defaults): loopback round trips are far below 100 ms, so a leader is elected and
// a dead leader replaced in about a second, which keeps kill/restart tests short.
// --max-txn-ops 10000 lets tests write large transactions. Each cluster has its own
// --initial-cluster-token, so members of two tests' clusters never join each other.
//
// Every wait is bounded: Start and Restart wait up to 20 s for /health, Kill up to
// 10 s for the process to be reaped. The destructor kills every member, prints the
// tail of each log when the current test failed, and removes the temp dir (kept when
// ARYL_KEEP_TEST_DIRS is set). Members die with the test process (PR_SET_PDEATHSIG).
//
// Not thread-safe: drive it from the test's thread.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "aryl/status.h"
#include "test_port.h"

extern char** environ;

namespace aryl::livetest {

class EtcdCluster {
 public:
  static constexpr const char* kEtcdBin = "/usr/bin/etcd";
  static constexpr const char* kMissing =
      "/usr/bin/etcd is not installed: apt-get install etcd-server etcd-client";
  static constexpr double kStartTimeout = 20.0;

  static bool Available() { return ::access(kEtcdBin, X_OK) == 0; }

  EtcdCluster() {
    static int counter = 0;
    std::random_device rd;
    tag_ = std::to_string(::getpid()) + "-" + std::to_string(++counter) + "-" +
           std::to_string(rd() % 100000);
    dir_ = std::filesystem::temp_directory_path() / ("aryl-etcd-" + tag_);
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  ~EtcdCluster() {
    for (int i = 0; i < size(); ++i) Kill(i);
    if (::testing::Test::HasFailure()) {
      for (int i = 0; i < size(); ++i)
        std::cerr << "--- etcd " << members_[i].name << " log (tail) ---\n" << Tail(Log(i), 30);
    }
    std::error_code ec;
    if (!std::getenv("ARYL_KEEP_TEST_DIRS")) std::filesystem::remove_all(dir_, ec);
  }

  // Starts n members (a new cluster) and waits until each answers /health true.
  Status Start(int n) {
    if (!members_.empty()) return Status::FailedPrecondition("EtcdCluster::Start called twice");
    if (n < 1 || n > 7)
      return Status::InvalidArgument("EtcdCluster::Start(" + std::to_string(n) +
                                     "): 1 to 7 members");
    if (!Available()) return Status::FailedPrecondition(kMissing);
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) return Status::IoError("create " + dir_.string() + ": " + ec.message());
    for (int i = 0; i < n; ++i) {
      Member m;
      m.name = "m" + std::to_string(i);
      m.client_port = FreePort();
      m.peer_port = FreePort();
      m.health_port = tls_.ca.empty() ? m.client_port : FreePort();
      m.data_dir = dir_ / (m.name + ".etcd");
      m.log = dir_ / (m.name + ".log");
      members_.push_back(std::move(m));
    }
    for (int i = 0; i < n; ++i) ARYL_RETURN_IF_ERROR(Spawn(i, "new"));
    for (int i = 0; i < n; ++i) ARYL_RETURN_IF_ERROR(WaitHealthy(i, kStartTimeout));
    return Status::Ok();
  }

  // Clients may also reach the members at `host` (an address of this machine,
  // e.g. a test bridge's, for a client in another network namespace); call
  // before Start.
  void AlsoListenOn(std::string host) { extra_host_ = std::move(host); }

  // Members serve TLS on their client ports with `cert`/`key` and accept only
  // clients whose certificate `ca` signed (etcd's --client-cert-auth); /health
  // is then read from a plain-HTTP metrics port of each member. Call before Start.
  struct Tls {
    std::string ca, cert, key;
  };
  void UseTls(Tls tls) { tls_ = std::move(tls); }

  int size() const { return int(members_.size()); }
  int client_port(int i) const { return members_[i].client_port; }
  std::string ClientUrl(int i) const {
    return (tls_.ca.empty() ? "http://127.0.0.1:" : "https://127.0.0.1:") + std::to_string(members_[i].client_port);
  }

  // "http://127.0.0.1:P1,http://127.0.0.1:P2,..."
  std::string ClientUrls() const {
    std::string out;
    for (int i = 0; i < size(); ++i) {
      if (i) out += ',';
      out += ClientUrl(i);
    }
    return out;
  }

  // "etcd://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/prefix" (or at `host`:
  // AlsoListenOn's).
  std::string EtcdUrl(const std::string& prefix, const std::string& host = "127.0.0.1") const {
    std::string out = "etcd://";
    for (int i = 0; i < size(); ++i) {
      if (i) out += ',';
      out += host + ":" + std::to_string(members_[i].client_port);
    }
    return out + "/" + (prefix.rfind('/', 0) == 0 ? prefix.substr(1) : prefix);
  }

  pid_t pid(int i) const { return members_[i].pid; }

  // SIGKILL and reap (bounded); the data dir stays for Restart.
  void Kill(int i) {
    Member& m = members_[i];
    if (m.pid <= 0) return;
    ::kill(m.pid, SIGKILL);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (::waitpid(m.pid, nullptr, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    m.pid = -1;
    m.paused = false;
  }

  // Starts a killed member again on its data dir and ports (--initial-cluster-state
  // existing). Waits until it answers HTTP; when a quorum of members then runs,
  // also until it answers /health true (that needs a leader).
  Status Restart(int i) {
    Kill(i);
    ARYL_RETURN_IF_ERROR(Spawn(i, "existing"));
    int running = 0;
    for (const Member& m : members_) running += m.pid > 0 && !m.paused;
    if (running > size() / 2) return WaitHealthy(i, kStartTimeout);
    return WaitAnswers(i, kStartTimeout);
  }

  // SIGSTOP, and back once every thread of the member has stopped: the stop
  // reaches each thread asynchronously, and on a busy machine one that runs
  // on another core can still answer a request sent after kill() returned.
  void Pause(int i) {
    if (members_[i].pid <= 0 || ::kill(members_[i].pid, SIGSTOP) != 0) return;
    members_[i].paused = true;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!AllThreadsStopped(members_[i].pid) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void Resume(int i) {
    if (members_[i].pid > 0 && ::kill(members_[i].pid, SIGCONT) == 0) members_[i].paused = false;
  }

  // Every thread of `pid` in state T (stopped) per /proc/<pid>/task/*/stat.
  static bool AllThreadsStopped(pid_t pid) {
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
      std::ifstream in(task.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      auto close = stat.rfind(')');
      if (close == std::string::npos || close + 2 >= stat.size()) continue;  // the thread ended
      if (stat[close + 2] != 'T' && stat[close + 2] != 't') return false;
    }
    return !ec;
  }

  std::string Log(int i) const {
    std::ifstream in(members_[i].log);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Compacts the store up to `revision` through the first running member (the
  // client library has no compaction call; tests need one to provoke OutOfRange).
  Status Compact(std::int64_t revision) {
    for (int i = 0; i < size(); ++i) {
      if (members_[i].pid <= 0 || members_[i].paused) continue;
      std::string body = "{\"revision\":\"" + std::to_string(revision) + "\",\"physical\":true}";
      auto [status, answer] =
          RawHttp(members_[i].client_port, "POST", "/v3/kv/compaction", body, 5.0);
      if (status == 200) return Status::Ok();
      return Status::Internal("compact to " + std::to_string(revision) + " on " + ClientUrl(i) +
                              ": HTTP " + std::to_string(status) + " " + answer);
    }
    return Status::Unavailable("compact: no member is running");
  }

  // The index of the member that is the raft leader, as a running member's
  // /v3/maintenance/status says ("leader" equal to its own header.member_id);
  // polled until one says so, -1 after timeout_s.
  int RaftLeader(double timeout_s) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    do {
      for (int i = 0; i < size(); ++i) {
        if (members_[i].pid <= 0 || members_[i].paused) continue;
        auto [status, body] = RawHttp(members_[i].client_port, "POST", "/v3/maintenance/status", "{}", 1.0);
        if (status != 200) continue;
        auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
        if (!j.is_object() || !j.contains("leader") || !j["header"].contains("member_id")) continue;
        if (j["header"]["member_id"] == j["leader"]) return i;  // 64-bit ids, written as strings
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (std::chrono::steady_clock::now() < deadline);
    return -1;
  }

  // Waits until member i answers GET /health with {"health":"true"}.
  Status WaitHealthy(int i, double timeout_s) {
    return WaitMember(i, timeout_s, "answer /health true", [&] {
      auto [status, body] = RawHttp(members_[i].health_port, "GET", "/health", "", 1.0);
      return status == 200 && body.find("\"health\":\"true\"") != std::string::npos;
    });
  }

 private:
  struct Member {
    std::string name;
    int client_port = 0, peer_port = 0;
    int health_port = 0;  // the client port, or with TLS a plain-HTTP metrics port
    std::filesystem::path data_dir, log;
    pid_t pid = -1;
    bool paused = false;
  };

  static std::string Tail(const std::string& text, int lines) {
    std::size_t pos = text.size();
    for (int n = 0; n <= lines && pos != std::string::npos && pos > 0; ++n)
      pos = text.rfind('\n', pos - 1);
    return pos == std::string::npos ? text : text.substr(pos + 1);
  }

  Status WaitAnswers(int i, double timeout_s) {
    return WaitMember(i, timeout_s, "answer HTTP", [&] {
      return RawHttp(members_[i].health_port, "GET", "/health", "", 1.0).first != 0;
    });
  }

  template <typename Pred>
  Status WaitMember(int i, double timeout_s, const char* what, Pred pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      Member& m = members_[i];
      int wstatus = 0;
      if (m.pid > 0 && ::waitpid(m.pid, &wstatus, WNOHANG) == m.pid) {
        m.pid = -1;
        return Status::Internal("etcd " + m.name + " exited (status " + std::to_string(wstatus) +
                                ") before it did " + what + "; log " + m.log.string() + ":\n" +
                                Tail(Log(i), 20));
      }
      if (pred()) return Status::Ok();
      if (std::chrono::steady_clock::now() >= deadline)
        return Status::Timeout("etcd " + m.name + " on " + ClientUrl(i) + " did not " + what +
                               " within " + std::to_string(timeout_s) + " s; log " +
                               m.log.string() + ":\n" + Tail(Log(i), 20));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  Status Spawn(int i, const char* cluster_state) {
    Member& m = members_[i];
    std::string initial_cluster;
    for (int k = 0; k < size(); ++k) {
      if (k) initial_cluster += ',';
      initial_cluster +=
          members_[k].name + "=http://127.0.0.1:" + std::to_string(members_[k].peer_port);
    }
    const std::string client = ClientUrl(i);
    const std::string peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
    // clang-format off
    std::vector<std::string> args = {
        kEtcdBin,
        "--name", m.name,
        "--data-dir", m.data_dir.string(),
        "--listen-client-urls",
        extra_host_.empty() ? client
                            : client + (tls_.ca.empty() ? ",http://" : ",https://") + extra_host_ + ":" +
                                  std::to_string(m.client_port),
        "--advertise-client-urls", client,
        "--listen-peer-urls", peer,
        "--initial-advertise-peer-urls", peer,
        "--initial-cluster", initial_cluster,
        "--initial-cluster-state", cluster_state,
        "--initial-cluster-token", "aryl-test-" + tag_,
        "--max-txn-ops", "10000",
        "--heartbeat-interval", "100",
        "--election-timeout", "1000",
        "--logger", "zap",
        "--log-outputs", "stderr"};
    // clang-format on
    if (!tls_.ca.empty())
      args.insert(args.end(), {"--cert-file", tls_.cert, "--key-file", tls_.key, "--client-cert-auth",
                               "--trusted-ca-file", tls_.ca, "--listen-metrics-urls",
                               "http://127.0.0.1:" + std::to_string(m.health_port)});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The environment without ETCD_* (etcd reads its flags from there too).
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "ETCD", 4) != 0) envp.push_back(*e);
    envp.push_back(nullptr);
    {
      std::ofstream(m.log, std::ios::app)
          << "=== aryl test: starting " << m.name << " (" << cluster_state << ") ===\n";
    }
    const std::string log = m.log.string();
    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) return Status::Internal(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {  // only async-signal-safe calls from here on
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      int null = ::open("/dev/null", O_RDONLY);
      if (fd < 0 || null < 0) ::_exit(125);
      ::dup2(null, 0);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(kEtcdBin, argv.data(), envp.data());
      ::_exit(127);
    }
    m.pid = pid;
    m.paused = false;
    return Status::Ok();
  }

  // One HTTP/1.0 exchange on loopback (HTTP/1.0: no chunked answer, the server
  // closes). {0, error} when there is no answer within timeout_s.
  static std::pair<int, std::string> RawHttp(int port, const std::string& method,
                                             const std::string& path, const std::string& body,
                                             double timeout_s) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    auto left_ms = [&] {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
      return int(std::max<long long>(0, ms));
    };
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return {0, "socket"};
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(std::uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS)
      return {0, "connect"};
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, left_ms()) != 1) return {0, "connect timeout"};
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return {0, std::strerror(err)};
    std::string req = method + " " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n";
    if (!body.empty())
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n";
    req += "\r\n" + body;
    std::size_t sent = 0;
    while (sent < req.size()) {
      ssize_t n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += std::size_t(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN) return {0, "send"};
      p = {fd, POLLOUT, 0};
      if (::poll(&p, 1, left_ms()) != 1) return {0, "send timeout"};
    }
    std::string answer;
    char buf[4096];
    for (;;) {
      p = {fd, POLLIN, 0};
      if (::poll(&p, 1, left_ms()) != 1) return {0, "read timeout"};
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EAGAIN) continue;
        return {0, "recv"};
      }
      answer.append(buf, std::size_t(n));
    }
    // "HTTP/1.0 200 OK\r\n...\r\n\r\nbody"
    int status = 0;
    if (answer.rfind("HTTP/1.", 0) == 0 && answer.size() > 12)
      status = std::atoi(answer.c_str() + 9);
    auto split = answer.find("\r\n\r\n");
    return {status, split == std::string::npos ? std::string() : answer.substr(split + 4)};
  }

  std::string tag_;
  std::string extra_host_;
  Tls tls_;
  std::filesystem::path dir_;
  std::vector<Member> members_;
};

}  // namespace aryl::livetest
