// A cluster in this process, on virtual time: the real daemon
// (Daemon::StartDriven, the binary's handlers and tick) behind an in-memory
// MessagePort, a ManualClock, and agents (driven_agent.h) that run
// aryl-agent's own command logic (AgentCore, agent/src/agent_core.h: what to
// do on StartWorkers, StopWorkers, NewGeneration, WorkerExitAck, the lease
// running out and a worker's end; the contents of AgentRegister and
// Heartbeat) and its own standing with the scheduler (SessionCore,
// agent/src/session_core.h: registration and its retries, the answer's
// handling, heartbeats on the interval given, the lease renewed from send
// times, term fencing of every scheduler message, the scheduler epoch,
// registering again on an Error) over in-memory worker processes
// (memory_workers.h). One thread, one order: every run of a test sees the
// same messages in the same sequence, and a minute of the cluster takes
// milliseconds.
//
// The harness's, not the agent's: the wire and its faults (silent, mute,
// deaf, down, faulty_network.h) with the client's part of it (matching a
// registration's answer to the newest try; no answer within the request
// timeout is a timeout, which the session takes), the agent's process
// (CrashAgent), and the workers' programs: a plain program ends by its
// SIGTERM, one that links the runtime follows runtime_model.h.
// What stays for the real-process tests: signals, sockets, the worker
// channel, stop notices, the runtime's collectives.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aryl/clock.h"
#include "aryl/daemon/daemon.h"
#include "aryl/daemon/message_port.h"
#include "aryl/protocol/messages.h"
#include "aryl/result.h"
#include "driven_agent.h"
#include "faulty_network.h"
#include "runtime_model.h"

namespace aryl::daemon::testing {

namespace p = aryl::protocol;

// What the daemon sent, in order; the cluster hands each to its addressee.
class MemoryPort final : public MessagePort {
 public:
  struct Sent {
    std::string to;  // routing id
    p::Message msg;
  };
  const std::string& endpoint() const override { return endpoint_; }
  Status Reply(const p::ReplyTo& to, const p::Message& msg) override;
  Status Push(std::string_view identity, const p::Message& msg) override;
  bool drained() const override { return true; }  // every message is delivered before the next tick
  std::uint64_t rejected() const override { return 0; }
  std::deque<Sent> TakeAll();

 private:
  std::string endpoint_ = "inproc://driven";
  std::deque<Sent> sent_;
};

class DrivenCluster {
 public:
  static constexpr double kT0 = 1'800'000'000;  // 2027-01-15
  static constexpr double kTick = 0.05;         // the binary's tick

  // options.clock and the state path are set here; pass the rest. A
  // restartable cluster keeps its state in a file (RestartDaemon).
  explicit DrivenCluster(DaemonOptions options = Defaults(), bool restartable = false);
  // On a state store of the test's (full_disk_store.h, say).
  DrivenCluster(DaemonOptions options, std::unique_ptr<StateStore> store);
  // Restartable, each daemon's store opened by `open` at the state file's path.
  using StoreOpener = std::function<Result<std::unique_ptr<StateStore>>(const std::string& path)>;
  DrivenCluster(DaemonOptions options, StoreOpener open);
  ~DrivenCluster();
  static DaemonOptions Defaults();

  Daemon& daemon() { return *daemon_; }
  ManualClock& clock() { return clock_; }
  double now() const { return clock_.NowSeconds(); }

  // Registers an agent (it heartbeats from then on). Fails the test on a refusal.
  DrivenAgent& AddAgent(const std::string& id, p::Pool pool, int slots, const std::string& gpu_type = "cpu");
  DrivenAgent& agent(const std::string& id) { return agents_.at(id); }

  // A client's request; the daemon's reply (an Error reply as its Status).
  Result<p::Message> Call(p::Message msg, const std::string& from = "user");
  template <typename T>
  Result<T> Call(p::Message msg, const std::string& from = "user") {
    ARYL_ASSIGN_OR_RETURN(p::Message reply, Call(std::move(msg), from));
    if (auto* t = std::get_if<T>(&reply)) return std::move(*t);
    return Status::Internal("unexpected reply " + std::string(p::TypeName(reply)));
  }
  Result<p::JobId> Submit(p::SubmitJob job);
  Result<p::JobRow> Job(p::JobId id);
  std::vector<p::EventRow> Events(p::JobId id);

  // Virtual time passes: every 50 ms a tick, agents heartbeat on the interval
  // the daemon gave them, and everything the daemon sent is handed over.
  void Run(double seconds);
  // Runs until pred() holds (checked every tick) or `seconds` pass; its result.
  bool RunUntil(const std::function<bool()>& pred, double seconds);

  // The scheduler process dies and a new one starts on the same state file
  // (a restartable cluster only); agents learn of it from their next
  // heartbeat's reply and register again with the workers they run.
  void RestartDaemon();
  // Why each start after a restart failed (the next try is a second later).
  const std::vector<std::string>& start_failures() const { return start_failures_; }
  bool daemon_running() const { return daemon_ != nullptr; }
  // When the running scheduler took `agent`'s newest registration (it can
  // reach the agent from then on); -1 while it has taken none.
  double RegisteredAt(const std::string& agent) const;
  // The scheduler stops (SIGSTOP) for `seconds`: agents go on heartbeating,
  // their messages wait in its socket and are read, in order, when it runs
  // again.
  void PauseDaemon(double seconds);

  // Faults of the wire between agents and daemon (faulty_network.h), from now on.
  void SetNetwork(const NetworkFaults& faults) { network_.Set(faults); }
  const FaultyNetwork& network() const { return network_; }

  // What a worker's process does, reported by its agent as aryl-agent would.
  void Exit(const std::string& agent, p::WorkerId worker, int code, const std::string& outcome = "",
            std::optional<std::int64_t> step = std::nullopt);
  void Kill(const std::string& agent, p::WorkerId worker, int signal = 9);
  // The agent's process dies (SIGKILL, a crash): its workers die with it
  // (PR_SET_PDEATHSIG) and report nothing, and what it held in memory (its
  // exits, lease, generation fence, report counter) is lost. It stays `down`
  // until the caller sets it false; then a new process (a new instance)
  // registers, as systemd's Restart= would start it.
  void CrashAgent(const std::string& agent);
  // Rank 0's progress report (the agent relays its runtime's or its log's),
  // with its runtime's step summary when given.
  void Progress(const std::string& agent, p::JobId job, std::int64_t generation, std::int64_t step,
                bool runtime = false, std::optional<p::StepStats> stats = std::nullopt);
  // The workers of `job` the agents run now, by agent.
  std::map<std::string, std::vector<p::RunningWorker>> WorkersOf(p::JobId job) const;
  int CountWorkers(p::JobId job) const;

  // Trains `job` as workers linking the runtime would (from the next tick on):
  // a generation forms once every member it names runs, kStartup after it
  // was announced; rank 0 then reports
  // a step a second in it (in its fault successor after a member died); a
  // joiner whose generation has not formed within the runtime's rendezvous
  // timeout gives up (exit 3, "interrupted"), as the real one does.
  // With total_steps > 0 the members of the formed generation end at that
  // step: exit 0, "completed".
  // With checkpoints, rank 0 writes one every `every` steps and when stopped,
  // and a fresh group restores the newest good one (runtime_model.h).
  void Train(p::JobId job, std::int64_t total_steps = 0, RuntimeModel::Checkpoints checkpoints = {});
  // The newest generation the daemon started fresh (every member a new
  // worker: a restart), 0 when none.
  std::int64_t FreshStart(p::JobId job) const { return runtime_.FreshStart(job); }
  // Its members reached total_steps and ended.
  bool Done(p::JobId job) const { return runtime_.Done(job); }
  // The newest generation of `job` that formed (0: none yet), and how many
  // the daemon started for it.
  std::int64_t Formed(p::JobId job) const { return runtime_.Formed(job); }
  int GenerationsStarted(p::JobId job) const { return runtime_.GenerationsStarted(job); }
  std::int64_t Step(p::JobId job) const { return runtime_.Step(job); }
  std::int64_t StepsTrained(p::JobId job) const { return runtime_.StepsTrained(job); }
  // The job's checkpoints as they happened (D5, D6): writes in progress,
  // the newest good one, violations.
  CheckpointTruth* Checkpoints(p::JobId job) { return runtime_.Truth(job); }
  // The job's checkpoint directory's file system (its faults), null without checkpoints.
  MemoryCheckpointFs* CheckpointDisk(p::JobId job) { return runtime_.Disk(job); }
  static constexpr double kRendezvousTimeout = RuntimeModel::kRendezvousTimeout;
  static constexpr double kStartup = RuntimeModel::kStartup;

  // Misuse and harness failures (a worker that is not there, a refused
  // registration): a test passes its own failure; unset, they are printed.
  std::function<void(const std::string&)> on_error;
  // Every agent message the running daemon reads, as it reads it.
  std::function<void(const std::string& agent, const p::Message&)> on_arrive;
  // Every command an agent receives, as it receives it (a trace).
  std::function<void(const std::string& agent, const p::Message&)> on_command;

  // The default reaction of a worker to a StopWorkers: a plain program ends
  // by the signal (15); one that links the runtime checkpoints and exits 0
  // ("stopped") when asked to checkpoint first.
  bool workers_link_runtime = false;

 private:
  // An agent's message onto the wire, and what reaches the daemon.
  void Deliver(const std::string& from, p::Message msg);
  void Arrive(const std::string& from, p::Message msg, const std::string& correlation, const std::string& route);
  static std::string Route(const DrivenAgent& a);
  // The daemon's messages onto the wire, and what reaches an agent.
  void Dispatch();
  void ToAgent(DrivenAgent& a, p::Message msg, const std::string& correlation, const std::string& route);
  void Land(FaultyNetwork::Flight f);
  void AgentTick(DrivenAgent& a);  // registration, heartbeat, resends
  void Register(DrivenAgent& a);
  void OnCommand(DrivenAgent& a, const p::Message& msg);
  // A new process of `a` (AddAgent, a restart after CrashAgent): its core,
  // link and workers, none running.
  void StartAgentProcess(DrivenAgent& a);
  // A worker's SIGTERM: how the worker's program reacts (runtime_model.h).
  void Terminated(const std::string& agent, p::JobId job, p::WorkerId worker, bool checkpoint_first, double grace);
  // The worker's process ended as `ex`, its runtime having said `ending`.
  void End(const std::string& agent, p::WorkerId worker, agent::ExitInfo ex, agent::WorkerEnding ending);
  // The agent's loop reaps its ended workers: the core reports them.
  void Reap(DrivenAgent& a);
  void Heartbeat(DrivenAgent& a);

  void TrainTick();
  RuntimeModel::Workers ModelWorkers();
  bool Running(p::WorkerId worker, std::string* agent = nullptr) const;
  RuntimeModel runtime_;  // the trained jobs' workers (Train)

  void Fail(const std::string& what);
  void Start(DaemonOptions options, bool restartable, std::unique_ptr<StateStore> store);
  Result<std::unique_ptr<Daemon>> StartDaemon();
  void TryStart();
  double next_start_ = -1;  // a failed restart's next try (virtual time); -1: none
  std::vector<std::string> start_failures_;
  StoreOpener open_;

  ManualClock clock_{kT0};
  MemoryPort port_;
  DaemonOptions options_;
  std::string state_dir_;  // restartable: the state file's directory
  bool paused_ = false;
  std::deque<FaultyNetwork::Flight> held_;  // sent to a paused daemon
  std::unique_ptr<Daemon> daemon_;
  FaultyNetwork network_;
  std::map<std::string, DrivenAgent> agents_;
  std::map<std::string, double> registered_at_;  // by the running daemon (RegisteredAt)
  std::uint64_t correlation_ = 0;
};

}  // namespace aryl::daemon::testing
