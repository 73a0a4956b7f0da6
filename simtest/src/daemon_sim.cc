// aryl-simtest --daemon: the real daemon under seeded faults (daemon_sim.h).
#include "aryl/simtest/daemon_sim.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "checkpoint_disk_faults.h"
#include "checkpoint_faults.h"
#include "driven_cluster.h"
#include "full_disk_store.h"
#include "log_to_trace.h"

namespace aryl::simtest {
namespace {

namespace p = aryl::protocol;
using daemon::DaemonOptions;
using daemon::StateStore;
using daemon::testing::DrivenCluster;
using daemon::testing::FullDiskStore;
using daemon::testing::NetworkFaults;

constexpr double kHorizon = 1800;
constexpr int kMaxGenerationsWithoutStep = 12;

// One run: the cluster, the job, the faults drawn from the seed, and the
// invariants checked after every tick.
class DaemonRun {
 public:
  explicit DaemonRun(const Options& o) : o_(o), rng_(o.seed) {}

  // A line of the daemon's own log, kept in the trace (--daemon-log).
  void Log(const std::string& line) { Trace("  log: " + line); }

  Outcome Run() {
    auto disk_full = std::make_shared<bool>(false);
    DaemonOptions d = DrivenCluster::Defaults();
    // The faults may cost more workers than the default allows (3 kills and a
    // partitioned server's two): a job that fails "giving up" would then be
    // right, and hide one that fails wrongly. Here every job must complete.
    d.max_worker_failures = 50;
    c_ = std::make_unique<DrivenCluster>(d, [disk_full](const std::string& path) -> Result<std::unique_ptr<StateStore>> {
      ARYL_ASSIGN_OR_RETURN(auto real, StateStore::Open(path));
      auto store = std::make_unique<FullDiskStore>(std::move(real));
      store->full = disk_full;
      return std::unique_ptr<StateStore>(std::move(store));
    });
    disk_full_ = disk_full;
    c_->on_error = [this](const std::string& what) { Violate("H", what); };
    if (o_.trace)
      c_->on_command = [this](const std::string& agent, const p::Message& m) {
        std::string what = std::string(p::TypeName(m));
        auto ids = [](const std::vector<p::WorkerId>& ws) {
          std::string s;
          for (auto w : ws) s += (s.empty() ? "" : ",") + std::to_string(w);
          return s;
        };
        if (auto* sw = std::get_if<p::StartWorkers>(&m)) {
          std::vector<p::WorkerId> started;
          for (const auto& w : sw->workers) started.push_back(w.worker);
          what += " gen " + std::to_string(sw->generation) + " start " + ids(started) + " members " + ids(sw->members);
        } else if (auto* ng = std::get_if<p::NewGeneration>(&m)) {
          what += " gen " + std::to_string(ng->generation) + " members " + ids(ng->members) + " leaving " + ids(ng->leaving);
        } else if (auto* st = std::get_if<p::StopWorkers>(&m)) {
          what += " " + (st->workers.empty() ? std::string("all") : ids(st->workers)) + ": " + st->reason;
        } else if (std::holds_alternative<p::HeartbeatAck>(m) || std::holds_alternative<p::WorkerExitAck>(m)) {
          return;
        }
        Trace(agent + " <- " + what);
      };
    c_->workers_link_runtime = true;
    c_->AddAgent("t1", p::Pool::kTraining, 2);
    c_->AddAgent("t2", p::Pool::kTraining, static_cast<int>(Uniform(1, 3)));
    c_->AddAgent("i1", p::Pool::kInference, 2);
    p::SubmitJob s;
    s.min_workers = 1;
    s.max_workers = 4;
    s.argv = {"train.py"};
    s.checkpoint_dir = "/ckpt";
    auto job = c_->Submit(s);
    if (!job.ok()) {
      Violate("H", "submit: " + job.status().ToString());
      return std::move(out_);
    }
    job_ = *job;
    const auto total = static_cast<std::int64_t>(Uniform(150, 401));
    ckpt_faults_ = std::make_unique<CheckpointFaults>(
        *c_, job_, [this](double at, std::string what, std::function<void()> fn) { Later(at, what, fn); },
        [this](const std::string& line) { Trace(line); });
    disk_faults_ = std::make_unique<CheckpointDiskFaults>(*c_, job_, !(o_.faults & (kDaemonRestart | kDaemonDisk)),
                                                          [this](const std::string& line) { Trace(line); });
    Draw();
    c_->Train(job_, total, ckpt_);
    if (o_.trace) c_->Checkpoints(job_)->on_event = [this](const std::string& line) { Trace(line); };
    while (Now() < kHorizon && !Ended()) {
      Apply();
      ckpt_faults_->Aim();
      c_->Run(DrivenCluster::kTick);
      Check();
    }
    Finish();
    return std::move(out_);
  }

 private:
  double Now() const { return c_ ? c_->now() - DrivenCluster::kT0 : 0; }
  double Uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
  bool Coin() { return std::uniform_int_distribution<int>(0, 1)(rng_) == 1; }

  void Schedule(double at, std::string what, std::function<void()> fn) {
    plan_.push_back({at, std::move(what), std::move(fn)});
  }

  // The faults, drawn in one fixed order so that a seed means one schedule.
  void Draw() {
    const unsigned f = o_.faults;
    if (f & kDaemonKill) {
      const int kills = static_cast<int>(Uniform(1, 4));
      for (int i = 0; i < kills; ++i) {
        const double at = Uniform(5, 250);
        const double pick = Uniform(0, 1);
        Schedule(at, "kill", [this, pick] { KillOne(pick); });
      }
    }
    if (f & kDaemonLoan) {
      double at = Uniform(5, 60);
      const int cycles = static_cast<int>(Uniform(1, 3));
      for (int i = 0; i < cycles; ++i) {
        Schedule(at, "offer i1", [this] { Offer(); });
        at += Uniform(5, 80);
        const double deadline = Coin() ? 1 : 30;
        Schedule(at, "reclaim i1 (" + std::to_string(static_cast<int>(deadline)) + " s)",
                 [this, deadline] { Reclaim(deadline); });
        at += Uniform(5, 60);
      }
    }
    if (f & kDaemonPause) {
      const double at = Uniform(5, 250), len = Uniform(1, 15);
      Schedule(at, "pause the scheduler", [this, len] { Pause(len); });
    }
    if (f & kDaemonRestart) {
      const double at = Uniform(5, 250);
      Schedule(at, "restart the scheduler", [this] {
        c_->RestartDaemon();
        ckpt_faults_->SchedulerRestarted();
        if (!c_->daemon_running()) Trace("the scheduler did not start: " + c_->start_failures().back());
      });
    }
    if (f & kDaemonPartition) {
      const double at = Uniform(5, 250), len = Uniform(2, 40);
      const std::string who = Coin() ? "t1" : "t2";
      Schedule(at, "partition " + who, [this, who] { c_->agent(who).silent = true; });
      Schedule(at + len, "heal " + who, [this, who] { c_->agent(who).silent = false; });
    }
    if (f & kDaemonDisk) {
      const double at = Uniform(5, 250), len = Uniform(1, 20);
      Schedule(at, "state disk full", [this] { *disk_full_ = true; });
      Schedule(at + len, "state disk has room", [this] { *disk_full_ = false; });
    }
    // The network's faults: windows that may overlap; each change sets the
    // wire to what the open windows add up to.
    auto window = [&](DaemonFault fault, const char* name, double NetworkFaults::*field, double lo, double hi) {
      if (!(f & fault)) return;
      const double at = Uniform(5, 250), len = Uniform(5, 60), value = Uniform(lo, hi);
      Schedule(at, std::string(name) + " " + Fmt(value), [this, field, value] {
        net_.*field = value;
        SetNetwork();
      });
      Schedule(at + len, std::string("no ") + name, [this, field] {
        net_.*field = 0;
        SetNetwork();
      });
    };
    window(kDaemonLoss, "loss", &NetworkFaults::loss, 0.05, 0.5);
    window(kDaemonDup, "dup", &NetworkFaults::duplicate, 0.1, 0.5);
    window(kDaemonDelay, "delay", &NetworkFaults::max_delay, 0.2, 3);
    if (f & kDaemonOneWay) {
      const double at = Uniform(5, 250), len = Uniform(2, 40);
      const std::string who = Coin() ? "t1" : "t2";  // as partition: an inference server cut off cannot be reclaimed in time
      const bool deaf = Coin();
      Schedule(at, who + (deaf ? " deaf" : " mute"), [this, who, deaf] { (deaf ? c_->agent(who).deaf : c_->agent(who).mute) = true; });
      Schedule(at + len, who + " heard and hearing", [this, who] { c_->agent(who).deaf = c_->agent(who).mute = false; });
    }
    // Drawn last, so that a seed of the other faults means what it did
    // before this one existed.
    if (f & kDaemonAgentCrash) {
      const double at = Uniform(5, 250), down = Uniform(0.5, 12);
      const char* names[] = {"t1", "t2", "i1"};
      const std::string who = names[std::min(2, static_cast<int>(Uniform(0, 3)))];
      Schedule(at, "crash agent " + who, [this, who] { c_->CrashAgent(who); });
      Schedule(at + down, "agent " + who + " starts again", [this, who] { c_->agent(who).down = false; });
    }
    // Kills inside a checkpoint write: each armed at `at` for the next write
    // begun, landing `frac` of the way through it (CheckpointFaults::Aim).
    if (f & kDaemonCheckpoint) {
      const int n = static_cast<int>(Uniform(1, 3));
      for (int i = 0; i < n; ++i) {
        CheckpointFaults::Armed a;
        a.at = Uniform(5, 250);
        a.frac = Uniform(0, 1);
        a.kind = std::min(2, static_cast<int>(Uniform(0, 3)));
        a.down = Uniform(0.5, 12);
        Schedule(a.at, std::string("in the next checkpoint write: ") + CheckpointFaults::kKinds[a.kind],
                 [this, a] { ckpt_faults_->Arm(a); });
      }
    }
    // The job's checkpoints, after every fault.
    ckpt_.every = static_cast<std::int64_t>(Uniform(10, 41));
    ckpt_.seconds = Uniform(1, 6);
    if (f & kDaemonCheckpointDisk)  // last of all, for the same reason
      disk_faults_->Draw([this](double lo, double hi) { return Uniform(lo, hi); },
                         [this](double at, std::string what, std::function<void()> fn) { Schedule(at, what, fn); },
                         ckpt_.bytes + daemon::testing::RuntimeModel::kFileHeader);
    window(kDaemonLag, "lag", &NetworkFaults::lag, 4, 12);  // after cdisk, for the same reason
    std::stable_sort(plan_.begin(), plan_.end(), [](const Planned& a, const Planned& b) { return a.at < b.at; });
  }

  void SetNetwork() {
    net_.seed = rng_();
    c_->SetNetwork(net_);
    if (returned_by_ >= 0) NoteNetwork();
  }
  // D1 is a promise for a wire that delivers: a reclaim while messages are
  // lost is not checked (its kills are repeated, but a deadline of a second
  // cannot outlast a run of losses), and one while they are late is given
  // their delay.
  void NoteNetwork() {
    if (net_.loss > 0) reclaim_unchecked_ = true;
    reclaim_slack_ = std::max(reclaim_slack_, net_.most_late());
  }

  void Apply() {
    while (next_ < plan_.size() && plan_[next_].at <= Now()) {
      Planned now = plan_[next_++];  // a fault may schedule more (plan_ grows)
      Trace("fault: " + now.what);
      now.fn();
    }
  }

  // A step added to the plan while it runs, in its place.
  void Later(double at, std::string what, std::function<void()> fn) {
    Schedule(at, std::move(what), std::move(fn));
    std::stable_sort(plan_.begin() + static_cast<long>(next_), plan_.end(),
                     [](const Planned& a, const Planned& b) { return a.at < b.at; });
  }

  void KillOne(double pick) {
    std::vector<std::pair<std::string, p::WorkerId>> live;
    for (const auto& [agent, ws] : c_->WorkersOf(job_))
      if (!c_->agent(agent).silent)
        for (const auto& w : ws) live.emplace_back(agent, w.worker);
    if (live.empty()) return;
    const auto& [agent, worker] = live[std::min(live.size() - 1, static_cast<std::size_t>(pick * live.size()))];
    Trace("kill worker " + std::to_string(worker) + " on " + agent);
    ++out_.kills;
    c_->Kill(agent, worker, 9);
  }

  // The scheduler stops for `len` s (shorter than the agents' lease). D5's
  // subjects: the agents connected before it whose messages reach its socket
  // throughout (none is lost on the wire, none is cut off).
  void Pause(double len) {
    std::vector<std::string> heard;
    if (net_.loss == 0)
      for (const auto& row : Nodes())
        if (row.connected && c_->agent(row.agent_id).Sends()) heard.push_back(row.agent_id);
    c_->PauseDaemon(len);
    paused_heard_ = std::move(heard);
    paused_for_ = len;
    paused_next_ = next_;
  }
  std::vector<p::NodeRow> Nodes() {
    if (!c_->daemon_running()) return {};
    auto r = c_->Call<p::NodesReply>(p::ListNodes{});
    return r.ok() ? r->nodes : std::vector<p::NodeRow>{};
  }

  // Refused while the scheduler cannot record it (a full disk): the
  // inference side asks again a second later; refused as not possible
  // (FailedPrecondition: not loaned, already loaned), it does not.
  void Again(const std::string& what, std::function<void()> fn) {
    Schedule(Now() + 1, what + " again", std::move(fn));
    std::stable_sort(plan_.begin() + static_cast<long>(next_), plan_.end(),
                     [](const Planned& a, const Planned& b) { return a.at < b.at; });
  }

  void Offer() {
    auto st = c_->Call(p::PoolOffer{{"i1"}});
    if (st.ok()) {
      ++out_.loans;
      lent_ = true;
      returned_by_ = -1;
      return;
    }
    Trace("offer refused: " + st.status().ToString());
    if (st.status().code() != Status::Code::kFailedPrecondition) Again("offer i1", [this] { Offer(); });
  }

  void Reclaim(double deadline) {
    p::PoolReclaim r;
    r.servers = {"i1"};
    r.deadline_seconds = deadline;
    auto st = c_->Call(r);
    if (!st.ok()) {
      Trace("reclaim refused: " + st.status().ToString());
      if (st.status().code() != Status::Code::kFailedPrecondition)
        Again("reclaim i1", [this, deadline] { Reclaim(deadline); });
      return;
    }
    if (lent_) {
      returned_by_ = Now() + deadline;
      reclaim_unchecked_ = false;
      reclaim_slack_ = 0;
      NoteNetwork();
      if (reclaim_unchecked_) Trace("D1 not checked for this reclaim: messages are being lost");
    }
    lent_ = false;
  }

  void Check() {
    // D1. The deadline is the scheduler's to keep once it can reach i1: i1
    // registered with the running scheduler, by then or after (a scheduler
    // restarted during a reclaim).
    const double reachable_from = c_->RegisteredAt("i1");
    const double due = std::max(returned_by_, reachable_from);
    if (returned_by_ >= 0 && !reclaim_unchecked_ && reachable_from >= 0 &&
        Now() > due + reclaim_slack_ + DrivenCluster::kTick + 1e-9 && !c_->WorkersOf(job_)["i1"].empty())
      Violate("D1", "a worker of the job on i1 " + Fmt(Now() - due) + " s after the reclaim's deadline" +
                        (due > returned_by_ ? " (from i1's registration with the restarted scheduler)" : ""));
    // D2
    const std::int64_t fresh = c_->FreshStart(job_);
    if (fresh > 0) {
      bool old = false, young = false;
      for (const auto& [agent, ws] : c_->WorkersOf(job_))
        for (const auto& w : ws) (w.generation < fresh ? old : young) = true;
      if (old && young && fresh != two_copies_said_) {
        two_copies_said_ = fresh;  // once per generation
        Violate("D2", "generation " + std::to_string(fresh) + " started fresh while older workers run");
      }
    }
    // D5, once, on the tick after a pause: its subjects are still connected
    // (unless another fault came at its end: a restart forgets them all).
    if (!paused_heard_.empty()) {
      const auto subjects = std::move(paused_heard_);
      paused_heard_.clear();
      std::string lost;
      if (next_ == paused_next_)
        for (const auto& row : Nodes())
          if (!row.connected && c_->agent(row.agent_id).Sends() &&
              std::find(subjects.begin(), subjects.end(), row.agent_id) != subjects.end())
            lost += (lost.empty() ? "" : ",") + row.agent_id;
      if (!lost.empty())
        Violate("D5", "agents " + lost + " declared lost after a pause of the scheduler of " + Fmt(paused_for_) +
                          " s, their heartbeats read");
    }
    // D3 (a step trained again after a restore is progress too)
    const int started = c_->GenerationsStarted(job_);
    const std::int64_t step = c_->Step(job_);
    if (c_->StepsTrained(job_) > last_step_) {
      last_step_ = c_->StepsTrained(job_);
      generations_at_step_ = started;
    }
    if (started - generations_at_step_ > kMaxGenerationsWithoutStep && !livelock_said_) {
      livelock_said_ = true;
      Violate("D3", std::to_string(started - generations_at_step_) + " generations without a trained step (at step " +
                        std::to_string(step) + ")");
    }
    // D6, D7 (checkpoint_truth.h), as they happened during the tick
    CheckpointViolations();
  }

  void CheckpointViolations() {
    for (const auto& v : ckpt_faults_->Check()) Violate(v.invariant, v.what);
    for (const auto& v : disk_faults_->Check()) Violate(v.invariant, v.what);
  }

  bool Ended() {
    if (c_->Formed(job_) == 0 || !c_->Done(job_)) return false;
    auto row = c_->Job(job_);
    return row.ok() && p::IsTerminal(row->state);
  }

  void Finish() {
    // Let the last exits be acknowledged (an agent resends every 2 s), once
    // the faults drawn for the run are over (a window of loss, a deaf agent).
    if (Ended()) {
      while (next_ < plan_.size() && Now() < kHorizon) {
        Apply();
        c_->Run(DrivenCluster::kTick);
      }
      c_->Run(5);
      CheckpointViolations();
    }
    auto row = c_->Job(job_);
    out_.completed = row.ok() && row->state == p::JobState::kCompleted;
    out_.end_time = Now();
    out_.steps = c_->Step(job_);
    out_.generations = c_->GenerationsStarted(job_);
    out_.events = static_cast<std::int64_t>(plan_.size());
    out_.kills += ckpt_faults_->kills() + disk_faults_->kills();
    out_.checkpoints = c_->Checkpoints(job_)->good();
    out_.torn = c_->Checkpoints(job_)->torn();
    out_.retrained = c_->Checkpoints(job_)->most_retrained();
    out_.checkpoints_failed = c_->Checkpoints(job_)->failed();
    out_.checkpoints_corrupted = c_->Checkpoints(job_)->corrupted();
    const unsigned lossy = kDaemonLoss | kDaemonPartition | kDaemonOneWay | kDaemonRestart;
    for (const auto& v : disk_faults_->Finish(!(o_.faults & lossy), o_.faults & kDaemonDup)) Violate(v.invariant, v.what);
    if (!out_.completed)
      Violate("D4", "the job did not complete by " + Fmt(kHorizon) + " s (" +
                        (row.ok() ? std::string(p::ToString(row->state)) : row.status().ToString()) + ", step " +
                        std::to_string(out_.steps) + ")");
    for (const char* a : {"t1", "t2", "i1"})
      if (!c_->agent(a).silent && !c_->agent(a).exits().empty())
        Violate("D4", std::string(a) + " still holds " + std::to_string(c_->agent(a).exits().Unacked().size()) +
                          " unacknowledged exits at the end");
    if (o_.trace)
      for (const auto& e : c_->Events(job_)) Trace(Fmt(e.time - DrivenCluster::kT0) + " " + e.kind + ": " + e.detail);
  }

  void Violate(const std::string& invariant, const std::string& what) {
    out_.violations.push_back({Now(), invariant, what});
    Trace("VIOLATION " + invariant + ": " + what);
  }
  void Trace(const std::string& line) {
    if (o_.trace) out_.trace.push_back(Fmt(Now()) + " " + line);
  }

  static std::string Fmt(double v) {
    std::ostringstream s;
    s.setf(std::ios::fixed);
    s.precision(2);
    s << v;
    return s.str();
  }

  struct Planned {
    double at;
    std::string what;
    std::function<void()> fn;
  };
  const Options o_;
  std::mt19937_64 rng_;
  std::unique_ptr<DrivenCluster> c_;
  std::shared_ptr<bool> disk_full_;
  NetworkFaults net_;
  p::JobId job_ = 0;
  std::vector<Planned> plan_;
  std::size_t next_ = 0;
  daemon::testing::RuntimeModel::Checkpoints ckpt_;
  std::unique_ptr<CheckpointFaults> ckpt_faults_;
  std::unique_ptr<CheckpointDiskFaults> disk_faults_;
  bool lent_ = false;
  double returned_by_ = -1;
  bool reclaim_unchecked_ = false;
  double reclaim_slack_ = 0;
  std::int64_t last_step_ = 0;
  int generations_at_step_ = 0;
  bool livelock_said_ = false;
  std::int64_t two_copies_said_ = 0;
  std::vector<std::string> paused_heard_;  // D5's subjects (Pause)
  double paused_for_ = 0;
  std::size_t paused_next_ = 0;  // the plan's next fault when the pause ended
  Outcome out_;
};

}  // namespace

Outcome RunDaemonSeed(const Options& options) {
  // The daemon's log lines are the binary's; a run reports through its
  // trace and violations instead, and with daemon_log keeps them there too
  // (LogToTrace), at virtual time.
  const auto level = spdlog::get_level();
  auto saved = spdlog::default_logger();
  Outcome out;
  if (options.trace && options.daemon_log) {
    DaemonRun run(options);
    auto sink = std::make_shared<LogToTrace>([&run](const std::string& line) { run.Log(line); });
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("simtest", sink));
    spdlog::set_level(spdlog::level::debug);
    out = run.Run();
    spdlog::set_default_logger(saved);  // before the run (and its sink's target) ends
    spdlog::set_level(spdlog::level::off);
  } else {
    spdlog::set_level(spdlog::level::off);
    out = DaemonRun(options).Run();
  }
  spdlog::set_default_logger(saved);
  spdlog::set_level(level);
  return out;
}

}  // namespace aryl::simtest
