#include <cstdio>
#include <random>

#include <gtest/gtest.h>

#include "aryl/sched/reclaim.h"
#include "reclaim_internal.h"
#include "test_util.h"

namespace aryl::sched {
namespace {

using testing::Count;
using testing::Elastic;
using testing::Harness;
using testing::Inelastic;
using testing::Servers;

// A random small cluster: 1 training server and 6 loaned 4-GPU servers, filled
// with a random mix of inelastic and elastic jobs, some of which have finished.
// With `random_lengths`, jobs run 30 s to 3,000 s (linear model, 1 iteration
// per worker-second) or practically forever, and none has finished.
std::unique_ptr<Harness> RandomCluster(std::mt19937_64& rng, bool random_lengths = false) {
  auto servers = Servers(1, 0);
  auto loaned = Servers(0, 6, 4, "A100", 1);
  servers.insert(servers.end(), loaned.begin(), loaned.end());
  auto h = std::make_unique<Harness>(servers);
  h->Loan({1, 2, 3, 4, 5, 6});
  const int jobs = 3 + static_cast<int>(rng() % 8);
  static const double kSeconds[] = {30, 100, 250, 1000, 3000, 1e6};
  for (int j = 1; j <= jobs; ++j) {
    const int n = 1 + static_cast<int>(rng() % 6);
    const double work = random_lengths ? n * kSeconds[rng() % 6] : 1e9;
    if (rng() % 2) {
      h->Submit(Inelastic(j, n, work), 1);
    } else {
      h->Submit(Elastic(j, n, n + static_cast<int>(rng() % 8), work), 1);
    }
  }
  if (random_lengths) return h;
  for (int j = 1; j <= jobs; ++j) {
    if (rng() % 4 == 0 && h->job(j).status != JobStatus::kFinished) h->Send(JobFinished{static_cast<JobId>(j)}, 1);
  }
  return h;
}

// A reclaim of `k` servers with `notice` seconds before its deadline, decided on h's state.
Result<ReclaimDecision> DecideWithNotice(const Harness& h, int k, ReclaimStrategy s, double notice) {
  Reclaim r;
  r.count = k;
  r.deadline = h.now() + notice;
  return DecideReclaim(h.state(), r, s, 1);
}

TEST(ReclaimTest, GreedyAgainstExactOnRandomSmallInstances) {
  // The greedy strategy is compared with exhaustive search; the share of
  // instances where it is optimal (preemptions, then lost GPU-time) is reported.
  std::mt19937_64 rng(2024);
  int instances = 0, greedy_optimal = 0, greedy_same_preemptions = 0;
  int random_optimal = 0, fewest_optimal = 0;
  int greedy_preemptions = 0, exact_preemptions = 0;
  int differ = 0;
  for (int i = 0; i < 300; ++i) {
    auto h = RandomCluster(rng);
    const int loaned = static_cast<int>(h->state().LoanedServers().size());
    for (int k = 1; k <= std::min(4, loaned); ++k) {
      Reclaim r;
      r.count = k;
      auto exact = DecideReclaim(h->state(), r, ReclaimStrategy::kExact, 1);
      auto greedy = DecideReclaim(h->state(), r, ReclaimStrategy::kGreedy, 1);
      auto random = DecideReclaim(h->state(), r, ReclaimStrategy::kRandom, 1);
      auto fewest = DecideReclaim(h->state(), r, ReclaimStrategy::kFewestGpus, 1);
      ASSERT_TRUE(exact.ok() && greedy.ok() && random.ok() && fewest.ok());
      ASSERT_FALSE(exact->fell_back);
      ASSERT_EQ(greedy->servers.size(), static_cast<size_t>(k));
      // Nothing beats exhaustive search.
      EXPECT_FALSE(greedy->cost < exact->cost);
      EXPECT_FALSE(random->cost < exact->cost);
      EXPECT_FALSE(fewest->cost < exact->cost);
      ++instances;
      greedy_optimal += !(exact->cost < greedy->cost);
      greedy_same_preemptions += greedy->cost.preemptions == exact->cost.preemptions;
      random_optimal += !(exact->cost < random->cost);
      fewest_optimal += !(exact->cost < fewest->cost);
      differ += random->servers != fewest->servers;
      greedy_preemptions += greedy->cost.preemptions;
      exact_preemptions += exact->cost.preemptions;
    }
  }
  const double share = static_cast<double>(greedy_optimal) / instances;
  std::printf(
      "[reclaim] %d instances: greedy optimal %d (%.1f%%), same preemption count %d (%.1f%%); "
      "random optimal %.1f%% (%d), fewest-gpus optimal %.1f%% (%d); preemptions greedy %d vs "
      "exact %d\n",
      instances, greedy_optimal, 100 * share, greedy_same_preemptions,
      100.0 * greedy_same_preemptions / instances, 100.0 * random_optimal / instances,
      random_optimal, 100.0 * fewest_optimal / instances, fewest_optimal, greedy_preemptions,
      exact_preemptions);
  EXPECT_GT(differ, 0);  // the baselines do choose differently
  EXPECT_GE(share, 0.8);
  EXPECT_GE(static_cast<double>(greedy_same_preemptions) / instances, 0.95);
  EXPECT_GE(greedy_optimal, random_optimal);
}

TEST(ReclaimTest, IdleServersGoFirst) {
  // An idle loaned server is returned before any busy one, by every strategy.
  Harness h(Servers(0, 2));
  h.Loan({0, 1});
  h.Submit(Inelastic(1, 4, 1e9), 1);
  ASSERT_EQ(h.state().servers()[0].used, 4);
  for (auto s : {ReclaimStrategy::kGreedy, ReclaimStrategy::kRandom, ReclaimStrategy::kFewestGpus,
                 ReclaimStrategy::kExact}) {
    Reclaim r;
    r.count = 1;
    auto d = DecideReclaim(h.state(), r, s, 3);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->servers, std::vector<ServerId>{1}) << ReclaimStrategyName(s);
    EXPECT_EQ(d->cost.preemptions, 0);
  }
}

TEST(ReclaimTest, PreemptedJobFreesItsOtherServers) {
  // Returning one server of an inelastic job spread over two makes the other idle:
  // a reclaim of two then costs one preemption, not two.
  Harness h(Servers(0, 3));
  h.Loan({0, 1, 2});
  h.Submit(Inelastic(1, 12, 1e9), 1);  // on two servers
  h.Submit(Inelastic(2, 4, 1e9), 1);   // next to it
  Reclaim r;
  r.count = 2;
  auto d = DecideReclaim(h.state(), r, ReclaimStrategy::kGreedy, 1);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->cost.preemptions, 1);
}

TEST(ReclaimTest, ExactFallsBackToGreedyOnLargeInstances) {
  // Above the subset limit, exact says it used greedy.
  SchedulerConfig config;
  config.exact_reclaim_limit = 3;
  Harness h(Servers(0, 6), "aryl:exact", config);
  h.Loan({0, 1, 2, 3, 4, 5});
  for (int j = 1; j <= 6; ++j) h.Submit(Inelastic(j, 8, 1e9), 1);
  Reclaim r;
  r.count = 3;
  auto d = DecideReclaim(h.state(), r, ReclaimStrategy::kExact, 1);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->fell_back);
  Plan plan = h.ReclaimCount(3, 1);
  EXPECT_EQ(testing::Count(plan, ActionType::kReturnServer), 3);
}

}  // namespace
}  // namespace aryl::sched

namespace aryl::sched {
namespace {

TEST(ReclaimTest, ALongerNoticeNeverCostsMore) {
  // On random clusters whose jobs ran 600 s past their last checkpoint, every
  // strategy's reclaim costs no more preemptions and no more lost GPU-time with
  // a later deadline, and a notice long enough for the checkpoint saves work.
  std::mt19937_64 rng(7);
  int saved = 0;
  for (int i = 0; i < 100; ++i) {
    auto h = RandomCluster(rng);
    h->Send(Tick{}, 600);
    const int loaned = static_cast<int>(h->state().LoanedServers().size());
    for (int k = 1; k <= std::min(4, loaned); ++k) {
      for (auto s : {ReclaimStrategy::kExact, ReclaimStrategy::kGreedy, ReclaimStrategy::kFewestGpus}) {
        ReclaimCost prev;
        bool first = true;
        for (double notice : {0.0, 4.0, 10.0, 60.0, 300.0, 3600.0}) {
          auto d = DecideWithNotice(*h, k, s, notice);
          ASSERT_TRUE(d.ok()) << d.status();
          if (!first) {
            EXPECT_LE(d->cost.preemptions, prev.preemptions) << ReclaimStrategyName(s) << " notice " << notice;
            EXPECT_LE(d->cost.lost_gpu_seconds, prev.lost_gpu_seconds + 1e-6)
                << ReclaimStrategyName(s) << " notice " << notice;
          }
          for (const auto& a : d->actions) saved += a.type == ActionType::kPreempt && a.suspend;
          if (notice < h->state().config().CheckpointSeconds(0)) {
            for (const auto& a : d->actions) EXPECT_FALSE(a.suspend) << "notice " << notice;
          }
          prev = d->cost;
          first = false;
        }
      }
    }
  }
  EXPECT_GT(saved, 0);
}

TEST(ReclaimTest, ALongerDeadlineNeverCostsMoreWhenJobsMayFinish) {
  // On random clusters with jobs of random lengths, a reclaim with 0, 60, 300
  // or 3,600 s of notice: each longer deadline costs no more preemptions, and
  // no more lost GPU-time unless it saves preemptions, under every strategy;
  // jobs are left to finish (no action on them) only when they finish,
  // checkpoint time included, by it.
  std::mt19937_64 rng(11);
  int left = 0, fewer = 0;
  for (int i = 0; i < 150; ++i) {
    auto h = RandomCluster(rng, /*random_lengths=*/true);
    const int loaned = static_cast<int>(h->state().LoanedServers().size());
    for (int k = 1; k <= std::min(4, loaned); ++k) {
      for (auto s : {ReclaimStrategy::kExact, ReclaimStrategy::kGreedy, ReclaimStrategy::kFewestGpus,
                     ReclaimStrategy::kRandom}) {
        ReclaimCost prev;
        bool first = true;
        for (double notice : {0.0, 60.0, 300.0, 3600.0}) {
          auto d = DecideWithNotice(*h, k, s, notice);
          ASSERT_TRUE(d.ok()) << d.status();
          // Costs are ordered by (preemptions, lost GPU-time): fewer
          // preemptions may cost more shrink pauses, never the reverse.
          if (!first) {
            EXPECT_LE(d->cost.preemptions, prev.preemptions) << ReclaimStrategyName(s) << " notice " << notice;
            EXPECT_FALSE(prev < d->cost) << ReclaimStrategyName(s) << " notice " << notice << ": "
                                         << d->cost.lost_gpu_seconds << " GPU-s against "
                                         << prev.lost_gpu_seconds;
            if (d->cost.preemptions < prev.preemptions) ++fewer;
          }
          for (JobId j : d->left) {
            EXPECT_LE(h->state().EstimatedFinishTime(j) + h->state().config().CheckpointSeconds(0),
                      h->now() + notice + 1e-9);
            for (const auto& a : d->actions) EXPECT_NE(a.job, j) << "a job left to finish got an action";
          }
          if (notice == 0) EXPECT_TRUE(d->left.empty());
          left += static_cast<int>(d->left.size());
          prev = d->cost;
          first = false;
        }
      }
    }
  }
  EXPECT_GT(left, 0);
  EXPECT_GT(fewer, 0);
}

TEST(ReclaimTest, AJobThatFinishesBeforeTheDeadlineIsLeftToFinish) {
  // One loaned 8-GPU server runs J1 (8 workers, 100 s left). A reclaim with
  // 300 s of notice leaves it running (no preemption), returns the server when
  // J1 finishes at t=100, and the reclaim is met then. With 60 s of notice J1
  // cannot finish in time: it checkpoints on notice and is preempted at once.
  for (double notice : {300.0, 60.0}) {
    Harness h(Servers(0, 1));
    h.Loan({0});
    h.Submit(Inelastic(1, 8, 800));
    ASSERT_EQ(h.job(1).status, JobStatus::kRunning);
    Reclaim r;
    r.count = 1;
    r.deadline = h.now() + notice;
    Plan p = h.Send(r);
    if (notice == 60) {
      EXPECT_EQ(Count(p, ActionType::kPreempt), 1);
      EXPECT_TRUE(p.actions[0].suspend);
      EXPECT_EQ(Count(p, ActionType::kReturnServer), 1);
      EXPECT_TRUE(h.state().reclaims().back().met());
      continue;
    }
    EXPECT_TRUE(p.empty()) << p.actions.size() << " actions";
    EXPECT_EQ(h.job(1).status, JobStatus::kRunning);
    EXPECT_TRUE(h.state().server(0)->draining());
    EXPECT_FALSE(h.state().server(0)->usable());
    EXPECT_TRUE(h.state().LoanedServers().empty());  // a second reclaim cannot take it
    EXPECT_EQ(h.state().PendingReclaims().size(), 1u);
    EXPECT_EQ(h.state().reclaims().back().left_to_finish, 1);
    // Should J1 not be done, it leaves at the deadline minus its checkpoint time.
    EXPECT_DOUBLE_EQ(h.scheduler().NextWakeup(), 300 - h.state().config().CheckpointSeconds(0));
    // A job submitted meanwhile does not go to the draining server.
    h.Submit(Inelastic(2, 1, 10), 10);
    EXPECT_EQ(h.job(2).status, JobStatus::kQueued);
    p = h.Send(JobFinished{1}, 90);
    EXPECT_EQ(Count(p, ActionType::kReturnServer), 1);
    EXPECT_EQ(Count(p, ActionType::kPreempt), 0);
    const ReclaimRecord& rec = h.state().reclaims().back();
    EXPECT_TRUE(rec.met());
    EXPECT_DOUBLE_EQ(rec.met_time, 100);
    EXPECT_EQ(rec.preemptions, 0);
    EXPECT_FALSE(h.state().server(0)->draining());
    EXPECT_TRUE(h.state().PendingReclaims().empty());
  }
}

TEST(ReclaimTest, AJobLeftToFinishThatSlipsLeavesBeforeTheDeadline) {
  // J1 is left to finish (100 s left, 300 s notice); at t=50 its progress report
  // says 2,000 iterations remain (250 s more at 8/s): it no longer finishes in
  // time, so it checkpoints on notice and leaves, and the server is returned.
  // With no report it would still leave at the wakeup, 295 s.
  Harness h(Servers(0, 1));
  h.Loan({0});
  h.Submit(Inelastic(1, 8, 800));
  Reclaim r;
  r.count = 1;
  r.deadline = 300;
  EXPECT_TRUE(h.Send(r).empty());
  Plan p = h.Send(JobProgress{1, 2000}, 50);
  EXPECT_EQ(Count(p, ActionType::kPreempt), 1);
  EXPECT_TRUE(p.actions[0].suspend);
  EXPECT_EQ(Count(p, ActionType::kReturnServer), 1);
  EXPECT_TRUE(h.state().reclaims().back().met());
  EXPECT_EQ(h.state().reclaims().back().preemptions, 1);
  EXPECT_DOUBLE_EQ(h.job(1).remaining_work, 2000);  // nothing lost
}

TEST(ReclaimTest, AReclaimMetLateIsRecordedAndTheStateStillRestores) {
  // The driver sends nothing until after the deadline (no Tick at
  // NextWakeup): the job leaves and the server is returned at the first event
  // after it, late. The record says so; the state is consistent, and an
  // image of it restores.
  Harness h(Servers(0, 1));
  h.Loan({0});
  h.Submit(Inelastic(1, 8, 800));  // left to finish: done by t=100
  Reclaim r;
  r.count = 1;
  r.deadline = 300;
  EXPECT_TRUE(h.Send(r).empty());
  Plan p = h.Send(JobProgress{1, 2000}, 400);  // it slipped, and nobody asked
  EXPECT_EQ(Count(p, ActionType::kReturnServer), 1);
  const ReclaimRecord& rec = h.state().reclaims().back();
  EXPECT_DOUBLE_EQ(rec.met_time, 400);
  EXPECT_FALSE(rec.met()) << "late";
  EXPECT_TRUE(h.state().CheckInvariants().ok()) << h.state().CheckInvariants().ToString();
  auto restored = Scheduler::Restore("aryl", h.scheduler().Snapshot(), testing::Catalog(), h.state().config());
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_DOUBLE_EQ((*restored)->state().reclaims().back().met_time, 400);
}

TEST(ReclaimTest, WithoutLettingJobsFinishEveryServerIsReturnedAtOnce) {
  // reclaim_lets_jobs_finish = false (the daemon): the same reclaim preempts J1.
  SchedulerConfig c;
  c.reclaim_lets_jobs_finish = false;
  Harness h(Servers(0, 1), "aryl", c);
  h.Loan({0});
  h.Submit(Inelastic(1, 8, 800));
  Reclaim r;
  r.count = 1;
  r.deadline = 300;
  Plan p = h.Send(r);
  EXPECT_EQ(Count(p, ActionType::kPreempt), 1);
  EXPECT_EQ(Count(p, ActionType::kReturnServer), 1);
}

// The greedy's scan skips blocks of candidates that cannot hold its next
// choice: on random clusters of 150 loaned servers (many equal prices), every
// decision is the one a scan of every candidate makes.
TEST(ReclaimTest, GreedyBlockScanChoosesAsAFullScan) {
  std::mt19937_64 rng(39);
  int decisions = 0;
  for (int trial = 0; trial < 6; ++trial) {
    SchedulerConfig config;
    config.reclaim_lets_jobs_finish = trial % 2 == 1;
    auto servers = Servers(4, 0);
    auto loaned = Servers(0, 150, 4, "A100", 4);
    servers.insert(servers.end(), loaned.begin(), loaned.end());
    Harness h(servers, "aryl", config);
    std::vector<ServerId> ids;
    for (int i = 4; i < 154; ++i) ids.push_back(i);
    h.Loan(ids);
    static const double kSeconds[] = {30, 100, 250, 1000, 3000, 1e6};
    for (int j = 1; j <= 160; ++j) {
      const int n = 1 + static_cast<int>(rng() % 6);
      const double work = n * kSeconds[rng() % 6];
      if (rng() % 2) {
        h.Submit(Inelastic(j, n, work), 1 + j % 7);
      } else {
        h.Submit(Elastic(j, n, n + static_cast<int>(rng() % 8), work), 1 + j % 7);
      }
    }
    for (int k : {1, 7, 40, 120}) {
      for (double notice : {0.0, 50.0, 400.0, 5000.0}) {
        internal::SetGreedyBlockSkip(false);
        auto full = DecideWithNotice(h, k, ReclaimStrategy::kGreedy, notice);
        internal::SetGreedyBlockSkip(true);
        auto blocks = DecideWithNotice(h, k, ReclaimStrategy::kGreedy, notice);
        ASSERT_EQ(full.ok(), blocks.ok());
        if (!full.ok()) continue;
        EXPECT_EQ(full->servers, blocks->servers) << "trial " << trial << " k " << k << " notice " << notice;
        EXPECT_EQ(full->cost.preemptions, blocks->cost.preemptions);
        EXPECT_EQ(full->cost.lost_gpu_seconds, blocks->cost.lost_gpu_seconds);
        ++decisions;
      }
    }
  }
  EXPECT_GT(decisions, 60);
}

}  // namespace
}  // namespace aryl::sched
