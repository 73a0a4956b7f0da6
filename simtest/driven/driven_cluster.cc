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
  for (auto& f : held) Arrive(f.agent, std::move(f.msg), f.correlation, f.route);
  Dispatch();
}

DrivenAgent& DrivenCluster::AddAgent(const std::string& id, p::Pool pool, int slots, const std::string& gpu_type) {
  DrivenAgent& a = agents_[id];
  a.reg.agent_id = id;
  a.reg.host = id + ".local";
  a.reg.pool = pool;
  a.reg.gpu_type = gpu_type;
  a.reg.slots = slots;
  a.reg.cluster_id = "default";
  a.reg.store_endpoint = "tcp://" + id + ".local:7000";
  a.reg.instance = 1000 + agents_.size();
  StartAgentProcess(a);
  // The first registration, answered at once (no faults yet); the session
  // takes the answer as any other.
  auto r = Call(a.session->MakeRegister(a.core->RegisterMessage(), now()), Route(a));
  if (r.ok() && std::holds_alternative<p::AgentRegistered>(*r)) registered_at_[id] = now();
  if (!r.ok() || !std::holds_alternative<p::AgentRegistered>(*r))
    Fail("register " + id + ": " + (r.ok() ? std::string(p::TypeName(*r)) : r.status().ToString()));
  if (!r.ok()) a.session->OnRegisterFailed(r.status(), now());
  else if (auto* ok = std::get_if<p::AgentRegistered>(&*r)) a.session->OnRegistered(*ok, now());
  Dispatch();
  return a;
}

void DrivenCluster::StartAgentProcess(DrivenAgent& a) {
  const std::string id = a.reg.agent_id;
  a.StartProcess(
      clock_,
      [this, id](p::JobId job, p::WorkerId worker, bool ckpt, double grace) { Terminated(id, job, worker, ckpt, grace); },
      [this, id](const p::Message& m) { Deliver(id, m); });
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
  auto a = agents_.find(from);
  if (a == agents_.end() || !a->second.Sends()) return;  // cut off: lost
  for (auto& f : network_.Send({true, from, "", std::move(msg), Route(a->second)}, now())) Land(std::move(f));
}

// Each agent process connects with a route of its own (AgentRoute): what the
// scheduler sent to an earlier process of the agent can never reach a later one.
std::string DrivenCluster::Route(const DrivenAgent& a) {
  return a.reg.agent_id + "#" + std::to_string(a.reg.instance);
}

// What reaches the daemon's socket: read now, or once a paused daemon runs.
void DrivenCluster::Arrive(const std::string& from, p::Message msg, const std::string& correlation,
                          const std::string& route) {
  if (paused_) {
    held_.push_back({true, from, correlation, std::move(msg), route});
    return;
  }
  if (!daemon_) return;  // not running: nobody reads the socket
  if (on_arrive) on_arrive(from, msg);
  p::ReplyTo to;
  to.peer.identity = route;
  to.correlation = correlation;
  const bool registration = std::holds_alternative<p::AgentRegister>(msg);
  auto reply = daemon_->Deliver(to, std::move(msg));
  if (registration && reply && std::holds_alternative<p::AgentRegistered>(*reply)) registered_at_[from] = now();
  // A one-way message's reply (an Error, say) goes nowhere, as on the wire; a
  // request's goes back over it.
  if (!reply || correlation.empty()) return;
  if (auto a = agents_.find(from); a != agents_.end()) ToAgent(a->second, std::move(*reply), correlation, route);
}

void DrivenCluster::ToAgent(DrivenAgent& a, p::Message msg, const std::string& correlation,
                            const std::string& route) {
  if (!a.Hears()) return;  // cut off: lost
  for (auto& f : network_.Send({false, a.reg.agent_id, correlation, std::move(msg), route}, now()))
    Land(std::move(f));
}

void DrivenCluster::Land(FaultyNetwork::Flight f) {
  if (f.to_daemon) return Arrive(f.agent, std::move(f.msg), f.correlation, f.route);
  auto it = agents_.find(f.agent);
  if (it == agents_.end() || !it->second.Hears()) return;
  if (f.route != Route(it->second)) return;  // sent to a process of the agent that is gone
  DrivenAgent& a = it->second;
  if (f.correlation.empty()) return OnCommand(a, f.msg);
  // A registration's answer, taken only for the newest try (a client
  // matches replies to its request); the session decides what it means
  // (term fencing included).
  if (f.correlation != a.register_correlation) return;
  if (auto* ok = std::get_if<p::AgentRegistered>(&f.msg)) a.session->OnRegistered(*ok, now());
  else if (auto* e = std::get_if<p::Error>(&f.msg)) a.session->OnRegisterFailed(e->ToStatus(), now());
}

void DrivenCluster::Register(DrivenAgent& a) {
  p::AgentRegister reg = a.session->MakeRegister(a.core->RegisterMessage(), now());
  a.register_correlation = "r" + std::to_string(++correlation_);
  if (!a.Sends()) return;
  for (auto& f : network_.Send({true, a.reg.agent_id, a.register_correlation, std::move(reg), Route(a)}, now()))
    Land(std::move(f));
}

void DrivenCluster::Dispatch() {
  // Commands may cause reports that cause commands: until quiet.
  for (int rounds = 0; rounds < 100; ++rounds) {
    auto sent = port_.TakeAll();
    if (sent.empty()) return;
    for (auto& s : sent) {
      auto it = agents_.find(s.to.substr(0, s.to.find('#')));
      if (it == agents_.end()) continue;  // a client's late reply
      ToAgent(it->second, std::move(s.msg), "", s.to);
    }
  }
  Fail("the daemon and the agents kept messaging for 100 rounds without time passing");
}

void DrivenCluster::OnCommand(DrivenAgent& a, const p::Message& msg) {
  a.received.push_back(msg);
  const std::string& id = a.reg.agent_id;
  if (on_command) on_command(id, msg);
  // The runtime model watches what the daemon asked for, taken or not.
  if (auto* m = std::get_if<p::StartWorkers>(&msg))
    runtime_.NoteGeneration(m->job, m->generation, m->members, &m->workers, now());
  if (auto* m = std::get_if<p::NewGeneration>(&msg))
    runtime_.NoteGeneration(m->job, m->generation, m->members, nullptr, now());
  // As aryl-agent's OnPush: a deposed leader's message, or a start overtaken
  // by a later acknowledgement, goes no further.
  if (a.session->FromDeposedLeader(msg) || a.session->Overtaken(msg)) return;
  if (auto* m = std::get_if<p::NewGeneration>(&msg)) {
    bool taken = false;
    {
      InCore in(a);
      taken = a.core->OnNewGeneration(*m);
    }
    // A leaver's runtime exits by itself at the switch step.
    if (taken)
      for (p::WorkerId wid : m->leaving)
        if (a.host->JobOf(wid) == m->job) Exit(id, wid, 0, "left");
  } else if (auto* m = std::get_if<p::HeartbeatAck>(&msg)) {
    a.session->OnHeartbeatAck(*m, now());
  } else if (auto* m = std::get_if<p::Error>(&msg)) {
    // A scheduler that does not know this agent (a restart, or it gave the
    // agent up): the session registers again, with what the core runs.
    a.session->OnError(*m);
  } else {
    InCore in(a);
    a.core->OnCommand(msg);
  }
  Reap(a);
}

// How a worker's program takes its SIGTERM: a plain one ends by it; one that
// links the runtime checkpoints first when it was asked to (rank 0 of a job
// that checkpoints writes one, runtime_model.h) and exits 0, "stopped".
void DrivenCluster::Terminated(const std::string& agent, p::JobId job, p::WorkerId worker, bool checkpoint_first,
                               double grace) {
  if (workers_link_runtime && runtime_.Stop(job, worker, checkpoint_first, grace, now(), ModelWorkers())) return;
  if (workers_link_runtime && checkpoint_first) Exit(agent, worker, 0, "stopped");
  else Kill(agent, worker, 15);
}

void DrivenCluster::End(const std::string& agent, p::WorkerId worker, agent::ExitInfo ex, agent::WorkerEnding ending) {
  DrivenAgent& a = agents_.at(agent);
  if (!a.host->End(worker, ex, std::move(ending))) return Fail(agent + " runs no worker " + std::to_string(worker));
  if (a.in_core == 0) Reap(a);
}

void DrivenCluster::Reap(DrivenAgent& a) {
  for (auto ended = a.host->Poll(); !ended.empty(); ended = a.host->Poll())
    for (const auto& ex : ended) {
      InCore in(a);
      a.core->OnExit(ex);
    }
}

void DrivenCluster::Exit(const std::string& agent, p::WorkerId worker, int code, const std::string& outcome,
                         std::optional<std::int64_t> step) {
  agent::ExitInfo ex;
  ex.exit_code = code;
  agent::WorkerEnding ending;
  if (!outcome.empty()) {
    // The runtime's WorkerDone: its outcome at its step (the model's, unless given).
    auto job = agents_.at(agent).host->JobOf(worker);
    ending.runtime = true;
    ending.done = p::WorkerDone{};
    ending.done->job = job.value_or(0);
    ending.done->worker = worker;
    ending.done->step = step.value_or(job ? runtime_.Step(*job) : 0);
    ending.done->outcome = outcome;
  }
  End(agent, worker, ex, std::move(ending));
}

void DrivenCluster::Kill(const std::string& agent, p::WorkerId worker, int signal) {
  agent::ExitInfo ex;
  ex.exit_code = 128 + signal;
  ex.signal = signal;
  End(agent, worker, ex, {});
}

void DrivenCluster::CrashAgent(const std::string& agent) {
  DrivenAgent& a = agents_.at(agent);
  a.host->DieAll();
  a.reg.instance += 1000;  // a new process: a new session, lease and sequence
  a.down = true;
  StartAgentProcess(a);
}

void DrivenCluster::Progress(const std::string& agent, p::JobId job, std::int64_t generation, std::int64_t step,
                             bool runtime, std::optional<p::StepStats> stats) {
  p::JobProgress m;
  m.job = job;
  m.generation = generation;
  m.step = step;
  m.steps_per_second = 1;
  if (runtime) m.runtime = true;
  m.stats = std::move(stats);
  Deliver(agent, m);
  Dispatch();
}

void DrivenCluster::Heartbeat(DrivenAgent& a) {
  Deliver(a.reg.agent_id, a.session->MakeHeartbeat(a.core->HeartbeatMessage(), now()));
}

void DrivenCluster::Run(double seconds) {
  const double end = now() + seconds;
  while (now() + 1e-9 < end) {
    clock_.Advance(kTick);
    for (auto& f : network_.TakeDue(now())) Land(std::move(f));
    for (auto& [id, a] : agents_) AgentTick(a);
    Dispatch();
    TrainTick();
    // The launcher's SIGKILL at a stop's deadline, then the reaping.
    for (auto& [id, a] : agents_) {
      a.host->Escalate();
      Reap(a);
    }
    Dispatch();
    if (!daemon_ && next_start_ >= 0 && now() + 1e-9 >= next_start_) TryStart();
    if (!paused_ && daemon_) daemon_->Tick();
    Dispatch();
  }
}

// aryl-agent's loop: the core's step (the lease, overdue leavers, exits to
// resend), then the session's: a registration whose answer did not come
// within the request timeout failed (the binary's blocking client says so by
// itself), a failover when acks stopped (never here: one scheduler), a
// registration when due, a heartbeat when due.
void DrivenCluster::AgentTick(DrivenAgent& a) {
  {
    InCore in(a);
    a.core->Tick();
  }
  Reap(a);
  agent::SessionCore& s = *a.session;
  if (s.RegisterOverdue(now())) s.OnRegisterFailed(Status::Timeout("no answer to the registration"), now());
  if (s.FailoverDue(now())) s.LeaderLeft();
  if (s.RegisterDue(now())) Register(a);
  if (s.HeartbeatDue(now())) Heartbeat(a);
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
    if (a.host->JobOf(worker)) {
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
    for (const auto& w : a.Workers())
      if (w.job == job) out[id].push_back(w);
  return out;
}

int DrivenCluster::CountWorkers(p::JobId job) const {
  int n = 0;
  for (const auto& [id, ws] : WorkersOf(job)) n += static_cast<int>(ws.size());
  return n;
}

}  // namespace aryl::daemon::testing
