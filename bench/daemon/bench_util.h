// Small helpers of bench_daemon: latency summaries and reading the
// scheduler's process, state file and log from outside.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

inline double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Latencies {
  std::mutex mu;
  std::vector<double> ms;
  void Add(double v) {
    std::lock_guard<std::mutex> l(mu);
    ms.push_back(v);
  }
  std::string Summary() {
    std::lock_guard<std::mutex> l(mu);
    if (ms.empty()) return "n=0";
    // Which request was slowest (0 = the first): a first request on a new
    // connection also pays for the connection.
    const size_t slowest = static_cast<size_t>(std::max_element(ms.begin(), ms.end()) - ms.begin());
    auto v = ms;
    std::sort(v.begin(), v.end());
    auto q = [&](double f) { return v[std::min(v.size() - 1, static_cast<size_t>(f * v.size()))]; };
    char buf[200];
    std::snprintf(buf, sizeof buf, "n=%zu p50=%.2f ms p99=%.2f ms max=%.2f ms (request #%zu)", v.size(), q(0.5),
                  q(0.99), v.back(), slowest);
    return buf;
  }
};

inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

inline std::string ProcField(pid_t pid, const std::string& key) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) { auto v = line.substr(key.size() + 1); v.erase(0, v.find_first_not_of(" \t")); return v; }
  return "?";
}

inline long long Count(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  long long v = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

inline int CountInFile(const std::string& path, const std::string& needle) {
  std::ifstream f(path);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) n += line.find(needle) != std::string::npos;
  return n;
}

// The process's threads from /proc/PID/task/*/schedstat: seconds on a CPU and
// seconds runnable but waiting for one (the machine's load), summed, and of
// the thread that ran most (the server thread).
inline std::tuple<double, double, double, double> SchedStat(pid_t pid) {
  double cpu = 0, wait = 0, top_cpu = 0, top_wait = 0;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream f(e.path() / "schedstat");
    double run_ns = 0, wait_ns = 0;
    if (!(f >> run_ns >> wait_ns)) continue;
    cpu += run_ns / 1e9;
    wait += wait_ns / 1e9;
    if (run_ns / 1e9 > top_cpu) top_cpu = run_ns / 1e9, top_wait = wait_ns / 1e9;
  }
  return {cpu, wait, top_cpu, top_wait};
}

// The scheduler log's "replace lost workers" generations: how many, and how
// many of them on the placement the job's previous generation had.
inline std::pair<int, int> ReplaceGenerations(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::map<std::string, std::string> last;  // job -> placement
  int total = 0, same = 0;
  while (std::getline(f, line)) {
    auto j = line.find("] job ");
    auto g = line.find(": generation ");
    auto on = line.find(" on ", g == std::string::npos ? 0 : g);
    if (j == std::string::npos || g == std::string::npos || on == std::string::npos) continue;
    std::string job = line.substr(j + 6, line.find(' ', j + 6) - (j + 6));
    std::string placement = line.substr(on + 4, line.find(' ', on + 4) - (on + 4));
    if (line.find("(replace lost workers)") != std::string::npos) {
      ++total;
      same += last.count(job) && last[job] == placement;
    }
    last[job] = placement;
  }
  return {total, same};
}

// The core snapshots the scheduler logged ("core journal: N rows replaced by a
// snapshot of B bytes in X ms"): how many, and the slowest in ms.
inline std::pair<int, double> Snapshots(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  int n = 0;
  double worst = 0;
  while (std::getline(f, line)) {
    auto at = line.find("bytes in ");
    if (line.find("core journal: ") == std::string::npos || at == std::string::npos) continue;
    ++n;
    worst = std::max(worst, std::atof(line.c_str() + at + 9));
  }
  return {n, worst};
}

}  // namespace bench
