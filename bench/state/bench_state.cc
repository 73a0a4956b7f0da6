// bench_state: the scheduler's durable state at scale, with the daemon's own
// code: the real daemon (Daemon::StartDriven: the binary's handlers, tick,
// journal, snapshots and StateStore) on virtual time, in this process, with
// --agents fake agents and --jobs submitted jobs, on SQLite (a file) or on
// etcd (one member on loopback, started here, as the HA tests do). Reports:
//  - the core journal's snapshots as the daemon logged them: time on the
//    serving thread (image + save) and off it (the encoding, helper thread);
//  - restart to serving: a new daemon on the same state (load + rebuild of the
//    core), until it answers a status request, in wall time and in CPU time
//    (the serving thread's and the process's: on a shared machine wall time
//    also counts others' work), and the daemon's own load / core times; with
//    SQLite also the
//    aryl-scheduler binary started on a copy of the file (--scheduler), until
//    it answers on its socket;
//  - the write rate: submissions a second (one transaction each) and, on
//    etcd, the store's etcd transactions a second.
//
//   bench_state --agents 10000 --slots 8 --jobs 100000 [--backend sqlite|etcd]
//               [--scheduler build/scheduler/aryl-scheduler] [--speed linear|learned]
//               [--etcd-members N]
// --etcd-members: the etcd cluster's size (1 to 7 members on loopback, each
// with its own data directory and fsyncs; the daemon's client knows them all).
// --speed learned: the daemon keeps a speed model of every job (its default;
// the bench's is linear, no models), which every snapshot saves too.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "aryl/daemon/state_store.h"
#include "aryl/protocol/transport.h"
#include "driven_cluster.h"
#include "etcd_cluster.h"
#include "state/etcd/etcd_client.h"
#include "state/etcd/etcd_state_store.h"
#include "test_port.h"

namespace {

using namespace aryl;
using namespace aryl::daemon;
using aryl::daemon::testing::DrivenCluster;
namespace p = aryl::protocol;
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// CPU seconds (user + system) of the calling thread, or of the whole process:
// on a shared machine wall time also counts the time others ran.
double CpuSeconds(int who) {
  rusage u{};
  getrusage(who, &u);
  auto s = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

// Keeps the daemon's "core journal: ..." lines (its snapshots) and its "state
// ...: N nodes" lines (a start: load and core rebuild) and drops the rest.
class SnapshotLines final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::string> lines;

 protected:
  void sink_it_(const spdlog::details::log_msg& m) override {
    std::string s(m.payload.data(), m.payload.size());
    if (s.rfind("core journal:", 0) == 0 || s.rfind("state ", 0) == 0) lines.push_back(s);
  }
  void flush_() override {}
};

struct Flags {
  int agents = 10000, slots = 8, jobs = 100000;
  std::string backend = "sqlite";
  std::string scheduler;  // the binary, for the restart of a real process (SQLite)
  std::string speed = "linear";
  int etcd_members = 1;
};

// The aryl-scheduler binary on a copy of the state file: seconds from its
// start until it answers a status request (at most 120 s; it is killed after).
double BinaryRestart(const std::string& binary, const std::string& state) {
  const int port = aryl::livetest::FreePort();
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  const std::string log = state + ".log";
  auto t0 = Clock::now();
  std::fflush(nullptr);  // the child must not print this process's buffered output again
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    dup2(fileno(stdout), 2);
    execl(binary.c_str(), binary.c_str(), "--endpoint", endpoint.c_str(), "--state", state.c_str(), "--http-port",
          "-1", "--insecure", static_cast<char*>(nullptr));
    _exit(127);
  }
  double answered = -1;
  {
    auto c = p::Client::Connect({.endpoint = endpoint});
    while (c.ok() && Since(t0) < 120) {
      if ((*c)->Call<p::StatusReply>(p::StatusRequest{}, std::chrono::milliseconds(200)).ok()) {
        answered = Since(t0);
        break;
      }
      if (waitpid(pid, nullptr, WNOHANG) == pid) {
        pid = -1;
        break;
      }
    }
  }
  if (pid > 0) {
    kill(pid, SIGTERM);
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
      gone = waitpid(pid, nullptr, WNOHANG) == pid;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!gone) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  if (answered < 0) std::fprintf(stderr, "bench_state: the binary did not answer (log: %s)\n", log.c_str());
  return answered;
}

int Run(const Flags& f) {
  auto lines = std::make_shared<SnapshotLines>();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("bench", lines));
  spdlog::set_level(spdlog::level::info);

  std::unique_ptr<aryl::livetest::EtcdCluster> etcd;
  std::shared_ptr<etcd::Client> client;
  std::string prefix;
  if (f.backend == "etcd") {
    if (!aryl::livetest::EtcdCluster::Available()) {
      std::fprintf(stderr, "bench_state: %s\n", aryl::livetest::EtcdCluster::kMissing);
      return 1;
    }
    etcd = std::make_unique<aryl::livetest::EtcdCluster>();
    if (Status st = etcd->Start(f.etcd_members); !st.ok()) {
      std::fprintf(stderr, "bench_state: etcd: %s\n", st.ToString().c_str());
      return 1;
    }
    auto url = etcd::ParseEtcdUrl(etcd->EtcdUrl("bench-state"));
    if (!url.ok()) return 1;
    prefix = url->prefix;
    etcd::ClientOptions o;
    o.endpoints = url->endpoints;
    o.request_timeout = 10;
    auto c = etcd::Client::Connect(o);
    if (!c.ok()) return 1;
    client = std::move(*c);
  } else if (f.backend != "sqlite") {
    std::fprintf(stderr, "bench_state: --backend sqlite|etcd\n");
    return 2;
  }
  EtcdStateStore* etcd_store = nullptr;  // the daemon's, while it lives
  std::string state_path;
  DrivenCluster::StoreOpener open = [&](const std::string& path) -> Result<std::unique_ptr<StateStore>> {
    state_path = path;
    if (!client) return StateStore::Open(path);
    EtcdStateStore::Options o;
    o.location = "etcd bench";
    o.prefix = prefix;
    o.term = 0;  // unfenced: one writer
    auto s = EtcdStateStore::Open(client, o);
    if (!s.ok()) return s.status();
    etcd_store = s->get();
    return std::unique_ptr<StateStore>(std::move(*s));
  };
  DaemonOptions opt = DrivenCluster::Defaults();
  opt.max_jobs_per_user = 0;
  opt.submit_rate_per_user = 0;
  opt.speed = f.speed;
  opt.agent_timeout = 1e6;  // virtual time stands still while we submit: nobody times out
  opt.agent_lease = 1e6 + 60;
  DrivenCluster c(opt, open);
  c.on_error = [](const std::string& what) { std::fprintf(stderr, "bench_state: %s\n", what.c_str()); };

  auto t = Clock::now();
  for (int i = 0; i < f.agents; ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "node-%05d", i);
    c.AddAgent(id, p::Pool::kTraining, f.slots);
  }
  const double register_s = Since(t);
  std::uint64_t txns0 = etcd_store ? etcd_store->transactions() : 0;
  std::mt19937 rng(42);
  const int sizes[] = {1, 1, 2, 2, 4, 8};
  t = Clock::now();
  int refused = 0;
  for (int i = 0; i < f.jobs; ++i) {
    p::SubmitJob s;
    s.min_workers = 1;
    s.max_workers = std::min(sizes[rng() % 6], f.slots);
    s.argv = {"/bin/true"};
    s.name = "bench-" + std::to_string(i);
    if (!c.Submit(s).ok() && ++refused < 5) std::fprintf(stderr, "bench_state: submit %d refused\n", i);
    if (i % 2000 == 1999) c.Run(DrivenCluster::kTick);  // a tick: rounds place what fits
  }
  const double submit_s = Since(t);
  std::uint64_t txns = etcd_store ? etcd_store->transactions() - txns0 : 0;
  t = Clock::now();
  c.Run(1.0);  // 20 ticks: the last rounds
  const double settle_s = Since(t);
  // A snapshot begun is saved a slice per tick: ticks until the last one
  // committed (each "begun" line has its "replaced" line), at most 120 s.
  auto in_flight = [&] {
    int begun = 0, done = 0;
    for (const auto& l : lines->lines) {
      begun += l.find(" begun (") != std::string::npos;
      done += l.find(" rows replaced by a snapshot") != std::string::npos;
    }
    return begun > done;
  };
  t = Clock::now();
  while (in_flight() && Since(t) < 120) c.Run(DrivenCluster::kTick);
  const double drain_s = Since(t);
  auto status = c.Call<p::StatusReply>(p::StatusRequest{});
  std::string summary = status.status().ToString();
  if (status.ok()) {
    auto sum = status->summary;
    for (const char* big : {"jobs", "nodes", "queues", "pools"}) sum.erase(big);  // the counts only
    summary = sum.dump();
  }

  std::printf("bench_state: %s%s, %d agents x %d slots, %d jobs (%d refused), speed %s\n", f.backend.c_str(),
              etcd ? (" (" + std::to_string(f.etcd_members) + " members)").c_str() : "", f.agents, f.slots, f.jobs,
              refused, f.speed.c_str());
  std::printf("  registrations %.1f s (%.0f a second); submissions %.1f s (%.0f a second)\n", register_s,
              f.agents / register_s, submit_s, f.jobs / submit_s);
  if (etcd_store)
    std::printf("  etcd transactions during the submissions %llu (%.0f a second)\n",
                static_cast<unsigned long long>(txns), txns / submit_s);
  std::printf("  20 more ticks %.1f s; then %.1f s of ticks until the snapshot in flight was committed\n", settle_s,
              drain_s);
  std::printf("  status: %s\n", summary.substr(0, 600).c_str());
  std::printf("  snapshots (as the daemon logged them):\n");
  for (const auto& l : lines->lines) std::printf("    %s\n", l.c_str());
  const size_t logged = lines->lines.size();

  // Restart to serving, in this process: the daemon goes and a new one loads
  // the same state (jobs, nodes, snapshot + journal tail) and rebuilds its core.
  t = Clock::now();
  const double cpu0 = CpuSeconds(RUSAGE_THREAD), proc0 = CpuSeconds(RUSAGE_SELF);
  c.RestartDaemon();
  const double restart_s = Since(t);
  auto again = c.Call<p::StatusReply>(p::StatusRequest{});
  const double answer_s = Since(t);
  const double cpu = CpuSeconds(RUSAGE_THREAD) - cpu0, proc = CpuSeconds(RUSAGE_SELF) - proc0;
  std::printf("  restart (new daemon on the same state, load + core rebuild) %.2f s; answering %.2f s (%s); "
              "CPU %.2f s on the serving thread, %.2f s in the process\n",
              restart_s, answer_s, again.ok() ? "ok" : again.status().ToString().c_str(), cpu, proc);
  for (size_t i = logged; i < lines->lines.size(); ++i) std::printf("    %s\n", lines->lines[i].c_str());
  if (client == nullptr && !state_path.empty()) {
    std::error_code ec;
    std::printf("  state file %.1f MB (+ WAL %.1f MB)\n", std::filesystem::file_size(state_path, ec) / 1e6,
                std::filesystem::file_size(state_path + "-wal", ec) / 1e6);
    if (!f.scheduler.empty()) {
      // A copy (the daemon here holds the file's lock), WAL included.
      std::string copy = state_path + ".copy";
      std::filesystem::copy_file(state_path, copy, std::filesystem::copy_options::overwrite_existing, ec);
      if (std::filesystem::exists(state_path + "-wal"))
        std::filesystem::copy_file(state_path + "-wal", copy + "-wal", std::filesystem::copy_options::overwrite_existing,
                                   ec);
      double s = BinaryRestart(f.scheduler, copy);
      std::printf("  aryl-scheduler started on a copy of the state file: answering after %.2f s\n", s);
      std::filesystem::remove(copy, ec);
      std::filesystem::remove(copy + "-wal", ec);
      std::filesystem::remove(copy + "-shm", ec);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_state: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--agents") f.agents = std::stoi(val());
      else if (a == "--slots") f.slots = std::stoi(val());
      else if (a == "--jobs") f.jobs = std::stoi(val());
      else if (a == "--backend") f.backend = val();
      else if (a == "--scheduler") f.scheduler = val();
      else if (a == "--speed") f.speed = val();
      else if (a == "--etcd-members") f.etcd_members = std::stoi(val());
      else {
        std::fprintf(stderr,
                     "usage: bench_state [--agents N] [--slots N] [--jobs N] [--backend sqlite|etcd] "
                     "[--scheduler PATH] [--speed linear|learned] [--etcd-members N]\n");
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "bench_state: bad value for %s\n", a.c_str());
      return 2;
    }
  }
  if (f.agents < 1 || f.slots < 1 || f.jobs < 0) return 2;
  if (f.speed != "linear" && f.speed != "learned") {
    std::fprintf(stderr, "bench_state: --speed: '%s' is neither linear nor learned\n", f.speed.c_str());
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  return Run(f);
}
