// tiresias by the rules of its reference simulator (see tiresias_policy.cc and
// docs/scheduler.md): suspension without lost work, running jobs ahead of
// waiting ones within a queue, the reference thresholds, starvation promotion,
// and rounds at the exact time a queue change is due.
#include <gtest/gtest.h>

#include "test_util.h"

namespace aryl::sched::testing {
namespace {

std::string StartReason(const Plan& plan, JobId job) {
  for (const auto& a : plan.actions) {
    if (a.type == ActionType::kStart && a.job == job) return a.reason;
  }
  return "";
}

TEST(TiresiasTest, SuspensionLosesNoWorkAndResumePaysTheResumePause) {
  // Job 1 (8 GPUs) reaches the 800 GPU-s threshold at t=100 and is suspended for
  // job 2; when job 2 is demoted at t=200, job 1 resumes with all its work kept.
  SchedulerConfig config;
  config.tiresias_thresholds = {800};
  config.checkpoint_interval = 1800;  // no periodic checkpoint in between
  Harness h(Servers(1, 0), "tiresias", config);
  h.Submit(Inelastic(1, 8, 1e6), 0);
  h.Submit(Inelastic(2, 8, 1e6), 50);
  EXPECT_EQ(h.job(2).status, JobStatus::kQueued);
  EXPECT_DOUBLE_EQ(h.scheduler().NextWakeup(), 100);
  h.Send(Tick{}, 50);  // t=100
  EXPECT_EQ(h.job(1).status, JobStatus::kQueued);
  EXPECT_EQ(h.job(2).status, JobStatus::kRunning);
  EXPECT_DOUBLE_EQ(h.job(1).remaining_work, 1e6 - 800);
  EXPECT_DOUBLE_EQ(h.job(1).stats.lost_work, 0);
  EXPECT_DOUBLE_EQ(h.scheduler().NextWakeup(), 200);
  h.Send(Tick{}, 100);  // t=200
  EXPECT_EQ(h.job(1).status, JobStatus::kRunning);
  EXPECT_DOUBLE_EQ(h.job(1).paused_until, 200 + config.resume_pause);
  EXPECT_EQ(h.job(2).status, JobStatus::kQueued);
  EXPECT_DOUBLE_EQ(h.job(2).stats.lost_work, 0);
}

TEST(TiresiasTest, AWaitingJobNeverPreemptsARunningOneOfItsQueue) {
  // Job 2 (8 GPUs) waits behind job 1 (4 GPUs) while job 3 (4 GPUs) backfills.
  // When job 1 ends, job 2 is older than job 3 but waits: running jobs keep
  // their place ahead of waiting ones.
  SchedulerConfig config;
  config.tiresias_thresholds = {1e12};
  Harness h(Servers(1, 0), "tiresias", config);
  h.Submit(Inelastic(1, 4, 40), 0);  // 4 it/s: done at t=10
  h.Submit(Inelastic(2, 8, 1e6), 1);
  h.Submit(Inelastic(3, 4, 1e6), 1);
  EXPECT_EQ(h.job(3).status, JobStatus::kRunning);
  h.Send(JobFinished{1}, 8);  // t=10
  EXPECT_EQ(h.job(3).status, JobStatus::kRunning);
  EXPECT_EQ(h.job(3).stats.preemptions, 0);
  EXPECT_EQ(h.job(2).status, JobStatus::kQueued);
}

TEST(TiresiasTest, ReferenceThresholdsDemoteAnEightGpuJobAfter3250GpuSeconds) {
  // Defaults 3,250 and 7,200 GPU-s: an 8-GPU job leaves queue 0 after 406.25 s.
  SchedulerConfig config;
  EXPECT_EQ(config.tiresias_thresholds, (std::vector<double>{3250, 7200}));
  Harness h(Servers(1, 0), "tiresias", config);
  h.Submit(Inelastic(1, 8, 1e7), 0);
  EXPECT_DOUBLE_EQ(h.scheduler().NextWakeup(), 406.25);
  h.Submit(Inelastic(2, 8, 1e7), 1);
  h.Send(Tick{}, 405);  // t=406: not yet
  EXPECT_EQ(h.job(1).status, JobStatus::kRunning);
  h.Send(Tick{}, 0.25);  // t=406.25
  EXPECT_EQ(h.job(1).status, JobStatus::kQueued);
  EXPECT_EQ(h.job(2).status, JobStatus::kRunning);
}

TEST(TiresiasTest, AStarvedJobIsPromotedAfterWaitingTwiceItsRunningTime) {
  // Job 1 (8 GPUs) runs 100 s, is demoted and suspended for job 2 (1 GPU), which
  // holds a GPU until its own demotion at t=900. Job 1 has waited 2 x 100 s at
  // t=300 and returns to queue 0, so it resumes from queue 0.
  SchedulerConfig config;
  config.tiresias_thresholds = {800};
  Harness h(Servers(1, 0), "tiresias", config);
  h.Submit(Inelastic(1, 8, 1e7), 0);
  h.Submit(Inelastic(2, 1, 1e7), 50);
  h.Send(Tick{}, 50);  // t=100: job 1 demoted, job 2 starts
  EXPECT_EQ(h.job(1).status, JobStatus::kQueued);
  EXPECT_DOUBLE_EQ(h.scheduler().NextWakeup(), 300);
  h.Send(Tick{}, 200);  // t=300: promotion (job 1 still does not fit beside job 2)
  EXPECT_EQ(h.job(1).status, JobStatus::kQueued);
  EXPECT_DOUBLE_EQ(h.scheduler().NextWakeup(), 900);
  Plan p = h.Send(Tick{}, 600);  // t=900: job 2 demoted; job 1 resumes from queue 0
  EXPECT_EQ(h.job(1).status, JobStatus::kRunning);
  EXPECT_EQ(StartReason(p, 1), "tiresias: resume (2D-LAS queue 0)");
  EXPECT_EQ(h.job(2).status, JobStatus::kQueued);
}

TEST(TiresiasTest, NoStarvationPromotionWhenTheFactorIsZero) {
  // The same scenario without promotion: job 1 resumes from queue 1.
  SchedulerConfig config;
  config.tiresias_thresholds = {800};
  config.tiresias_starve_factor = 0;
  Harness h(Servers(1, 0), "tiresias", config);
  h.Submit(Inelastic(1, 8, 1e7), 0);
  h.Submit(Inelastic(2, 1, 1e7), 50);
  h.Send(Tick{}, 50);
  EXPECT_DOUBLE_EQ(h.scheduler().NextWakeup(), 900);
  Plan p = h.Send(Tick{}, 800);
  EXPECT_EQ(StartReason(p, 1), "tiresias: resume (2D-LAS queue 1)");
}

}  // namespace
}  // namespace aryl::sched::testing
