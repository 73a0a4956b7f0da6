// bench_daemon: scale of one head node. Starts a real aryl-scheduler process
// on loopback and drives it with many fake agents in agent processes of their
// own (bench_daemon.h: at most --agents-per-process in one): each is
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
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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
#include "bench_daemon.h"
#include "flood.h"

using namespace std::chrono;

namespace bench {

namespace {

volatile sig_atomic_t g_interrupted = 0;  // SIGINT/SIGTERM: stop the run, clean up, exit
void OnSignal(int) { g_interrupted = 1; }

double CpuSeconds(const rusage& ru) {
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// The child processes of a run: the scheduler and the agent processes. Every
// exit path of Run() goes through the destructor, which kills and reaps them
// (the scheduler with SIGTERM, then SIGKILL after 10 s); they also die with
// this process (PR_SET_PDEATHSIG) when it is killed.
struct Children {
  pid_t scheduler = -1;
  rusage scheduler_usage{};
  std::vector<pid_t> agents;
  std::vector<rusage> agent_usage;
  std::vector<int> agent_status;

  // Waits for `pid` at most `seconds`; false if it is still running.
  static bool Reap(pid_t pid, double seconds, int* status, rusage* ru) {
    for (auto until = Clock::now() + duration_cast<Clock::duration>(duration<double>(seconds));;) {
      pid_t r = wait4(pid, status, WNOHANG, ru);
      if (r == pid || (r < 0 && errno == ECHILD)) return true;
      if (Clock::now() >= until) return false;
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  void StopScheduler() {
    if (scheduler <= 0) return;
    kill(scheduler, SIGTERM);
    int st = 0;
    if (!Reap(scheduler, 10, &st, &scheduler_usage)) {
      kill(scheduler, SIGKILL);
      wait4(scheduler, &st, 0, &scheduler_usage);
    }
    scheduler = -1;
  }
  // The agent processes leave by themselves once Shared::stop is set; those
  // that have not after `seconds` are killed.
  void StopAgents(double seconds) {
    agent_usage.resize(agents.size());
    agent_status.resize(agents.size(), -1);
    auto until = Clock::now() + duration_cast<Clock::duration>(duration<double>(seconds));
    for (size_t i = 0; i < agents.size(); ++i) {
      if (agents[i] <= 0) continue;
      double left = std::max(0.0, duration<double>(until - Clock::now()).count());
      if (!Reap(agents[i], left, &agent_status[i], &agent_usage[i])) {
        kill(agents[i], SIGKILL);
        wait4(agents[i], &agent_status[i], 0, &agent_usage[i]);
      }
      agents[i] = -1;
    }
  }
  ~Children() {
    for (pid_t a : agents)
      if (a > 0) kill(a, SIGKILL);
    StopAgents(5);
    StopScheduler();
  }
};

}  // namespace

Bench::Bench(Options o)
    : opt_(std::move(o)),
      sh_(new (mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) Shared),
      stop_(sh_->stop),
      submissions_done_(sh_->submissions_done),
      c_(sh_->c),
      journal_rows_(sh_->journal_rows) {}

void Bench::SubmitLoop() {
  auto client = p::Client::Connect({.endpoint = endpoint_});
  if (!client.ok()) return;
  // The agents connect in their own processes: submit once the first is in
  // (a submission before any agent is refused), at most 30 s after the start.
  while (c_.first_registrations == 0 && !stop_ && Since(t0_) < 30) std::this_thread::sleep_for(milliseconds(5));
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
  std::string state = opt_.state.empty() ? dir + "/state.db" : opt_.state, log = dir + "/scheduler.log";
  // A flood needs users told apart: the keyless ipc:// socket (uids).
  if (opt_.flood > 0) {
    std::filesystem::permissions(dir, std::filesystem::perms(0755));
    endpoint_ = "ipc://" + dir + "/scheduler.sock";
  } else {
    endpoint_ = "tcp://127.0.0.1:" + std::to_string(FreePort());
  }
  std::string hb = std::to_string(opt_.heartbeat), to = std::to_string(opt_.agent_timeout);
  std::vector<std::string> sargs = {opt_.scheduler, "--endpoint", endpoint_, "--state", state, "--http-port", "-1",
                                    "--heartbeat", hb, "--agent-timeout", to};
  if (opt_.flood == 0) sargs.push_back("--insecure");
  sargs.insert(sargs.end(), opt_.scheduler_args.begin(), opt_.scheduler_args.end());
  std::vector<char*> cargs;
  for (auto& a : sargs) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  Children kids;  // from here on, every return kills what was started
  const pid_t self = getpid();
  kids.scheduler = fork();
  if (kids.scheduler < 0) {
    std::perror("bench_daemon: fork");
    return 1;
  }
  if (kids.scheduler == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives bench_daemon
    if (getppid() != self) _exit(1);
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    dup2(fileno(stdout), 2);
    execv(cargs[0], cargs.data());
    std::perror("exec aryl-scheduler");
    _exit(127);
  }
  // The agent processes, forked before this process makes a ZeroMQ context
  // or a thread; each waits for a byte on its pipe.
  const int total = opt_.agents + opt_.probe;
  const int processes = std::max(1, (total + opt_.agents_per_process - 1) / opt_.agents_per_process);
  std::vector<int> go(processes, -1);
  for (int k = 0; k < processes; ++k) {
    int fds[2];
    if (pipe(fds) != 0) {
      std::perror("bench_daemon: pipe");
      return 1;
    }
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("bench_daemon: fork");
      close(fds[0]);
      close(fds[1]);
      return 1;
    }
    if (pid == 0) {
      for (int j = 0; j < k; ++j) close(go[j]);  // the others' pipes: EOF reaches them when the parent goes
      close(fds[1]);
      _exit(AgentProcess(k, processes, fds[0], dir + "/agents-" + std::to_string(k) + ".txt"));
    }
    close(fds[0]);
    go[k] = fds[1];
    kids.agents.push_back(pid);
  }
  auto close_go = [&] {
    for (int& fd : go)
      if (fd >= 0) close(fd), fd = -1;
  };
  {  // wait until it answers (at most 100 x 200 ms)
    auto c = p::Client::Connect({.endpoint = endpoint_});
    bool up = false;
    for (int i = 0; i < 100 && !up && !g_interrupted; ++i) {
      up = c.ok() && (*c)->Call<p::StatusReply>(p::StatusRequest{}, milliseconds(200)).ok();
      if (!up && waitpid(kids.scheduler, nullptr, WNOHANG) == kids.scheduler) {
        kids.scheduler = -1;  // exited (a bad flag, a busy port): its log says why
        break;
      }
    }
    if (!up) {
      std::fprintf(stderr, "bench_daemon: the scheduler did not answer (log: %s)\n", log.c_str());
      close_go();  // the agent processes read EOF and leave
      return 1;
    }
  }
  t0_ = Clock::now();
  sh_->t0 = t0_.time_since_epoch().count();
  for (int& fd : go) {
    if (write(fd, "g", 1) != 1) std::perror("bench_daemon: go");
  }
  close_go();
  std::printf("bench_daemon: %d agents in %d processes; scheduler pid %d\n", total, processes,
              static_cast<int>(kids.scheduler));
  std::fflush(stdout);
  sqlite3* db = nullptr;
  sqlite3_open_v2(state.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_busy_timeout(db, 1000);
  std::vector<std::thread> threads;
  threads.emplace_back([this] { SubmitLoop(); });
  pid_t flooder = -1, victim = -1;
  // A run that must stop early still joins its threads and reaps its children.
  auto abort_run = [&](const std::string& why) {
    std::fprintf(stderr, "bench_daemon: %s\n", why.c_str());
    stop_ = true;
    for (auto& t : threads) t.join();
    for (pid_t child : {flooder, victim})
      if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, nullptr, 0);
      }
    sqlite3_close(db);
    return 1;
  };
  // The flood starts once the agents that join at once are in.
  std::string flood_out = dir + "/flood.txt", victim_out = dir + "/victim.txt";
  if (opt_.flood > 0) {
    while (c_.first_registrations < std::max(1, opt_.agents / 4) && Since(t0_) < 30 && !g_interrupted)
      std::this_thread::sleep_for(milliseconds(50));
    victim = SpawnAs(opt_.victim_uid, victim_out,
                     {"--victim-child", endpoint_, std::to_string(opt_.duration - Since(t0_) - 2), "0.05"});
    flooder = SpawnAs(opt_.flood_uid, flood_out,
                      {"--flood-child", endpoint_, std::to_string(opt_.flood), std::to_string(opt_.flood_threads)});
  }
  std::string peak_rss;
  auto done_at = Clock::time_point::max();
  long long max_held = 0;  // core_events rows at once (sampled every 0.5 s)
  while (Since(t0_) < opt_.duration) {
    if (g_interrupted) return abort_run("interrupted");
    if (waitpid(kids.scheduler, nullptr, WNOHANG) == kids.scheduler) {
      kids.scheduler = -1;
      return abort_run("the scheduler exited during the run (log: " + log + ")");
    }
    for (size_t k = 0; k < kids.agents.size(); ++k) {
      int st = 0;
      if (waitpid(kids.agents[k], &st, WNOHANG) == kids.agents[k]) {
        kids.agents[k] = -1;
        return abort_run("agent process " + std::to_string(k) + " exited during the run (status " +
                         std::to_string(st) + ", connect errors " + std::to_string(c_.connect_errors.load()) + ")");
      }
    }
    // History: every row ever appended (a snapshot deletes rows, not the sequence).
    journal_rows_ = Count(db, "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'core_events'");
    max_held = std::max(max_held, Count(db, "SELECT count(*) FROM core_events"));
    peak_rss = ProcField(kids.scheduler, "VmHWM");
    // After the probes registered, let the cluster run a little longer.
    bool flood_done = opt_.flood == 0 || (waitpid(victim, nullptr, WNOHANG) == victim && (victim = -1, true));
    if (submissions_done_ && flood_done && c_.probe_registrations >= opt_.probe &&
        done_at == Clock::time_point::max())
      done_at = Clock::now() + seconds(opt_.flood > 0 ? 0 : 5);
    if (Clock::now() >= done_at) break;
    std::this_thread::sleep_for(milliseconds(500));
  }
  double elapsed = Since(t0_);
  const pid_t pid = kids.scheduler;
  std::string rss = ProcField(pid, "VmRSS");
  peak_rss = ProcField(pid, "VmHWM");
  auto [cpu_s, wait_s, busiest_cpu_s, busiest_wait_s] = bench::SchedStat(pid);
  // Before the fake agents stop: after that the scheduler rightly times them out.
  long long node_failed = Count(db, "SELECT count(*) FROM events WHERE kind='node_failed'");
  stop_ = true;
  for (auto& t : threads) t.join();
  kids.StopAgents(60);
  double generator_cpu_s = 0;
  for (const auto& ru : kids.agent_usage) generator_cpu_s += CpuSeconds(ru);
  {
    rusage self_ru{};
    getrusage(RUSAGE_SELF, &self_ru);
    generator_cpu_s += CpuSeconds(self_ru);
  }
  // What the agent processes measured (bench_daemon.h): latencies, and the
  // generations heard, counted over all of them.
  std::map<p::JobId, std::map<std::int64_t, std::pair<std::vector<p::WorkerId>, bool>>> gens;
  int reports = 0;
  for (int k = 0; k < processes; ++k) {
    std::ifstream f(dir + "/agents-" + std::to_string(k) + ".txt");
    std::string line, tag;
    while (std::getline(f, line)) {
      std::istringstream in(line);
      in >> tag;
      double v = 0;
      if (tag == "reg" && in >> v) reg_.Add(v);
      else if (tag == "probe" && in >> v) reg_probe_.Add(v);
      else if (tag == "again" && in >> v) reg_again_.Add(v);
      else if (tag == "cost") {
        long long rows = 0;
        if (in >> rows >> v) cost_.push_back({rows, v});
      } else if (tag == "gen") {
        p::JobId job = 0;
        std::int64_t g = 0;
        bool starts = false;
        in >> job >> g >> starts;
        auto& e = gens[job][g];
        e.second = e.second || starts;
        e.first.clear();
        for (p::WorkerId w; in >> w;) e.first.push_back(w);
      } else if (tag == "end") {
        ++reports;
      }
    }
  }
  for (const auto& [job, by_gen] : gens) {
    const std::vector<p::WorkerId>* prev = nullptr;
    for (const auto& [g, e] : by_gen) {
      c_.generations++;
      if (!e.second && prev && e.first == *prev) c_.noop_generations++;
      prev = &e.first;
    }
  }
  for (pid_t child : {flooder, victim})
    if (child > 0) {
      kill(child, SIGTERM);
      waitpid(child, nullptr, 0);
    }
  long long core_rows = Count(db, "SELECT count(*) FROM core_events");
  long long event_rows = Count(db, "SELECT count(*) FROM events");
  long long appended = Count(db, "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'core_events'");
  long long snapshot_bytes = Count(db, "SELECT coalesce(max(length(value)), 0) FROM meta WHERE key = 'core_snapshot'");
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
  kids.StopScheduler();
  const double scheduler_cpu_s = CpuSeconds(kids.scheduler_usage);
  const double scheduler_maxrss_mb = kids.scheduler_usage.ru_maxrss / 1024.0;
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) load[0] = load[1] = load[2] = -1;

  std::printf("bench_daemon: %d agents x %d slots (+%d probes), %d jobs over %.0f s, ran %.1f s\n", opt_.agents,
              opt_.slots, opt_.probe, opt_.jobs, opt_.submit_seconds, elapsed);
  std::printf("  agents declared dead while healthy  %ld (node_failed rows: %lld), re-registrations %ld\n",
              c_.declared_dead.load(), node_failed, c_.reregistrations.load());
  std::printf("  max heartbeat send delay (generator)  %.1f ms\n", c_.max_hb_late_us.load() / 1e3);
  std::printf("  generator: %d agent processes (%d reported), CPU %.1f s (all processes)\n", processes, reports,
              generator_cpu_s);
  std::printf("  scheduler CPU (wait4) %.1f s, max RSS %.0f MB; load average %.2f %.2f %.2f\n", scheduler_cpu_s,
              scheduler_maxrss_mb, load[0], load[1], load[2]);
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
  std::printf("  scheduler CPU %.1f s, waiting for a CPU %.1f s; busiest thread %.1f s CPU, %.1f s waiting\n",
              cpu_s, wait_s, busiest_cpu_s, busiest_wait_s);
  std::printf("  scheduler rounds %s\n", rounds.c_str());
  std::error_code ec;
  auto file_bytes = [&](const std::string& f) { auto n = std::filesystem::file_size(f, ec); return ec ? 0 : n; };
  std::printf("  core journal: %lld rows appended, %lld held at the end, at most %lld held; snapshot %lld bytes; "
              "state file %.1f MB (+ WAL %.1f MB); events rows %lld\n",
              appended, core_rows, max_held, snapshot_bytes, file_bytes(state) / 1e6, file_bytes(state + "-wal") / 1e6,
              event_rows);
  std::printf("  log: 'disagree' %d, 'does not expect' %d, 'stopped heartbeating' %d\n", CountInFile(log, "disagree"),
              CountInFile(log, "does not expect"), CountInFile(log, "stopped heartbeating"));
  auto [replace_total, replace_same] = bench::ReplaceGenerations(log);
  if (opt_.flood > 0) {
    std::ifstream f(flood_out), v(victim_out);
    std::string line;
    while (std::getline(f, line)) std::printf("  %s\n", line.c_str());
    while (std::getline(v, line)) std::printf("  %s\n", line.c_str());
    auto [snapshots, worst_ms] = bench::Snapshots(log);
    std::printf("  core snapshots %d, slowest %.1f ms of the serving thread\n", snapshots, worst_ms);
  }
  std::printf("  churn: %ld crashes, %ld partitions, %ld rejoins (outage %.1f s)\n", c_.crashes.load(),
              c_.partitions.load(), c_.rejoins.load(),
              opt_.down_seconds > 0 ? opt_.down_seconds : 2 * opt_.agent_timeout);
  std::printf("  generations heard %ld, no-op (same members, nobody started) %ld; 'replace lost workers' %d, "
              "of which on an unchanged placement %d\n",
              c_.generations.load(), c_.noop_generations.load(), replace_total, replace_same);
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

}  // namespace bench

int main(int argc, char** argv) {
  bench::Options o;
  if (argc >= 5 && std::string(argv[1]) == "--flood-child")
    return bench::FloodChild(argv[2], std::stol(argv[3]), std::stoi(argv[4]));
  if (argc >= 5 && std::string(argv[1]) == "--victim-child")
    return bench::VictimChild(argv[2], std::stod(argv[3]), std::stod(argv[4]));
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
      else if (a == "--churn") o.churn = std::stod(val());
      else if (a == "--down-seconds") o.down_seconds = std::stod(val());
      else if (a == "--flood") o.flood = std::stol(val());
      else if (a == "--flood-threads") o.flood_threads = std::max(1, std::stoi(val()));
      else if (a == "--scheduler-arg") o.scheduler_args.push_back(val());
      else if (a == "--state") o.state = val();
      else if (a == "--agents-per-process") o.agents_per_process = std::max(1, std::stoi(val()));
      else if (a == "--sweep-ms") o.sweep_ms = std::max(1, std::stoi(val()));
      else {
        std::fprintf(stderr,
                     "usage: bench_daemon [--scheduler PATH] [--agents N] [--slots N] [--jobs N] [--probe N]\n"
                     "  [--threads N] [--submit-seconds S] [--duration S] [--work-seconds S] [--heartbeat S]\n"
                     "  [--agent-timeout S] [--cluster-id ID] [--churn S] [--down-seconds S] [--keep]\n"
                     "  [--flood N [--flood-threads N]] [--state FILE|etcd://...] [--scheduler-arg ARG]...\n"
                     "  [--agents-per-process N (500)] [--sweep-ms MS (20)]\n");
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
  return bench::Bench(o).Run();
}
