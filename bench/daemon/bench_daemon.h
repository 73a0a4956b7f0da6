// bench_daemon's load generator: options, the fake agents' state and the
// Bench that runs them (fake_agents.cc serves the agents, bench_daemon.cc
// runs the scheduler, the submitter and the report).
//
// Processes: the parent runs the scheduler child, the submitter and the
// report; the fake agents live in agent processes forked before the parent
// makes any ZeroMQ context, each with its own context and at most
// --agents-per-process agents (a context holds 1,023 sockets by default).
// Agent i belongs to process i % processes, so the agents that join at once
// are spread over all of them. They share one anonymous MAP_SHARED page
// (Shared: counters, the stop flag, the journal length, each job's end time);
// each writes its latencies and the generations it heard to a file that the
// parent reads after it exits.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"
#include "bench_util.h"

namespace bench {

namespace p = aryl::protocol;

struct Options {
  std::string scheduler = "build/scheduler/aryl-scheduler";
  // The scheduler's --state: empty, a fresh SQLite file in the scratch
  // directory; etcd://... for the HA backend (the job counts read from the
  // SQLite file are then -1, unknown).
  std::string state;
  int agents = 200, slots = 4, jobs = 2000, probe = 10, threads = 2;
  double submit_seconds = 60;  // jobs and agent joins are spread over this
  double duration = 120;       // the whole run, at most
  double work_seconds = 20;    // mean simulated worker duration
  double heartbeat = 0.5, agent_timeout = 3;
  bool keep = false;
  std::string cluster_id = "default";  // the scheduler's --cluster-id
  double churn = 0;          // mean seconds between agent outages (0: none)
  double down_seconds = 0;   // length of one outage (0: 2 x agent timeout)
  // --flood N (flood.h): the scheduler listens keyless on ipc:// and a user of
  // uid flood_uid sends N submits from flood_threads connections while a user
  // of uid victim_uid lists its jobs every 50 ms.
  long flood = 0;
  int flood_threads = 8;
  unsigned flood_uid = 65534, victim_uid = 65533;
  std::vector<std::string> scheduler_args;  // --scheduler-arg, passed on
  int agents_per_process = 500;  // fake agents in one process (one ZeroMQ context)
  int sweep_ms = 20;             // a shard's pause between passes over its agents
};

struct SimWorker {
  p::RunningWorker rw;
  Clock::time_point end;
};

struct Agent {
  std::string id;
  std::unique_ptr<p::Client> client;
  // 0: waiting to (re)register (the registration thread owns it), 2: active
  // (its shard owns it), 3: down in an outage (rejoins at rejoin_at).
  std::atomic<int> state{0};
  std::atomic<int> churn{0};  // set by the churn thread: 1 crash, 2 partition; its shard acts
  Clock::time_point rejoin_at;
  Clock::time_point join_at;
  double heartbeat = 0.5;
  Clock::time_point next_hb;
  std::uint64_t seq = 0;
  std::map<std::pair<p::JobId, p::WorkerId>, SimWorker> workers;
  std::vector<p::WorkerExited> unacked;
  bool probe = false;
};

// Lock-free atomics only: they live in memory shared by the agent processes.
struct Counters {
  std::atomic<long> declared_dead{0}, reregistrations{0}, register_errors{0}, starts{0}, stops{0}, exits{0},
      acks{0}, submitted{0}, submit_errors{0}, send_errors{0}, crashes{0}, partitions{0}, rejoins{0},
      generations{0}, noop_generations{0}, first_registrations{0}, probe_registrations{0}, connect_errors{0};
  std::atomic<long> max_hb_late_us{0};
};

// Each job's simulated end (steady_clock ticks; the clock is the machine's
// CLOCK_MONOTONIC, the same in every process), set by whichever agent starts
// its workers first: every worker of a job ends together, whatever process
// its agent is in. Open addressing; key 0 is empty (job ids start at 1).
struct JobEnds {
  static constexpr std::size_t kSlots = 1 << 18;
  std::atomic<std::uint64_t> key[kSlots];
  std::atomic<std::int64_t> end[kSlots];
  // The end of `job`: the stored one, or `proposed` when it is the first.
  std::int64_t GetOrSet(std::uint64_t job, std::int64_t proposed);
};

struct Shared {
  Counters c;
  std::atomic<bool> stop{false}, submissions_done{false};
  std::atomic<long long> journal_rows{0};
  std::atomic<std::int64_t> t0{0};  // steady_clock ticks of the run's start
  JobEnds job_ends;
};
static_assert(std::atomic<long>::is_always_lock_free && std::atomic<std::uint64_t>::is_always_lock_free);

class Bench {
 public:
  explicit Bench(Options o);
  int Run();

 private:
  // An agent process's body: agents `index` + k * `processes`; waits for the
  // parent's go (a byte on `go_fd`, at most 120 s), serves its agents until
  // Shared::stop, writes what it measured to `out` and returns the exit code.
  int AgentProcess(int index, int processes, int go_fd, const std::string& out);
  void Register(Agent& a, bool again);
  void RegistrationLoop();
  void ShardLoop(int shard);
  void Serve(Agent& a, Clock::time_point now);
  void SubmitLoop();
  void Exit(Agent& a, const p::RunningWorker& rw, std::optional<int> code, std::optional<int> sig,
            const std::string& outcome = "");
  void ChurnLoop();
  void GoDown(Agent& a, bool crash, Clock::time_point now);
  // A generation as an agent heard it; a no-op is one whose members are the
  // previous generation's and that starts nobody.
  void NoteGeneration(p::JobId job, std::int64_t generation, std::vector<p::WorkerId> members, bool starts);

  Options opt_;
  Shared* sh_;  // MAP_SHARED, inherited by the agent processes
  std::string endpoint_;
  Clock::time_point t0_;
  std::atomic<bool>& stop_;
  std::atomic<bool>& submissions_done_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::mutex again_mu_;
  std::vector<Agent*> again_, down_;  // under again_mu_
  // (job, generation) -> (members, started somebody), as this process heard them.
  std::mutex gen_mu_;
  std::map<std::pair<p::JobId, std::int64_t>, std::pair<std::vector<p::WorkerId>, bool>> gens_;
  Counters& c_;
  Latencies reg_, reg_probe_, reg_again_, submit_, status_;
  std::atomic<long long>& journal_rows_;
  // (journal rows at the time, registration ms) for first registrations.
  std::mutex cost_mu_;
  std::vector<std::pair<long long, double>> cost_;
};


}  // namespace bench
