#include <random>

#include <gtest/gtest.h>

#include "aryl/sched/scheduler.h"
#include "test_util.h"

namespace aryl::sched {
namespace {

using testing::Elastic;
using testing::Harness;
using testing::Inelastic;
using testing::Servers;

// A small simulator loop: random submissions, loans, reclaims, failures, and
// JobFinished at the core's own estimated finish times. The Harness checks the
// invariants after every action.
void RandomRun(const std::string& policy, std::uint64_t seed) {
  auto servers = Servers(3, 3);
  auto t4 = Servers(1, 1, 4, "T4", 6);
  servers.insert(servers.end(), t4.begin(), t4.end());
  Harness h(servers, policy);
  std::mt19937_64 rng(seed);
  JobId next = 1;
  for (int step = 0; step < 150; ++step) {
    const Seconds dt = 1 + static_cast<double>(rng() % 200);
    // Finish whatever completes before the next event, at its own time.
    if (auto c = h.state().NextCompletion(); c && c->first <= h.now() + dt) {
      h.Send(JobFinished{c->second}, c->first - h.now());
      continue;
    }
    switch (rng() % 8) {
      case 0:
      case 1:
      case 2: {
        const int n = 1 + static_cast<int>(rng() % 8);
        const char* model = rng() % 2 ? "linear" : "sublinear";
        JobSpec j = rng() % 2 ? Inelastic(next, n, 500 + rng() % 20000, model)
                              : Elastic(next, n, n + static_cast<int>(rng() % 12),
                                        500 + rng() % 20000, model);
        if (rng() % 4 == 0) j.gpu_types = {rng() % 2 ? "T4" : "A100"};
        if (j.kind == JobKind::kElastic && rng() % 3 == 0) {
          j.granularity.kind = Granularity::Kind::kPowerOfTwo;
          j.min_workers = 1;
          j.max_workers = 16;
        }
        h.Submit(j, dt);
        ++next;
        break;
      }
      case 3: {
        auto held = h.state().HeldServers();
        std::vector<ServerId> ok;
        for (ServerId s : held) {
          if (!h.state().server(s)->failed) ok.push_back(s);
        }
        if (!ok.empty()) h.Loan({ok[rng() % ok.size()]}, dt);
        break;
      }
      case 4: {
        const int loaned = static_cast<int>(h.state().LoanedServers().size());
        if (loaned > 0) h.ReclaimCount(1 + static_cast<int>(rng() % loaned), dt);
        break;
      }
      case 5: {
        const ServerId s = static_cast<ServerId>(rng() % 8);
        if (h.state().server(s)->failed) {
          h.Send(ServerRecovered{s}, dt);
        } else if (rng() % 3 == 0) {
          h.Send(ServerFailed{s}, dt);
        }
        break;
      }
      case 6:
        if (!h.state().queued().empty() && rng() % 4 == 0) {
          h.Send(JobCancelled{*h.state().queued().begin()}, dt);
        } else {
          h.Send(Tick{}, dt);
        }
        break;
      default:
        if (!h.state().running().empty()) {
          const JobId j = *h.state().running().begin();
          h.Send(JobProgress{j, h.job(j).remaining_work * 0.9}, dt);
        }
        break;
    }
    // A round is a fixed point: scheduling again at once changes nothing.
    Plan again = h.Send(Tick{}, 0);
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(h.actions(), 0);
  for (const auto& r : h.state().reclaims()) EXPECT_TRUE(r.met());
}

class EveryPolicyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryPolicyTest, RandomEventsKeepEveryInvariant) {
  // Random events under every policy and reclaim strategy keep the invariants.
  for (std::uint64_t seed = 1; seed <= 4; ++seed) RandomRun(GetParam(), seed);
}

INSTANTIATE_TEST_SUITE_P(Policies, EveryPolicyTest,
                         ::testing::Values("aryl", "baseline", "loan-only", "elastic-only",
                                           "optimus", "afs", "tiresias", "aryl:random",
                                           "aryl:fewest-gpus", "aryl:exact"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = std::isalnum(c) ? c : '_';
                           return n;
                         });

TEST(PolicyTest, SameEventsGiveTheSamePlans) {
  // Determinism: two schedulers fed the same events emit identical plans.
  auto run = [](const std::string& policy) {
    Harness h(Servers(2, 2), policy);
    std::vector<Action> all;
    auto keep = [&](const Plan& p) { all.insert(all.end(), p.actions.begin(), p.actions.end()); };
    keep(h.Loan({2, 3}));
    for (JobId j = 1; j <= 12; ++j) {
      keep(h.Submit(j % 3 ? Elastic(j, 1, 6, 1000.0 * j) : Inelastic(j, 3, 500.0 * j), 7));
    }
    keep(h.ReclaimCount(1, 5));
    keep(h.Send(JobFinished{*h.state().running().begin()}, 5));
    return all;
  };
  for (const char* p : {"aryl", "aryl:random", "tiresias", "afs"}) {
    auto a = run(p), b = run(p);
    ASSERT_EQ(a.size(), b.size()) << p;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].type, b[i].type) << p;
      EXPECT_EQ(a[i].job, b[i].job) << p;
      EXPECT_EQ(a[i].placement, b[i].placement) << p;
      EXPECT_EQ(a[i].server, b[i].server) << p;
    }
  }
}

TEST(PolicyTest, BaselineNeverUsesLoanedServersNorGrows) {
  // baseline runs an elastic job at its requested size on training servers only.
  Harness h(Servers(1, 1), "baseline");
  h.Loan({1});
  JobSpec j = Elastic(1, 2, 8, 1e6);
  j.requested_workers = 4;
  h.Submit(j, 1);
  h.Submit(Inelastic(2, 8, 1e6), 1);
  EXPECT_EQ(h.job(1).workers, 4);
  EXPECT_EQ(h.job(1).placement.count(1), 0u);
  EXPECT_EQ(h.job(2).status, JobStatus::kQueued);  // would fit only on the loaned server
}

TEST(PolicyTest, LoanOnlyUsesLoanedServersAtRequestedSizes) {
  // loan-only places a job on a loaned server but never resizes it.
  Harness h(Servers(1, 1), "loan-only");
  h.Loan({1});
  h.Submit(Inelastic(1, 8, 1e6), 1);
  h.Submit(Elastic(2, 2, 8, 1e6), 1);  // requested = max = 8
  EXPECT_EQ(h.job(2).workers, 8);
  EXPECT_EQ(h.job(2).placement.count(1), 1u);
}

TEST(PolicyTest, ElasticOnlyGrowsOnTrainingServersOnly) {
  // elastic-only grows into free training GPUs but not onto loaned servers.
  Harness h(Servers(1, 1), "elastic-only");
  h.Loan({1});
  h.Submit(Elastic(1, 2, 16, 1e6), 1);
  EXPECT_EQ(h.job(1).workers, 8);
  EXPECT_EQ(h.job(1).placement.count(1), 0u);
}

TEST(PolicyTest, KnapsackChargesEachRescaleKindItsOwnPause) {
  // 6 of 8 GPUs free up when job 1 ends; job 2 (at 2 workers, 100 iterations
  // left) would save 100/2 - 100/8 = 37.5 s by growing to 8. That beats the
  // in-place pause (10 s) but not the restart pause (100 s): only the in-place
  // job grows, and the restart job does once enough work is left.
  SchedulerConfig config;
  config.rescale_pause = 10;
  config.restart_pause = 100;
  for (Rescale kind : {Rescale::kInPlace, Rescale::kRestart}) {
    Harness h(Servers(1, 0), "aryl", config);
    h.Submit(Inelastic(1, 6, 1e6), 0);
    JobSpec elastic = Elastic(2, 2, 8, 200);
    elastic.rescale = kind;
    h.Submit(elastic, 0);
    ASSERT_EQ(h.job(2).workers, 2);
    h.Send(JobFinished{1}, 50);  // 100 iterations left
    EXPECT_EQ(h.job(2).workers, kind == Rescale::kInPlace ? 8 : 2) << static_cast<int>(kind);
    EXPECT_DOUBLE_EQ(h.job(2).remaining_work, 100);
  }
  // With 1000 iterations left the restart job's gain (375 s) pays its pause.
  Harness h(Servers(1, 0), "aryl", config);
  h.Submit(Inelastic(1, 6, 1e6), 0);
  JobSpec elastic = Elastic(2, 2, 8, 1100);
  elastic.rescale = Rescale::kRestart;
  h.Submit(elastic, 0);
  h.Send(JobFinished{1}, 50);
  EXPECT_EQ(h.job(2).workers, 8);
}

TEST(PolicyTest, OptimusAndAfsShareFreeGpusAmongElasticJobs) {
  // Both peers hand all 8 GPUs to two elastic jobs with diminishing returns.
  for (const char* p : {"optimus", "afs", "aryl"}) {
    Harness h(Servers(1, 0), p);
    h.Submit(Elastic(1, 1, 8, 2e5, "sublinear"), 0);
    h.Submit(Elastic(2, 1, 8, 1e4, "sublinear"), 0);
    EXPECT_GE(h.job(1).workers, 1) << p;
    EXPECT_GE(h.job(2).workers, 1) << p;
    EXPECT_EQ(h.job(1).workers + h.job(2).workers, 8) << p;
  }
}

TEST(PolicyTest, AfsFavoursTheShortJobOptimusTheLargestAbsoluteGain) {
  // Two elastic jobs on "sublinear", one 20x longer, 6 spare GPUs: AFS gives the
  // short job more workers than the long one; Optimus the long one (its
  // completion time drops most per GPU).
  auto run = [](const char* policy) {
    Harness h(Servers(1, 0), policy);
    h.Submit(Elastic(1, 1, 7, 2e5, "sublinear"), 0);  // long
    h.Submit(Elastic(2, 1, 7, 1e4, "sublinear"), 0);  // short
    return std::make_pair(h.job(1).workers, h.job(2).workers);
  };
  auto afs = run("afs");
  auto optimus = run("optimus");
  EXPECT_GT(afs.second, afs.first);
  EXPECT_GT(optimus.first, optimus.second);
}

TEST(PolicyTest, NamedReclaimOfAFailedLoanedServer) {
  // A failed loaned server is empty and can be returned at once.
  Harness h(Servers(1, 2));
  h.Loan({1, 2});
  h.Submit(Elastic(1, 2, 24, 1e9), 1);
  h.Send(ServerFailed{1}, 1);
  Plan plan = h.ReclaimNamed({1}, 1);
  EXPECT_EQ(testing::Count(plan, ActionType::kPreempt), 0);
  EXPECT_EQ(h.state().server(1)->state, ServerState::kHeld);
  EXPECT_EQ(h.job(1).stats.preemptions, 0);
}

TEST(PolicyTest, AReclaimWithoutADeadlineIsDueAtOnceAndMet) {
  // A reclaim whose deadline is unset (0) or past is due at its own time and met.
  Harness h(Servers(1, 1));
  h.Loan({1});
  h.Submit(Elastic(1, 2, 16, 1e9), 1);
  Reclaim r;
  r.count = 1;
  h.Send(r, 10);
  ASSERT_EQ(h.state().reclaims().size(), 1u);
  EXPECT_DOUBLE_EQ(h.state().reclaims()[0].deadline, 11);
  EXPECT_TRUE(h.state().reclaims()[0].met());
  EXPECT_TRUE(h.state().PendingReclaims().empty());
}

TEST(PolicyTest, HeterogeneousTypesKeepEachJobOnOneType) {
  // Extras come from the job's own (home) GPU type; a T4-only job never gets A100s.
  auto servers = Servers(1, 0, 8, "A100");
  auto t4 = Servers(1, 0, 8, "T4", 1);
  servers.insert(servers.end(), t4.begin(), t4.end());
  Harness h(servers);
  JobSpec a = Elastic(1, 2, 16, 1e6);
  JobSpec t = Elastic(2, 2, 16, 1e6);
  t.gpu_types = {"T4"};
  h.Submit(a, 0);
  h.Submit(t, 0);
  // Job 1 prefers the faster A100 and grows there; job 2 grows on the T4 server.
  EXPECT_EQ(h.job(1).placement, (Placement{{0, 8}}));
  EXPECT_EQ(h.job(2).placement, (Placement{{1, 8}}));
  EXPECT_DOUBLE_EQ(h.job(2).throughput, 4.0);  // T4 = half of A100's 8
}

TEST(PolicyTest, HeteroDpGivesIdleLoanedGpusOfAnotherTypeToElasticJobs) {
  // One A100 training server and one loaned T4 server (half speed). An elastic
  // job [8, 16] fills the A100s. By default it stays there (one type per job)
  // and the T4s sit idle; with hetero_dp it takes the 8 T4s as guests and runs
  // at (8 x 16 + 8 x 8) / 16 = 12 it/s (batch shares proportional to speed)
  // instead of 8. A reclaim of the T4 server shrinks it back to its A100s.
  auto servers = Servers(1, 0, 8, "A100");
  auto t4 = Servers(0, 1, 8, "T4", 1);
  servers.insert(servers.end(), t4.begin(), t4.end());
  for (bool hetero : {false, true}) {
    SchedulerConfig config;
    config.hetero_dp = hetero;
    Harness h(servers, "aryl", config);
    h.Loan({1});
    h.Submit(Elastic(1, 8, 16, 1e6), 0);
    if (!hetero) {
      EXPECT_EQ(h.job(1).placement, (Placement{{0, 8}}));
      EXPECT_DOUBLE_EQ(h.job(1).throughput, 8.0);
      continue;
    }
    EXPECT_EQ(h.job(1).placement, (Placement{{0, 8}, {1, 8}}));
    EXPECT_DOUBLE_EQ(h.job(1).throughput, 12.0);
    Plan p = h.ReclaimCount(1, 10);
    EXPECT_EQ(testing::Count(p, ActionType::kPreempt), 0);
    EXPECT_EQ(h.job(1).placement, (Placement{{0, 8}}));
    EXPECT_DOUBLE_EQ(h.job(1).throughput, 8.0);
  }
}

TEST(PolicyTest, MinTypeSpeedKeepsJobsOffMuchSlowerGpus) {
  // With the A100 server full, a job waits rather than run on T4 (half speed)
  // when min_type_speed is 0.6; by default it takes the T4 server.
  auto servers = Servers(1, 0, 8, "A100");
  auto t4 = Servers(1, 0, 8, "T4", 1);
  servers.insert(servers.end(), t4.begin(), t4.end());
  for (double min_speed : {0.0, 0.6}) {
    SchedulerConfig config;
    config.min_type_speed = min_speed;
    Harness h(servers, "aryl", config);
    h.Submit(Inelastic(1, 8, 1e6), 0);
    h.Submit(Inelastic(2, 8, 1e6), 1);
    EXPECT_EQ(h.job(2).status, min_speed > 0 ? JobStatus::kQueued : JobStatus::kRunning);
  }
}

TEST(PolicyTest, SjfAdmitsTheShortestJobFirst) {
  // With room for one of two queued jobs, SJF picks the shorter; FIFO the earlier.
  for (bool fifo : {false, true}) {
    SchedulerConfig config;
    config.fifo = fifo;
    Harness h(Servers(1, 0), "baseline", config);
    h.Submit(Inelastic(1, 8, 800), 0);
    h.Submit(Inelastic(2, 8, 1e6), 1);
    h.Submit(Inelastic(3, 8, 100), 1);
    h.Send(JobFinished{1}, 98);
    EXPECT_EQ(h.job(fifo ? 2 : 3).status, JobStatus::kRunning) << "fifo=" << fifo;
  }
}

TEST(PolicyTest, SlowTypeOnlyWhenWaitingForTheFastTypeIsLonger) {
  // With the A100 server busy, a queued job starts on the T4 server (half speed)
  // only when the A100 frees up later than the move back would cost.
  auto servers = Servers(1, 0, 8, "A100");
  auto t4 = Servers(1, 0, 8, "T4", 1);
  servers.insert(servers.end(), t4.begin(), t4.end());
  for (double first_work : {80.0, 1e6}) {  // the A100 frees after 10 s or 125,000 s
    Harness h(servers);
    h.Submit(Inelastic(1, 8, first_work), 0);
    h.Submit(Inelastic(2, 8, 1e6), 0);
    EXPECT_EQ(h.job(2).status, first_work < 100 ? JobStatus::kQueued : JobStatus::kRunning)
        << "first_work=" << first_work;
  }
}

TEST(PolicyTest, JobsOnASlowTypeMigrateWhenTheFastTypeFreesUp) {
  // A job started on T4 moves to the A100 server once it frees: an elastic job by
  // a resize (no work lost), an inelastic one by a restart from its checkpoint.
  auto servers = Servers(1, 0, 8, "A100");
  auto t4 = Servers(1, 0, 8, "T4", 1);
  servers.insert(servers.end(), t4.begin(), t4.end());
  for (bool elastic : {false, true}) {
    Harness h(servers);
    h.Submit(Inelastic(1, 8, 1e5), 0);
    h.Submit(elastic ? Elastic(2, 8, 8, 1e6) : Inelastic(2, 8, 1e6), 0);
    ASSERT_EQ(h.job(2).placement, (Placement{{1, 8}})) << "elastic=" << elastic;
    h.Send(JobFinished{1}, 12500);
    EXPECT_EQ(h.job(2).placement, (Placement{{0, 8}})) << "elastic=" << elastic;
    EXPECT_EQ(h.job(2).stats.rescales, elastic ? 1 : 0);
    EXPECT_EQ(h.job(2).stats.preemptions, elastic ? 0 : 1);
    // A job nearly done on the slow type stays there.
    Harness g(servers);
    g.Submit(Inelastic(1, 8, 1e5), 0);
    g.Submit(Inelastic(2, 8, 50800), 0);
    g.Send(JobFinished{1}, 12500);  // job 2 has 200 s left on T4; a restart costs more
    EXPECT_EQ(g.job(2).placement, (Placement{{1, 8}}));
  }
}

}  // namespace
}  // namespace aryl::sched
