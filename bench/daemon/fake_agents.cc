// The fake agents of bench_daemon: registration, heartbeats, simulated
// workers, generations and outages (see bench_daemon.cc's file comment).
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "bench_daemon.h"

namespace bench {

using namespace std::chrono;

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
    (a.probe ? c_.probe_registrations : c_.first_registrations)++;
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
    std::vector<Agent*> back;
    {
      std::lock_guard<std::mutex> l(again_mu_);
      auto now = Clock::now();
      for (auto it = down_.begin(); it != down_.end();) {
        if ((*it)->rejoin_at <= now) back.push_back(*it), it = down_.erase(it);
        else ++it;
      }
    }
    for (Agent* a : back) {
      while (a->client->Receive(milliseconds(0)).ok()) {
      }  // what was sent during the outage never arrived
      c_.rejoins++;
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
    if (!did && again.empty() && back.empty()) std::this_thread::sleep_for(milliseconds(5));
  }
}

void Bench::Exit(Agent& a, const p::RunningWorker& rw, std::optional<int> code, std::optional<int> sig,
                 const std::string& outcome) {
  p::WorkerExited ex;
  ex.agent_id = a.id;
  ex.job = rw.job;
  ex.worker = rw.worker;
  ex.generation = rw.generation;
  if (code) ex.exit_code = *code;
  if (sig) ex.signal = *sig;
  ex.outcome = outcome;
  ex.runtime = false;
  a.unacked.push_back(ex);
  c_.exits++;
  if (!a.client->Send(ex, milliseconds(1000)).ok()) c_.send_errors++;
}

// Counted by the parent over every process's notes (CountGenerations).
void Bench::NoteGeneration(p::JobId job, std::int64_t generation, std::vector<p::WorkerId> members, bool starts) {
  std::sort(members.begin(), members.end());
  std::lock_guard<std::mutex> l(gen_mu_);
  auto [it, fresh] = gens_.try_emplace({job, generation}, std::move(members), starts);
  if (!fresh) it->second.second = it->second.second || starts;
}

std::int64_t JobEnds::GetOrSet(std::uint64_t job, std::int64_t proposed) {
  for (std::size_t n = 0, i = (job * 0x9E3779B97F4A7C15ull) >> 46; n < kSlots; ++n, i = (i + 1) % kSlots) {
    std::uint64_t k = key[i].load(std::memory_order_acquire);
    if (k == 0 && key[i].compare_exchange_strong(k, job, std::memory_order_acq_rel)) {
      end[i].store(proposed, std::memory_order_release);
      return proposed;
    }
    if (k != job) continue;
    // Its first agent is storing the end right now (a few instructions).
    for (int spin = 0; spin < 1000000; ++spin)
      if (std::int64_t e = end[i].load(std::memory_order_acquire)) return e;
    return proposed;
  }
  return proposed;  // full: this agent's own end
}

// An outage: a crash loses the agent's workers with it; a partition keeps
// them running, unheard. Either way nothing is heard from or reaches the agent
// until it registers again, down_seconds later.
void Bench::GoDown(Agent& a, bool crash, Clock::time_point now) {
  if (crash) {
    a.workers.clear();
    a.unacked.clear();
  }
  a.state.store(3, std::memory_order_release);
  double down = opt_.down_seconds > 0 ? opt_.down_seconds : 2 * opt_.agent_timeout;
  a.rejoin_at = now + duration_cast<Clock::duration>(duration<double>(down));
  std::lock_guard<std::mutex> l(again_mu_);
  down_.push_back(&a);
}

void Bench::ChurnLoop() {
  std::mt19937 rng(99 + static_cast<unsigned>(agents_.size()));
  // The cluster's outage rate, shared by the agent processes in proportion
  // to their agents.
  double share = static_cast<double>(agents_.size()) / (opt_.agents + opt_.probe);
  std::exponential_distribution<double> gap(share / opt_.churn);
  auto next = Clock::now() + duration_cast<Clock::duration>(duration<double>(gap(rng)));
  while (!stop_) {
    if (Clock::now() < next) {
      std::this_thread::sleep_for(milliseconds(20));
      continue;
    }
    next += duration_cast<Clock::duration>(duration<double>(gap(rng)));
    for (int tries = 0; tries < 20; ++tries) {
      Agent& a = *agents_[rng() % agents_.size()];
      if (a.probe || a.state.load(std::memory_order_acquire) != 2) continue;
      bool crash = rng() % 2 == 0;
      (crash ? c_.crashes : c_.partitions)++;
      a.churn.store(crash ? 1 : 2);
      break;
    }
  }
}

void Bench::Serve(Agent& a, Clock::time_point now) {
  if (int kind = a.churn.exchange(0)) {
    GoDown(a, kind == 1, now);
    return;
  }
  for (;;) {
    auto m = a.client->Receive(milliseconds(0));
    if (!m.ok()) break;
    if (auto* sw = std::get_if<p::StartWorkers>(&*m)) {
      c_.starts++;
      NoteGeneration(sw->job, sw->generation, sw->members, true);
      // Every worker of a job finishes at the same moment (synchronous data
      // parallelism: all ranks reach the last step together).
      // A job's duration depends on its id only: the same in every run.
      std::mt19937 rng(static_cast<unsigned>(sw->job));
      std::exponential_distribution<double> d(1.0 / opt_.work_seconds);
      auto proposed = now + duration_cast<Clock::duration>(duration<double>(1.0 + d(rng)));
      Clock::time_point end{Clock::duration(sh_->job_ends.GetOrSet(sw->job, proposed.time_since_epoch().count()))};
      end = std::max(end, now + milliseconds(500));
      for (const auto& w : sw->workers) {
        SimWorker s;
        s.rw = {sw->job, w.worker, sw->generation, w.rank, w.local_slot, 1000 + w.worker};
        s.end = end;
        a.workers[{sw->job, w.worker}] = s;
      }
    } else if (auto* ng = std::get_if<p::NewGeneration>(&*m)) {
      // Leavers go at the switch, as the runtime's do ("left"); stayers move on.
      NoteGeneration(ng->job, ng->generation, ng->members, false);
      for (auto wid : ng->leaving) {
        auto it = a.workers.find({ng->job, wid});
        if (it == a.workers.end()) continue;
        p::RunningWorker rw = it->second.rw;
        a.workers.erase(it);
        Exit(a, rw, 0, std::nullopt, "left");
      }
      for (auto& [k, w] : a.workers)
        if (k.first == ng->job) w.rw.generation = ng->generation;
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
    std::this_thread::sleep_for(milliseconds(opt_.sweep_ms));
  }
}

int Bench::AgentProcess(int index, int processes, int go_fd, const std::string& out) {
  // Dies with the parent, whatever way the parent goes.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const pid_t parent = getppid();
  if (parent == 1) return 1;
  {  // sockets need descriptors: as many as this machine lets a process have
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  pollfd pfd{go_fd, POLLIN, 0};
  char go = 0;
  if (poll(&pfd, 1, 120000) != 1 || read(go_fd, &go, 1) != 1) return 1;  // no go: the parent gave up
  close(go_fd);
  t0_ = Clock::time_point(Clock::duration(sh_->t0.load()));
  int total = opt_.agents + opt_.probe;
  for (int i = index; i < total; i += processes) {
    auto a = std::make_unique<Agent>();
    char name[32];
    std::snprintf(name, sizeof name, "fake-%05d", i);
    a->id = name;
    a->probe = i >= opt_.agents;
    // The first quarter join at once (capacity for the first jobs), the rest
    // spread over the submission phase; probes after the last submission.
    double at = i < opt_.agents / 4 ? 0 : opt_.submit_seconds * (i - opt_.agents / 4) / std::max(1, opt_.agents);
    a->join_at = t0_ + duration_cast<Clock::duration>(duration<double>(at));
    auto c = p::Client::Connect({.endpoint = endpoint_, .identity = a->id, .max_queued_pushes = 100000});
    if (!c.ok()) {
      c_.connect_errors++;
      std::fprintf(stderr, "agent process %d: connect: %s\n", index, c.status().ToString().c_str());
      return 1;
    }
    a->client = std::move(*c);
    agents_.push_back(std::move(a));
  }
  std::vector<std::thread> threads;
  threads.emplace_back([this] { RegistrationLoop(); });
  for (int s = 0; s < opt_.threads; ++s) threads.emplace_back([this, s] { ShardLoop(s); });
  if (opt_.churn > 0) threads.emplace_back([this] { ChurnLoop(); });
  while (!stop_ && getppid() == parent) std::this_thread::sleep_for(milliseconds(50));
  stop_ = true;  // this process's loops only, when the parent is gone (then nobody reads the flag)
  for (auto& t : threads) t.join();
  std::ofstream f(out);
  auto dump = [&](const char* tag, Latencies& l) {
    for (double v : l.ms) f << tag << ' ' << v << '\n';
  };
  dump("reg", reg_);
  dump("probe", reg_probe_);
  dump("again", reg_again_);
  for (const auto& [rows, ms] : cost_) f << "cost " << rows << ' ' << ms << '\n';
  for (const auto& [k, v] : gens_) {
    f << "gen " << k.first << ' ' << k.second << ' ' << v.second;
    for (auto m : v.first) f << ' ' << m;
    f << '\n';
  }
  f << "end\n";
  return f.good() ? 0 : 1;
}

}  // namespace bench
