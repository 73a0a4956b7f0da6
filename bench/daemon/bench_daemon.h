// bench_daemon's load generator: options, the fake agents' state and the
// Bench that runs them (fake_agents.cc serves the agents, bench_daemon.cc
// runs the scheduler, the submitter and the report).
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

struct Counters {
  std::atomic<long> declared_dead{0}, reregistrations{0}, register_errors{0}, starts{0}, stops{0}, exits{0},
      acks{0}, submitted{0}, submit_errors{0}, send_errors{0}, crashes{0}, partitions{0}, rejoins{0},
      generations{0}, noop_generations{0};
  std::atomic<long> max_hb_late_us{0};
};

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
  void Exit(Agent& a, const p::RunningWorker& rw, std::optional<int> code, std::optional<int> sig,
            const std::string& outcome = "");
  void ChurnLoop();
  void GoDown(Agent& a, bool crash, Clock::time_point now);
  // A generation as an agent heard it; a no-op is one whose members are the
  // previous generation's and that starts nobody.
  void NoteGeneration(p::JobId job, std::int64_t generation, std::vector<p::WorkerId> members, bool starts);

  Options opt_;
  std::string endpoint_;
  Clock::time_point t0_;
  std::atomic<bool> stop_{false}, submissions_done_{false};
  std::vector<std::unique_ptr<Agent>> agents_;
  std::mutex again_mu_;
  std::mutex job_end_mu_;
  std::map<p::JobId, Clock::time_point> job_end_;
  std::vector<Agent*> again_, down_;  // under again_mu_
  std::mutex gen_mu_;
  std::map<p::JobId, std::pair<std::int64_t, std::vector<p::WorkerId>>> gens_;
  Counters c_;
  Latencies reg_, reg_probe_, reg_again_, submit_, status_;
  std::atomic<long long> journal_rows_{0};
  // (journal rows at the time, registration ms) for first registrations.
  std::mutex cost_mu_;
  std::vector<std::pair<long long, double>> cost_;
};


}  // namespace bench
