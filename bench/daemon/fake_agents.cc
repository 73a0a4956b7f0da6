// The fake agents of bench_daemon: registration, heartbeats, simulated
// workers, generations and outages (see bench_daemon.cc's file comment).
#include <signal.h>

#include <algorithm>
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

void Bench::NoteGeneration(p::JobId job, std::int64_t generation, std::vector<p::WorkerId> members, bool starts) {
  std::sort(members.begin(), members.end());
  std::lock_guard<std::mutex> l(gen_mu_);
  auto& last = gens_[job];
  if (generation <= last.first) return;  // another agent of the job heard it first
  c_.generations++;
  if (!starts && last.first > 0 && members == last.second) c_.noop_generations++;
  last = {generation, std::move(members)};
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
  std::mt19937 rng(99);
  std::exponential_distribution<double> gap(1.0 / opt_.churn);
  auto next = Clock::now() + duration_cast<Clock::duration>(duration<double>(gap(rng)));
  while (!stop_) {
    if (Clock::now() < next) {
      std::this_thread::sleep_for(milliseconds(20));
      continue;
    }
    next += duration_cast<Clock::duration>(duration<double>(gap(rng)));
    for (int tries = 0; tries < 20; ++tries) {
      Agent& a = *agents_[rng() % opt_.agents];
      if (a.state.load(std::memory_order_acquire) != 2) continue;
      bool crash = rng() % 2 == 0;
      (crash ? c_.crashes : c_.partitions)++;
      a.churn.store(crash ? 1 : 2);
      break;
    }
  }
}

void Bench::Serve(Agent& a, Clock::time_point now) {
  thread_local std::mt19937 rng(7);
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
    std::this_thread::sleep_for(milliseconds(20));
  }
}


}  // namespace bench
