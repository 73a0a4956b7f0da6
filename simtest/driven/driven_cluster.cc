#include "driven_cluster.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "aryl/daemon/state_store.h"
#include "aryl/protocol/generation.h"
#include "aryl/protocol/scheduler_client.h"


namespace aryl::daemon::testing {

Status MemoryPort::Reply(const p::ReplyTo& to, const p::Message& msg) {
  if (to.correlation.empty()) return Status::Ok();  // one-way: nobody waits
  sent_.push_back({to.peer.identity, msg});
  return Status::Ok();
}

Status MemoryPort::Push(std::string_view identity, const p::Message& msg) {
  sent_.push_back({std::string(identity), msg});
  return Status::Ok();
}

std::deque<MemoryPort::Sent> MemoryPort::TakeAll() {
  std::deque<Sent> out;
  out.swap(sent_);
  return out;
}

DaemonOptions DrivenCluster::Defaults() {
  DaemonOptions o;
  o.restart_grace = 0;
  o.agent_timeout = 3;
  o.agent_lease = 20;
  o.speed = "linear";  // no fitting thread: the run is reproducible
  o.stop_grace = 5;
  return o;
}

DrivenCluster::DrivenCluster(DaemonOptions options, bool restartable) {
  Start(std::move(options), restartable, nullptr);
}

DrivenCluster::DrivenCluster(DaemonOptions options, std::unique_ptr<StateStore> store) {
  Start(std::move(options), false, std::move(store));
}

DrivenCluster::DrivenCluster(DaemonOptions options, StoreOpener open) : open_(std::move(open)) {
  Start(std::move(options), true, nullptr);
}

Result<std::unique_ptr<Daemon>> DrivenCluster::StartDaemon() {
  if (!open_) return Daemon::StartDriven(options_, port_);
  ARYL_ASSIGN_OR_RETURN(auto store, open_(options_.state_path));
  return Daemon::StartDriven(options_, port_, std::move(store));
}

void DrivenCluster::Start(DaemonOptions options, bool restartable, std::unique_ptr<StateStore> store) {
  options.clock = &clock_;
  options.endpoint = port_.endpoint();
  options.state_path = ":memory:";
  options.http_port = -1;
  if (restartable) {
    char tmpl[] = "/tmp/aryl-driven-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    if (!dir) Fail(std::string("mkdtemp: ") + std::strerror(errno));
    if (dir) {
      state_dir_ = dir;
      options.state_path = state_dir_ + "/state.db";
    }
  }
  options_ = options;
  heartbeat_interval_ = options.heartbeat_interval;
  auto d = store ? Daemon::StartDriven(options, port_, std::move(store)) : StartDaemon();
  if (!d.ok()) {
    Fail("StartDriven: " + d.status().ToString());
    return;
  }
  daemon_ = std::move(*d);
}

void DrivenCluster::Fail(const std::string& what) {
  if (on_error) on_error(what);
  else std::fprintf(stderr, "driven cluster: %s\n", what.c_str());
}

DrivenCluster::~DrivenCluster() {
  daemon_.reset();
  if (!state_dir_.empty()) std::filesystem::remove_all(state_dir_);
}

void DrivenCluster::RestartDaemon() {
  if (state_dir_.empty()) return Fail("RestartDaemon needs a restartable cluster");
  daemon_.reset();
  registered_at_.clear();
  (void)port_.TakeAll();  // what the dead process had not sent is lost
  TryStart();
}

// A scheduler that cannot start (its state disk is full, say) exits; its
// service manager starts it again a second later. Meanwhile nobody answers.
void DrivenCluster::TryStart() {
  auto d = StartDaemon();
  if (d.ok()) {
    daemon_ = std::move(*d);
    next_start_ = -1;
    return;
  }
  start_failures_.push_back(d.status().ToString());
  next_start_ = now() + 1;
}

double DrivenCluster::RegisteredAt(const std::string& agent) const {
  auto it = registered_at_.find(agent);
  return it == registered_at_.end() ? -1 : it->second;
}

void DrivenCluster::PauseDaemon(double seconds) {
  paused_ = true;
  Run(seconds);
  paused_ = false;
  auto held = std::move(held_);
  held_.clear();
  for (auto& f : held) Arrive(f.agent, std::move(f.msg), f.correlation);
  Dispatch();
}

FakeAgent& DrivenCluster::AddAgent(const std::string& id, p::Pool pool, int slots, const std::string& gpu_type) {
  FakeAgent& a = agents_[id];
  a.reg.agent_id = id;
  a.reg.host = id + ".local";
  a.reg.pool = pool;
  a.reg.gpu_type = gpu_type;
  a.reg.slots = slots;
  a.reg.cluster_id = "default";
  a.reg.store_endpoint = "tcp://" + id + ".local:7000";
  a.reg.instance = 1000 + agents_.size();
  auto r = Call(a.reg, id);
  if (r.ok() && std::holds_alternative<p::AgentRegistered>(*r)) registered_at_[id] = now();
  if (!r.ok() || !std::holds_alternative<p::AgentRegistered>(*r))
    Fail("register " + id + ": " + (r.ok() ? std::string(p::TypeName(*r)) : r.status().ToString()));
  if (r.ok())
    if (auto* ok = std::get_if<p::AgentRegistered>(&*r)) heartbeat_interval_ = ok->heartbeat_interval_seconds;
  a.next_heartbeat = now() + heartbeat_interval_;
  if (r.ok())
    if (auto* ok = std::get_if<p::AgentRegistered>(&*r)) {
      a.lease.Renew(now(), ok->lease_seconds);
      a.scheduler_epoch = ok->scheduler_epoch;
    }
  Dispatch();
  return a;
}

Result<p::Message> DrivenCluster::Call(p::Message msg, const std::string& from) {
  if (!daemon_) return Status::Unavailable("the scheduler is not running");
  p::ReplyTo to;
  to.peer.identity = from;
  to.correlation = "c" + std::to_string(++correlation_);
  auto reply = daemon_->Deliver(to, std::move(msg));
  Dispatch();
  if (!reply) return Status::Timeout("no reply (the daemon answers later or never)");
  if (auto* e = std::get_if<p::Error>(&*reply)) return e->ToStatus();
  return std::move(*reply);
}

Result<p::JobId> DrivenCluster::Submit(p::SubmitJob job) {
  if (job.argv.empty()) job.argv = {"train.py"};
  ARYL_ASSIGN_OR_RETURN(auto reply, Call<p::SubmitReply>(std::move(job)));
  return reply.job;
}

Result<p::JobRow> DrivenCluster::Job(p::JobId id) {
  ARYL_ASSIGN_OR_RETURN(auto reply, Call<p::JobStatusReply>(p::JobStatus{id}));
  return reply.row;
}

std::vector<p::EventRow> DrivenCluster::Events(p::JobId id) {
  p::ListEvents q;
  q.job = id;
  auto r = Call<p::EventsReply>(q);
  if (!r.ok()) Fail("list_events: " + r.status().ToString());
  return r.ok() ? r->events : std::vector<p::EventRow>{};
}

void DrivenCluster::Deliver(const std::string& from, p::Message msg) {
  if (auto a = agents_.find(from); a != agents_.end() && !a->second.Sends()) return;  // cut off: lost
  for (auto& f : network_.Send({true, from, "", std::move(msg)}, now())) Land(std::move(f));
}

// What reaches the daemon's socket: read now, or once a paused daemon runs.
void DrivenCluster::Arrive(const std::string& from, p::Message msg, const std::string& correlation) {
  if (paused_) {
    held_.push_back({true, from, correlation, std::move(msg)});
    return;
  }
  if (!daemon_) return;  // not running: nobody reads the socket
  if (on_arrive) on_arrive(from, msg);
  p::ReplyTo to;
  to.peer.identity = from;
  to.correlation = correlation;
  const bool registration = std::holds_alternative<p::AgentRegister>(msg);
  auto reply = daemon_->Deliver(to, std::move(msg));
  if (registration && reply && std::holds_alternative<p::AgentRegistered>(*reply)) registered_at_[from] = now();
  // A one-way message's reply (an Error, say) goes nowhere, as on the wire; a
  // request's goes back over it.
  if (!reply || correlation.empty()) return;
  if (auto a = agents_.find(from); a != agents_.end()) ToAgent(a->second, std::move(*reply), correlation);
}

void DrivenCluster::ToAgent(FakeAgent& a, p::Message msg, const std::string& correlation) {
  if (!a.Hears()) return;  // cut off: lost
  for (auto& f : network_.Send({false, a.reg.agent_id, correlation, std::move(msg)}, now())) Land(std::move(f));
}

void DrivenCluster::Land(FaultyNetwork::Flight f) {
  if (f.to_daemon) return Arrive(f.agent, std::move(f.msg), f.correlation);
  auto it = agents_.find(f.agent);
  if (it == agents_.end() || !it->second.Hears()) return;
  FakeAgent& a = it->second;
  if (f.correlation.empty()) return OnCommand(a, f.msg);
  // A registration's answer, taken only for the newest try (a client
  // matches replies to its request).
  if (f.correlation != a.register_correlation || a.registered) return;
  if (auto* ok = std::get_if<p::AgentRegistered>(&f.msg)) {
    a.registered = true;
    a.lease.Renew(a.register_sent, ok->lease_seconds);
    a.scheduler_epoch = ok->scheduler_epoch;
    heartbeat_interval_ = ok->heartbeat_interval_seconds;
    a.next_heartbeat = now() + heartbeat_interval_;
  }
}

void DrivenCluster::Register(FakeAgent& a) {
  p::AgentRegister reg = a.reg;
  for (const auto& [wid, w] : a.workers) reg.workers.push_back(w);
  reg.exited = a.exits.Unacked();
  reg.seq = ++a.seq;  // as aryl-agent: one counter with the heartbeats
  a.register_sent = now();
  a.register_correlation = "r" + std::to_string(++correlation_);
  if (!a.Sends()) return;
  for (auto& f : network_.Send({true, a.reg.agent_id, a.register_correlation, std::move(reg)}, now()))
    Land(std::move(f));
}

void DrivenCluster::Dispatch() {
  // Commands may cause reports that cause commands: until quiet.
  for (int rounds = 0; rounds < 100; ++rounds) {
    auto sent = port_.TakeAll();
    if (sent.empty()) return;
    for (auto& s : sent) {
      auto it = agents_.find(s.to);
      if (it == agents_.end()) continue;  // a client's late reply
      ToAgent(it->second, std::move(s.msg));
    }
  }
  Fail("the daemon and the agents kept messaging for 100 rounds without time passing");
}

void DrivenCluster::OnCommand(FakeAgent& a, const p::Message& msg) {
  a.received.push_back(msg);
  const std::string& id = a.reg.agent_id;
  if (on_command) on_command(id, msg);
  if (auto* m = std::get_if<p::StartWorkers>(&msg)) {
    runtime_.NoteGeneration(m->job, m->generation, m->members, &m->workers, now());
    // As aryl-agent's OnStart: no start without a lease, none of an
    // overtaken generation, none of a worker that runs here.
    if (!a.lease.held() || a.lease.Expired(now())) return;
    if (a.fence.Stale(m->job, m->generation)) return;
    for (const auto& w : m->workers) {
      if (a.workers.count(w.worker)) continue;
      p::RunningWorker rw;
      rw.job = m->job;
      rw.worker = w.worker;
      rw.generation = m->generation;
      rw.rank = w.rank;
      rw.local_slot = w.local_slot;
      rw.pid = 100000 + static_cast<std::int64_t>(w.worker % 100000);
      a.workers[w.worker] = rw;
    }
  } else if (auto* m = std::get_if<p::StopWorkers>(&msg)) {
    std::vector<p::WorkerId> stop;
    for (const auto& [wid, w] : a.workers)
      if (w.job == m->job && (m->workers.empty() ||
                              std::find(m->workers.begin(), m->workers.end(), wid) != m->workers.end()))
        stop.push_back(wid);
    for (p::WorkerId wid : stop) {
      if (!a.workers.count(wid)) continue;  // the model ended it meanwhile
      // Rank 0 of a job that checkpoints writes one first (runtime_model.h).
      if (workers_link_runtime &&
          runtime_.Stop(m->job, wid, m->checkpoint_first, m->grace_seconds, now(), ModelWorkers()))
        continue;
      if (workers_link_runtime && m->checkpoint_first) Exit(id, wid, 0, "stopped");
      else Kill(id, wid, 15);
    }
  } else if (auto* m = std::get_if<p::NewGeneration>(&msg)) {
    runtime_.NoteGeneration(m->job, m->generation, m->members, nullptr, now());
    if (a.fence.Stale(m->job, m->generation)) return;
    for (p::WorkerId wid : m->leaving)
      if (a.workers.count(wid)) Exit(id, wid, 0, "left");
    for (std::size_t rank = 0; rank < m->members.size(); ++rank)
      if (auto it = a.workers.find(m->members[rank]); it != a.workers.end()) {
        it->second.generation = m->generation;
        it->second.rank = static_cast<std::int64_t>(rank);
      }
  } else if (auto* m = std::get_if<p::HeartbeatAck>(&msg)) {
    if (m->scheduler_epoch == a.scheduler_epoch) a.lease.Acked(m->seq, m->lease_seconds);
  } else if (auto* m = std::get_if<p::WorkerExitAck>(&msg)) {
    a.exits.Acked(m->job, m->worker);
  } else if (auto* m = std::get_if<p::Error>(&msg)) {
    // As SchedulerSession::OnError: a scheduler that does not know this
    // agent (a restart, or it gave the agent up); it registers again, with
    // what it runs.
    if (p::IsStandbyError(*m) || m->code == Status::Code::kFailedPrecondition) {
      a.registered = false;
      a.register_sent = -10;
    }
  }
}

// The worker's process ended: the agent forgets it and reports the exit
// (again on every registration) until the daemon acknowledges it.
void DrivenCluster::End(const std::string& agent, p::WorkerId worker, const std::function<void(p::WorkerExited&)>& how) {
  FakeAgent& a = agents_.at(agent);
  auto it = a.workers.find(worker);
  if (it == a.workers.end()) return Fail(agent + " runs no worker " + std::to_string(worker));
  p::WorkerExited e;
  e.agent_id = agent;
  e.job = it->second.job;
  e.worker = worker;
  e.generation = it->second.generation;
  how(e);
  a.workers.erase(it);
  a.exits.Add(e);
  if (a.registered) Deliver(agent, std::move(e));
}

void DrivenCluster::Exit(const std::string& agent, p::WorkerId worker, int code, const std::string& outcome,
                         std::optional<std::int64_t> step) {
  End(agent, worker, [&](p::WorkerExited& e) {
    e.exit_code = code;
    e.outcome = outcome;
    e.step = step;
    e.runtime = !outcome.empty();
  });
}

void DrivenCluster::Kill(const std::string& agent, p::WorkerId worker, int signal) {
  End(agent, worker, [&](p::WorkerExited& e) { e.signal = signal; });
}

void DrivenCluster::CrashAgent(const std::string& agent) {
  FakeAgent& a = agents_.at(agent);
  a.workers.clear();
  a.exits = agent::ExitBook{};
  a.lease = agent::SchedulerLease{};
  a.lease_kill_at.clear();
  a.fence = agent::GenerationFence{};
  a.seq = 0;
  a.reg.instance += 1000;  // a new process
  a.registered = false;
  a.register_sent = -10;
  a.register_correlation.clear();
  a.down = true;
}

void DrivenCluster::Progress(const std::string& agent, p::JobId job, std::int64_t generation, std::int64_t step,
                             bool runtime) {
  p::JobProgress m;
  m.job = job;
  m.generation = generation;
  m.step = step;
  m.steps_per_second = 1;
  if (runtime) m.runtime = true;
  Deliver(agent, m);
  Dispatch();
}

void DrivenCluster::Heartbeat(FakeAgent& a) {
  p::Heartbeat hb;
  hb.agent_id = a.reg.agent_id;
  hb.seq = ++a.seq;
  a.lease.Sent(hb.seq, now());
  hb.free_slots = a.reg.slots - static_cast<std::int64_t>(a.workers.size());
  for (const auto& [wid, w] : a.workers) hb.workers.push_back(w);
  Deliver(a.reg.agent_id, hb);
}

void DrivenCluster::Run(double seconds) {
  const double end = now() + seconds;
  while (now() + 1e-9 < end) {
    clock_.Advance(kTick);
    for (auto& f : network_.TakeDue(now())) Land(std::move(f));
    for (auto& [id, a] : agents_) {
      LeaseTick(a);
      AgentTick(a);
    }
    Dispatch();
    TrainTick();
    Dispatch();
    if (!daemon_ && next_start_ >= 0 && now() + 1e-9 >= next_start_) TryStart();
    if (!paused_ && daemon_) daemon_->Tick();
    Dispatch();
  }
}

// aryl-agent's loop: register until answered, else resend unacknowledged
// exits and heartbeat on the interval the scheduler gave.
void DrivenCluster::AgentTick(FakeAgent& a) {
  if (!a.registered) {
    if (now() - a.register_sent > 1.0) Register(a);
    return;
  }
  for (auto& e : a.exits.DueForResend(now())) Deliver(a.reg.agent_id, std::move(e));
  if (now() + 1e-9 < a.next_heartbeat) return;
  a.next_heartbeat = now() + heartbeat_interval_;
  Heartbeat(a);
}

// As aryl-agent's LeaseTick: the lease ran out, the workers here are
// stopped (SIGKILL after kLeaseStopGraceSeconds) and no start is taken until
// the scheduler grants the lease again.
void DrivenCluster::LeaseTick(FakeAgent& a) {
  if (a.lease.Expired(now())) {
    a.lease.Drop();
    for (const auto& [wid, w] : a.workers) a.lease_kill_at.emplace(wid, now() + p::kLeaseStopGraceSeconds);
  }
  for (auto it = a.lease_kill_at.begin(); it != a.lease_kill_at.end();) {
    const p::WorkerId wid = it->first;
    if (!a.workers.count(wid)) {
      it = a.lease_kill_at.erase(it);
    } else if (now() + 1e-9 >= it->second) {
      it = a.lease_kill_at.erase(it);
      Kill(a.reg.agent_id, wid, 9);  // SIGTERM then SIGKILL: gone by now
    } else {
      ++it;
    }
  }
}

void DrivenCluster::Train(p::JobId job, std::int64_t total_steps, RuntimeModel::Checkpoints checkpoints) {
  runtime_.Train(job, total_steps, now(), checkpoints);
}

RuntimeModel::Workers DrivenCluster::ModelWorkers() {
  RuntimeModel::Workers w;
  w.running = [this](p::WorkerId worker, std::string* agent) { return Running(worker, agent); };
  w.exit = [this](const std::string& agent, p::WorkerId worker, int code, const std::string& outcome,
                  std::optional<std::int64_t> step) { Exit(agent, worker, code, outcome, step); };
  w.send = [this](const std::string& agent, p::Message m) { Deliver(agent, std::move(m)); };
  w.kill = [this](const std::string& agent, p::WorkerId worker, int signal) { Kill(agent, worker, signal); };
  return w;
}

void DrivenCluster::TrainTick() { runtime_.Tick(now(), ModelWorkers()); }

bool DrivenCluster::Running(p::WorkerId worker, std::string* agent) const {
  for (const auto& [id, a] : agents_)
    if (a.workers.count(worker)) {
      if (agent) *agent = id;
      return true;
    }
  return false;
}

bool DrivenCluster::RunUntil(const std::function<bool()>& pred, double seconds) {
  const double end = now() + seconds;
  while (!pred()) {
    if (now() >= end) return false;
    Run(kTick);
  }
  return true;
}

std::map<std::string, std::vector<p::RunningWorker>> DrivenCluster::WorkersOf(p::JobId job) const {
  std::map<std::string, std::vector<p::RunningWorker>> out;
  for (const auto& [id, a] : agents_)
    for (const auto& [wid, w] : a.workers)
      if (w.job == job) out[id].push_back(w);
  return out;
}

int DrivenCluster::CountWorkers(p::JobId job) const {
  int n = 0;
  for (const auto& [id, ws] : WorkersOf(job)) n += static_cast<int>(ws.size());
  return n;
}

}  // namespace aryl::daemon::testing
