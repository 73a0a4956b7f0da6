// The two users of bench_daemon --flood (flood.h).
#include "flood.h"

#include <fcntl.h>
#include <grp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"
#include "bench_util.h"

namespace bench {

namespace p = aryl::protocol;
using namespace std::chrono;

pid_t SpawnAs(uid_t uid, const std::string& out_path, const std::vector<std::string>& args) {
  int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  std::vector<std::string> argv = {"/proc/self/exe"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) _exit(126);
    ::execv(cargv[0], cargv.data());
    _exit(127);
  }
  ::close(fd);
  return pid;
}

int FloodChild(const std::string& endpoint, long submits, int threads) {
  std::atomic<long> next{0}, accepted{0}, timeouts{0};
  std::mutex mu;
  std::map<std::string, long> refused;  // by status code
  auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      auto c = p::Client::Connect({.endpoint = endpoint});
      if (!c.ok()) return;
      for (long i; (i = next++) < submits;) {
        p::SubmitJob s;
        s.argv = {"/bin/true"};
        s.workers = 1;
        s.name = "flood-" + std::to_string(i);
        auto r = (*c)->Call<p::SubmitReply>(s, milliseconds(5000));
        if (r.ok()) {
          accepted++;
        } else if (r.status().IsTimeout()) {
          timeouts++;
        } else {
          std::lock_guard<std::mutex> l(mu);
          refused[std::string(aryl::Status::CodeName(r.status().code()))]++;
        }
      }
    });
  for (auto& t : ts) t.join();
  std::printf("flood: %ld submits in %.1f s by %d threads: accepted %ld, timeouts %ld", submits, Since(t0), threads,
              accepted.load(), timeouts.load());
  for (const auto& [code, n] : refused) std::printf(", refused %s %ld", code.c_str(), n);
  std::printf("\n");
  return 0;
}

int VictimChild(const std::string& endpoint, double seconds, double interval) {
  auto c = p::Client::Connect({.endpoint = endpoint});
  if (!c.ok()) return 1;
  Latencies list;
  long failed = 0;
  auto t0 = Clock::now();
  while (Since(t0) < seconds) {
    auto t = Clock::now();
    auto r = (*c)->Call<p::JobsReply>(p::ListJobs{}, milliseconds(5000));
    if (r.ok()) list.Add(Since(t) * 1e3);
    else failed++;
    std::this_thread::sleep_for(duration<double>(interval));
  }
  std::printf("victim: list_jobs %s, failed %ld\n", list.Summary().c_str(), failed);
  return 0;
}

}  // namespace bench
