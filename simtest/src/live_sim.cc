#include "aryl/simtest/live_sim.h"

#include <functional>
#include <sstream>

#include "agents.h"
#include "invariants.h"
#include "job_truth.h"
#include "network.h"
#include "scheduler.h"
#include "workers.h"

namespace aryl::simtest {

Result<unsigned> ParseFaults(const std::string& list) {
  unsigned out = 0;
  std::stringstream ss(list);
  std::string word;
  while (std::getline(ss, word, ',')) {
    if (word == "all")
      out |= kFaultAll;
    else if (word == "none" || word.empty())
      continue;
    else if (word == "kill")
      out |= kFaultKill;
    else if (word == "loan")
      out |= kFaultLoan;
    else if (word == "network")
      out |= kFaultNetwork;
    else
      return Status::InvalidArgument("--faults: unknown fault '" + word +
                                     "' (known: kill, loan, network, all, none)");
  }
  return out;
}

std::string FaultsString(unsigned faults) {
  std::string s;
  for (auto [bit, name] :
       {std::pair{kFaultKill, "kill"}, {kFaultLoan, "loan"}, {kFaultNetwork, "network"}})
    if (faults & bit) s += (s.empty() ? "" : ",") + std::string(name);
  return s.empty() ? "none" : s;
}

namespace {

constexpr double kTick = 0.1;  // the scheduler's converge tick and the agents' store pump
constexpr double kHorizon = 1800;

// One run: the parts of the simulation, wired to each other, and what the
// seed decides (the cluster, the job, the faults). Each part's header says
// what it models and how.
class World {
 public:
  explicit World(const Options& opt)
      : opt_(opt),
        net_(opt.seed, (opt.faults & kFaultNetwork) != 0, opt.trace),
        checker_(net_, job_, workers_),
        scheduler_(net_, job_, checker_, agents_),
        agents_(net_, job_, workers_, scheduler_),
        workers_(net_, job_, agents_, scheduler_) {}

  Outcome Run();

 private:
  void SetUp();
  void ScheduleFaults();
  // SIGKILLs one of the workers `pick` accepts, drawn by the seed.
  void KillOne(bool (*pick)(const Worker&), const std::string& why);

  Options opt_;
  Network net_;
  JobTruth job_;
  InvariantChecker checker_;
  Scheduler scheduler_;
  Agents agents_;
  Workers workers_;
  double step_time_ = 0.3;
};

// The cluster and the job, from the seed: a training server and an
// inference server that lends itself, 2-3 slots each.
void World::SetUp() {
  const int train_slots = 2 + int(net_.Next() % 2);
  const int infer_slots = 2 + int(net_.Next() % 2);
  agents_.Add("train");
  agents_.Add("infer");
  scheduler_.AddNode("train", train_slots, /*inference=*/false);
  scheduler_.AddNode("infer", infer_slots, /*inference=*/true);
  scheduler_.SetJobSize(1, train_slots + infer_slots);
  job_.total_steps = 300 + std::int64_t(net_.Next() % 500);
  step_time_ = net_.Uniform(0.1, 0.5);
}

void World::KillOne(bool (*pick)(const Worker&), const std::string& why) {
  std::vector<std::int64_t> ids;
  for (const auto& [id, w] : workers_.all())
    if (pick(w)) ids.push_back(id);
  if (!ids.empty()) workers_.Kill(ids[net_.Next() % ids.size()], why);
}

void World::ScheduleFaults() {
  if (opt_.faults & kFaultLoan) {
    double t = net_.Uniform(2, 20);
    for (int cycle = 0; cycle < 4 && t < 600; ++cycle) {
      net_.At(t, [this] { scheduler_.Offer(); });
      double held = net_.Uniform(2, 60);
      double deadline = net_.Chance(0.5) ? 1.0 : net_.Uniform(2, 30);
      net_.At(t + held, [this, deadline] { scheduler_.Reclaim(deadline); });
      t += held + deadline + net_.Uniform(1, 40);
    }
  }
  if (opt_.faults & kFaultKill) {
    int kills = 1 + int(net_.Next() % 4);
    for (int k = 0; k < kills; ++k) {
      double t = net_.Uniform(3, 400);
      net_.At(t, [this] {
        KillOne([](const Worker& w) { return w.state != WorkerState::kGone; }, "SIGKILL");
      });
    }
    // A kill during a grow: shortly after the first offer's plan.
    if ((opt_.faults & kFaultLoan) && net_.Chance(0.5)) {
      double t = net_.Uniform(2, 20) + net_.Uniform(0.05, 1.0);
      net_.At(t, [this] {
        KillOne(
            [](const Worker& w) {
              return w.state == WorkerState::kStarting || w.state == WorkerState::kRendezvous;
            },
            "SIGKILL during a grow");
      });
    }
  }
}

Outcome World::Run() {
  SetUp();
  ScheduleFaults();

  // The periodic work: the scheduler's tick, the agents' pumps, the group's steps.
  std::function<void()> tick = [&] {
    scheduler_.Tick();
    for (int a = 0; a < agents_.size(); ++a) agents_.Pump(a);
    workers_.Timeouts();
    if (!job_.done) net_.After(kTick, tick);
  };
  std::function<void()> step = [&] {
    workers_.Step();
    if (!job_.done) scheduler_.ConvergeSoon();
    if (!job_.done) net_.After(step_time_, step);
  };
  net_.At(0, tick);
  net_.At(step_time_, step);

  Outcome out;
  while (!job_.done && net_.RunNext(kHorizon)) {
    ++out.events;
    checker_.Check();
    if (checker_.count() >= 20) break;
  }
  checker_.CheckEnded(kHorizon);
  out.violations = checker_.TakeViolations();
  out.completed = job_.done;
  out.end_time = net_.now();
  out.steps = job_.step;
  out.generations = scheduler_.plans();
  out.kills = workers_.kills();
  out.loans = scheduler_.loans();
  out.abandoned = agents_.abandoned();
  out.trace = net_.TakeTrace();
  return out;
}

}  // namespace

Outcome RunSeed(const Options& opt) {
  World w(opt);
  return w.Run();
}

}  // namespace aryl::simtest
