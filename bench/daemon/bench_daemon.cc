// bench_daemon: scale of one head node. Starts a real aryl-scheduler process
// on loopback and drives it with many fake agents in this one process: each is
// a protocol::Client DEALER with its agent id, registers, heartbeats at the
// interval the scheduler tells it, answers StartWorkers by pretending to run
// the workers (each reports WorkerExited, exit 0, no runtime, after a
// simulated duration), answers StopWorkers with a SIGTERM exit, keeps exits
// until WorkerExitAck, and registers again when the scheduler says so. A
// client thread submits jobs and measures request/reply latency.
//
// Agents join spread over the submission phase, so registrations happen at
// every history length; `--probe` more join after the last submission, at the
// longest history. Bounded by --duration; prints one report (see
// docs/performance.md).
//
//   bench_daemon --scheduler build/scheduler/aryl-scheduler --agents 200 --slots 4 --jobs 2000
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"

namespace p = aryl::protocol;
using namespace std::chrono;
using Clock = steady_clock;

namespace {

struct Options {
  std::string scheduler = "build/scheduler/aryl-scheduler";
  int agents = 200, slots = 4, jobs = 2000, probe = 10, threads = 2;
  double submit_seconds = 60;  // jobs and agent joins are spread over this
  double duration = 120;       // the whole run, at most
  double work_seconds = 20;    // mean simulated worker duration
  double heartbeat = 0.5, agent_timeout = 3;
  bool keep = false;
  std::string cluster_id = "default";  // the scheduler's --cluster-id
};

double Since(Clock::time_point t0) { return duration<double>(Clock::now() - t0).count(); }

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
    auto v = ms;
    std::sort(v.begin(), v.end());
    auto q = [&](double f) { return v[std::min(v.size() - 1, static_cast<size_t>(f * v.size()))]; };
    char buf[160];
    std::snprintf(buf, sizeof buf, "n=%zu p50=%.2f ms p99=%.2f ms max=%.2f ms", v.size(), q(0.5), q(0.99), v.back());
    return buf;
  }
};

struct SimWorker {
  p::RunningWorker rw;
  Clock::time_point end;
};

struct Agent {
  std::string id;
  std::unique_ptr<p::Client> client;
  // 0: waiting to (re)register (the registration thread owns it), 2: active (its shard owns it).
  std::atomic<int> state{0};
  Clock::time_point join_at;
  double heartbeat = 0.5;
  Clock::time_point next_hb;
  std::uint64_t seq = 0;
  std::map<std::pair<p::JobId, p::WorkerId>, SimWorker> workers;
  std::vector<p::WorkerExited> unacked;
  bool probe = false;
};

struct Counters {
  std::atomic<long> declared_dead{0}, reregistrations{0}, register_errors{0}, starts{0}, stops{0}, exits{0},
      acks{0}, submitted{0}, submit_errors{0}, send_errors{0};
  std::atomic<long> max_hb_late_us{0};
};

int FreePort() {
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

std::string ProcField(pid_t pid, const std::string& key) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) { auto v = line.substr(key.size() + 1); v.erase(0, v.find_first_not_of(" \t")); return v; }
  return "?";
}

long long Count(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  long long v = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

int CountInFile(const std::string& path, const std::string& needle) {
  std::ifstream f(path);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) n += line.find(needle) != std::string::npos;
  return n;
}

class Bench {
 public:
  explicit Bench(Options o) : opt_(std::move(o)) {}
  int Run();

 private:
  void Register(Agent& a, bool again);
  void RegistrationLoop();
  void ShardLoop(int shard);
  void Serve(Agent& a, Clock::time_point now);
  void SubmitLoop();
  void Exit(Agent& a, const p::RunningWorker& rw, std::optional<int> code, std::optional<int> sig);

  Options opt_;
  std::string endpoint_;
  Clock::time_point t0_;
  std::atomic<bool> stop_{false}, submissions_done_{false};
  std::vector<std::unique_ptr<Agent>> agents_;
  std::mutex again_mu_;
  std::mutex job_end_mu_;
  std::map<p::JobId, Clock::time_point> job_end_;
  std::vector<Agent*> again_;
  Counters c_;
  Latencies reg_, reg_probe_, reg_again_, submit_, status_;
  std::atomic<long long> journal_rows_{0};
  // (journal rows at the time, registration ms) for first registrations.
  std::mutex cost_mu_;
  std::vector<std::pair<long long, double>> cost_;
};

void Bench::Register(Agent& a, bool again) {
  p::AgentRegister m;
  m.agent_id = a.id;
  m.host = "127.0.0.1";
  m.gpu_type = "A100";
  m.cluster_id = opt_.cluster_id;
  m.slots = opt_.slots;
  for (const auto& [k, w] : a.workers) m.workers.push_back(w.rw);
  m.exited = a.unacked;
  auto t = Clock::now();
  auto r = a.client->Call<p::AgentRegistered>(m, milliseconds(30000));
  double ms = Since(t) * 1e3;
  if (!r.ok()) {
    c_.register_errors++;
    std::fprintf(stderr, "register %s: %s\n", a.id.c_str(), r.status().ToString().c_str());
    std::lock_guard<std::mutex> l(again_mu_);
    again_.push_back(&a);
    return;
  }
  if (again) {
    reg_again_.Add(ms);
  } else {
    (a.probe ? reg_probe_ : reg_).Add(ms);
    std::lock_guard<std::mutex> l(cost_mu_);
    cost_.push_back({journal_rows_.load(), ms});
  }
  a.unacked.clear();  // the registration handled them (acks follow as pushes too)
  a.heartbeat = r->heartbeat_interval_seconds;
  a.next_hb = Clock::now() + duration_cast<Clock::duration>(duration<double>(a.heartbeat));
  a.state.store(2, std::memory_order_release);
}

void Bench::RegistrationLoop() {
  size_t next = 0;
  while (!stop_) {
    std::vector<Agent*> again;
    {
      std::lock_guard<std::mutex> l(again_mu_);
      again.swap(again_);
    }
    for (Agent* a : again) {
      c_.reregistrations++;
      Register(*a, true);
    }
    bool did = false;
    while (next < agents_.size() && !stop_) {
      Agent& a = *agents_[next];
      if (a.probe ? !submissions_done_.load() : Clock::now() < a.join_at) break;
      Register(a, false);
      next++;
      did = true;
    }
    if (!did && again.empty()) std::this_thread::sleep_for(milliseconds(5));
  }
}

void Bench::Exit(Agent& a, const p::RunningWorker& rw, std::optional<int> code, std::optional<int> sig) {
  p::WorkerExited ex;
  ex.agent_id = a.id;
  ex.job = rw.job;
  ex.worker = rw.worker;
  ex.generation = rw.generation;
  if (code) ex.exit_code = *code;
  if (sig) ex.signal = *sig;
  ex.outcome = "";
  ex.runtime = false;
  a.unacked.push_back(ex);
  c_.exits++;
  if (!a.client->Send(ex, milliseconds(1000)).ok()) c_.send_errors++;
}

void Bench::Serve(Agent& a, Clock::time_point now) {
  thread_local std::mt19937 rng(7);
  for (;;) {
    auto m = a.client->Receive(milliseconds(0));
    if (!m.ok()) break;
    if (auto* sw = std::get_if<p::StartWorkers>(&*m)) {
      c_.starts++;
      // Every worker of a job finishes at the same moment (synchronous data
      // parallelism: all ranks reach the last step together).
      Clock::time_point end;
      {
        std::lock_guard<std::mutex> l(job_end_mu_);
        auto [it, fresh] = job_end_.try_emplace(sw->job);
        if (fresh) {
          std::exponential_distribution<double> d(1.0 / opt_.work_seconds);
          it->second = now + duration_cast<Clock::duration>(duration<double>(1.0 + d(rng)));
        }
        end = std::max(it->second, now + milliseconds(500));
      }
      for (const auto& w : sw->workers) {
        SimWorker s;
        s.rw = {sw->job, w.worker, sw->generation, w.rank, w.local_slot, 1000 + w.worker};
        s.end = end;
        a.workers[{sw->job, w.worker}] = s;
      }
    } else if (auto* st = std::get_if<p::StopWorkers>(&*m)) {
      c_.stops++;
      std::vector<p::RunningWorker> gone;
      for (const auto& [k, w] : a.workers)
        if (k.first == st->job &&
            (st->workers.empty() || std::count(st->workers.begin(), st->workers.end(), k.second)))
          gone.push_back(w.rw);
      for (const auto& rw : gone) {
        a.workers.erase({rw.job, rw.worker});
        Exit(a, rw, std::nullopt, st->grace_seconds == 0 ? SIGKILL : SIGTERM);
      }
    } else if (auto* ack = std::get_if<p::WorkerExitAck>(&*m)) {
      c_.acks++;
      std::erase_if(a.unacked, [&](const p::WorkerExited& e) { return e.job == ack->job && e.worker == ack->worker; });
    } else if (auto* err = std::get_if<p::Error>(&*m)) {
      if (err->message.find("register again") != std::string::npos) {
        c_.declared_dead++;
        a.state.store(0, std::memory_order_release);
        std::lock_guard<std::mutex> l(again_mu_);
        again_.push_back(&a);
        return;
      }
    }
  }
  std::vector<p::RunningWorker> done;
  for (const auto& [k, w] : a.workers)
    if (w.end <= now) done.push_back(w.rw);
  for (const auto& rw : done) {
    a.workers.erase({rw.job, rw.worker});
    Exit(a, rw, 0, std::nullopt);
  }
  if (now >= a.next_hb) {
    long late = duration_cast<microseconds>(now - a.next_hb).count();
    long prev = c_.max_hb_late_us.load();
    while (late > prev && !c_.max_hb_late_us.compare_exchange_weak(prev, late)) {
    }
    p::Heartbeat hb;
    hb.agent_id = a.id;
    hb.seq = ++a.seq;
    hb.free_slots = std::max<std::int64_t>(0, opt_.slots - static_cast<std::int64_t>(a.workers.size()));
    for (const auto& [k, w] : a.workers) hb.workers.push_back(w.rw);
    if (!a.client->Send(hb, milliseconds(1000)).ok()) c_.send_errors++;
    a.next_hb = now + duration_cast<Clock::duration>(duration<double>(a.heartbeat));
  }
}

void Bench::ShardLoop(int shard) {
  while (!stop_) {
    auto now = Clock::now();
    for (size_t i = shard; i < agents_.size(); i += opt_.threads) {
      Agent& a = *agents_[i];
      if (a.state.load(std::memory_order_acquire) == 2) Serve(a, now);
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
}

void Bench::SubmitLoop() {
  auto client = p::Client::Connect({.endpoint = endpoint_});
  if (!client.ok()) return;
  std::mt19937 rng(42);
  const int sizes[] = {1, 1, 2, 2, 4, 8};
  auto next_status = Clock::now();
  for (int i = 0; i < opt_.jobs && !stop_; ++i) {
    auto due = t0_ + duration_cast<Clock::duration>(duration<double>(opt_.submit_seconds * i / opt_.jobs));
    while (Clock::now() < due && !stop_) {
      if (Clock::now() >= next_status) {
        auto t = Clock::now();
        auto r = (*client)->Call<p::StatusReply>(p::StatusRequest{}, milliseconds(30000));
        if (r.ok()) status_.Add(Since(t) * 1e3);
        next_status = Clock::now() + milliseconds(1000);
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
    p::SubmitJob s;
    int w = std::min(sizes[rng() % 6], opt_.slots * 2);
    s.min_workers = 1;
    s.max_workers = w;
    s.argv = {"/bin/true"};
    s.name = "bench-" + std::to_string(i);
    auto t = Clock::now();
    auto r = (*client)->Call<p::SubmitReply>(s, milliseconds(30000));
    if (r.ok()) {
      submit_.Add(Since(t) * 1e3);
      c_.submitted++;
    } else {
      c_.submit_errors++;
      if (c_.submit_errors < 5) std::fprintf(stderr, "submit: %s\n", r.status().ToString().c_str());
    }
  }
  submissions_done_ = true;
}

int Bench::Run() {
  char tmpl[] = "/tmp/aryl-bench-daemon-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string state = dir + "/state.db", log = dir + "/scheduler.log";
  int port = FreePort();
  endpoint_ = "tcp://127.0.0.1:" + std::to_string(port);
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    dup2(fileno(stdout), 2);
    std::string hb = std::to_string(opt_.heartbeat), to = std::to_string(opt_.agent_timeout);
    std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
    execl(opt_.scheduler.c_str(), opt_.scheduler.c_str(), "--endpoint", ep.c_str(), "--state", state.c_str(),
          "--http-port", "-1", "--heartbeat", hb.c_str(), "--agent-timeout", to.c_str(), nullptr);
    std::perror("exec aryl-scheduler");
    _exit(127);
  }
  auto stop_scheduler = [&] {
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid, nullptr, WNOHANG) == pid) return;
      std::this_thread::sleep_for(milliseconds(100));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  };
  {  // wait until it answers
    auto c = p::Client::Connect({.endpoint = endpoint_});
    bool up = false;
    for (int i = 0; i < 100 && !up; ++i) up = c.ok() && (*c)->Call<p::StatusReply>(p::StatusRequest{}, milliseconds(200)).ok();
    if (!up) {
      std::fprintf(stderr, "bench_daemon: the scheduler did not answer (log: %s)\n", log.c_str());
      stop_scheduler();
      return 1;
    }
  }
  t0_ = Clock::now();
  int total = opt_.agents + opt_.probe;
  for (int i = 0; i < total; ++i) {
    auto a = std::make_unique<Agent>();
    char name[32];
    std::snprintf(name, sizeof name, "fake-%04d", i);
    a->id = name;
    a->probe = i >= opt_.agents;
    // The first quarter join at once (capacity for the first jobs), the rest
    // spread over the submission phase.
    double at = i < opt_.agents / 4 ? 0 : opt_.submit_seconds * (i - opt_.agents / 4) / std::max(1, opt_.agents);
    a->join_at = t0_ + duration_cast<Clock::duration>(duration<double>(at));
    auto c = p::Client::Connect({.endpoint = endpoint_, .identity = a->id, .max_queued_pushes = 100000});
    if (!c.ok()) {
      std::fprintf(stderr, "connect: %s\n", c.status().ToString().c_str());
      return 1;
    }
    a->client = std::move(*c);
    agents_.push_back(std::move(a));
  }
  sqlite3* db = nullptr;
  sqlite3_open_v2(state.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_busy_timeout(db, 1000);
  std::vector<std::thread> threads;
  threads.emplace_back([this] { RegistrationLoop(); });
  for (int s = 0; s < opt_.threads; ++s) threads.emplace_back([this, s] { ShardLoop(s); });
  threads.emplace_back([this] { SubmitLoop(); });
  std::string peak_rss;
  auto done_at = Clock::time_point::max();
  while (Since(t0_) < opt_.duration) {
    journal_rows_ = Count(db, "SELECT coalesce(max(seq), 0) FROM core_events");
    peak_rss = ProcField(pid, "VmHWM");
    // After the probes registered, let the cluster run a little longer.
    if (submissions_done_ && reg_probe_.ms.size() >= static_cast<size_t>(opt_.probe) && done_at == Clock::time_point::max())
      done_at = Clock::now() + seconds(5);
    if (Clock::now() >= done_at) break;
    std::this_thread::sleep_for(milliseconds(500));
  }
  double elapsed = Since(t0_);
  std::string rss = ProcField(pid, "VmRSS");
  peak_rss = ProcField(pid, "VmHWM");
  stop_ = true;
  for (auto& t : threads) t.join();
  long long core_rows = Count(db, "SELECT count(*) FROM core_events");
  long long event_rows = Count(db, "SELECT count(*) FROM events");
  long long node_failed = Count(db, "SELECT count(*) FROM events WHERE kind='node_failed'");
  long long completed = Count(db, "SELECT count(*) FROM jobs WHERE state='finished'");
  long long running = Count(db, "SELECT count(*) FROM jobs WHERE state='running'");
  long long queued = Count(db, "SELECT count(*) FROM jobs WHERE state='queued'");
  sqlite3_close(db);
  std::string rounds = "?";
  {  // the scheduler's own round times (aryl_round_seconds)
    auto c = p::Client::Connect({.endpoint = endpoint_});
    if (c.ok())
      if (auto r = (*c)->Call<p::StatusReply>(p::StatusRequest{}, milliseconds(30000)); r.ok())
        rounds = r->summary.value("rounds", nlohmann::json::object()).dump();
  }
  stop_scheduler();

  std::printf("bench_daemon: %d agents x %d slots (+%d probes), %d jobs over %.0f s, ran %.1f s\n", opt_.agents,
              opt_.slots, opt_.probe, opt_.jobs, opt_.submit_seconds, elapsed);
  std::printf("  agents declared dead while healthy  %ld (node_failed rows: %lld), re-registrations %ld\n",
              c_.declared_dead.load(), node_failed, c_.reregistrations.load());
  std::printf("  max heartbeat send delay (generator)  %.1f ms\n", c_.max_hb_late_us.load() / 1e3);
  std::printf("  registration (first)   %s\n", reg_.Summary().c_str());
  std::printf("  registration (probes, after all jobs)  %s\n", reg_probe_.Summary().c_str());
  std::printf("  registration (again)   %s\n", reg_again_.Summary().c_str());
  std::printf("  submit_job reply       %s\n", submit_.Summary().c_str());
  std::printf("  status reply           %s\n", status_.Summary().c_str());
  std::printf("  jobs submitted %ld (errors %ld); finished %lld, running %lld, queued %lld\n", c_.submitted.load(),
              c_.submit_errors.load(), completed, running, queued);
  std::printf("  worker starts %ld, stops %ld, exits %ld, acks %ld, send errors %ld\n", c_.starts.load(),
              c_.stops.load(), c_.exits.load(), c_.acks.load(), c_.send_errors.load());
  std::printf("  scheduler RSS %s (peak %s)\n", rss.c_str(), peak_rss.c_str());
  std::printf("  scheduler rounds %s\n", rounds.c_str());
  std::printf("  journal rows: core_events %lld, events %lld\n", core_rows, event_rows);
  std::printf("  log: 'disagree' %d, 'does not expect' %d, 'stopped heartbeating' %d\n", CountInFile(log, "disagree"),
              CountInFile(log, "does not expect"), CountInFile(log, "stopped heartbeating"));
  {  // per-registration cost vs history: first registrations in 4 groups by journal rows
    std::lock_guard<std::mutex> l(cost_mu_);
    auto v = cost_;
    std::sort(v.begin(), v.end());
    std::printf("  per-registration cost vs history (core_events rows when it registered):\n");
    for (int q = 0; q < 4 && !v.empty(); ++q) {
      size_t a = v.size() * q / 4, b = v.size() * (q + 1) / 4;
      if (a >= b) continue;
      std::vector<double> ms;
      for (size_t i = a; i < b; ++i) ms.push_back(v[i].second);
      std::sort(ms.begin(), ms.end());
      std::printf("    rows %7lld..%-7lld  n=%-4zu median %.2f ms  max %.2f ms\n", v[a].first, v[b - 1].first, ms.size(),
                  ms[ms.size() / 2], ms.back());
    }
  }
  if (!opt_.keep) {
    std::remove(log.c_str());
    std::string cmd = "rm -rf '" + dir + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  } else {
    std::printf("  kept %s\n", dir.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_daemon: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--scheduler") o.scheduler = val();
      else if (a == "--agents") o.agents = std::stoi(val());
      else if (a == "--slots") o.slots = std::stoi(val());
      else if (a == "--jobs") o.jobs = std::stoi(val());
      else if (a == "--probe") o.probe = std::stoi(val());
      else if (a == "--threads") o.threads = std::max(1, std::stoi(val()));
      else if (a == "--submit-seconds") o.submit_seconds = std::stod(val());
      else if (a == "--duration") o.duration = std::stod(val());
      else if (a == "--work-seconds") o.work_seconds = std::stod(val());
      else if (a == "--heartbeat") o.heartbeat = std::stod(val());
      else if (a == "--agent-timeout") o.agent_timeout = std::stod(val());
      else if (a == "--keep") o.keep = true;
      else if (a == "--cluster-id") o.cluster_id = val();
      else {
        std::fprintf(stderr,
                     "usage: bench_daemon [--scheduler PATH] [--agents N] [--slots N] [--jobs N] [--probe N]\n"
                     "  [--threads N] [--submit-seconds S] [--duration S] [--work-seconds S] [--heartbeat S]\n"
                     "  [--agent-timeout S] [--cluster-id ID] [--keep]\n");
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "bench_daemon: bad value for %s\n", a.c_str());
      return 2;
    }
  }
  if (o.agents < 1 || o.slots < 1 || o.jobs < 0 || o.submit_seconds <= 0 || o.duration <= 0) {
    std::fprintf(stderr, "bench_daemon: --agents/--slots >= 1, --jobs >= 0, --submit-seconds/--duration > 0\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  return Bench(o).Run();
}
