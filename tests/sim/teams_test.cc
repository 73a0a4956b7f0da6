// aryl-sim --queues: job assignment and the per-queue measurements (teams.h).
#include <gtest/gtest.h>

#include <map>

#include "aryl/sched/queues.h"
#include "aryl/sim/teams.h"

namespace aryl::sim {
namespace {

sched::QueueConfig Queues(const std::string& csv) {
  auto q = sched::ParseQueuesCsv(csv, "q.csv", {{{"A100", 64}}, "A100"});
  EXPECT_TRUE(q.ok()) << q.status();
  return q.ok() ? *q : sched::QueueConfig{};
}

std::vector<sched::JobSpec> Jobs(int n, int gpus = 1) {
  std::vector<sched::JobSpec> out(n);
  for (int i = 0; i < n; ++i) {
    out[i].id = i + 1;
    out[i].name = "trace-job-" + std::to_string(i);
    out[i].min_workers = out[i].max_workers = gpus;
  }
  return out;
}

TEST(AssignQueuesTest, SharesAndPriorityMixHoldAndTheHashIsStable) {
  // 20,000 jobs: each queue's fraction within 0.01 of its jobs_share, each
  // class within 0.01 of its mix; the same id always gets the same queue.
  const auto queues = Queues(
      "queue,quota_gpus,weight,jobs_share,priority_mix\n"
      "a,16,1,0.5,0:1:0\n"
      "b,16,1,0.3,0.25:0.5:0.25\n"
      "c,16,1,0.2,1:0:0\n");
  auto jobs = Jobs(20000);
  ASSERT_TRUE(AssignQueues(jobs, queues, "A100", 64).ok());
  std::map<std::string, int> count;
  std::map<int, int> b_class;
  for (const auto& j : jobs) {
    ++count[j.queue];
    if (j.queue == "b") ++b_class[j.priority];
    if (j.queue == "a") EXPECT_EQ(j.priority, sched::kPriorityNormal);
    if (j.queue == "c") EXPECT_EQ(j.priority, sched::kPriorityLow);
  }
  EXPECT_NEAR(count["a"] / 20000.0, 0.5, 0.01);
  EXPECT_NEAR(count["b"] / 20000.0, 0.3, 0.01);
  EXPECT_NEAR(count["c"] / 20000.0, 0.2, 0.01);
  EXPECT_NEAR(b_class[sched::kPriorityLow] / double(count["b"]), 0.25, 0.02);
  EXPECT_NEAR(b_class[sched::kPriorityHigh] / double(count["b"]), 0.25, 0.02);
  // Stable: a job's queue depends on its id alone, not on the other jobs.
  auto few = Jobs(50);
  ASSERT_TRUE(AssignQueues(few, queues, "A100", 64).ok());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(few[i].queue, jobs[i].queue);
}

TEST(AssignQueuesTest, AJobLargerThanItsQueueCanEverHoldIsAnError) {
  // a: quota 4 and a borrowing limit of 2, so 6 at most. b and c share a
  // cohort on 64 GPUs with d alone in another: c (quota 8) can borrow b's
  // 16 (lent at most 10) and the 24 no quota covers: 8 + 10 + 24 = 42.
  const auto queues = Queues(
      "queue,quota_gpus,weight,jobs_share,borrow_limit,lend_limit,cohort\n"
      "a,4,1,0.25,2,-1,x\n"
      "b,16,1,0.25,-1,10,y\n"
      "c,8,1,0.25,-1,-1,y\n"
      "d,12,1,0.25,-1,-1,z\n");
  EXPECT_EQ(sched::QueueReach(queues, 0, "A100", 64), 6);
  EXPECT_EQ(sched::QueueReach(queues, 2, "A100", 64), 42);
  EXPECT_EQ(sched::QueueReach(queues, 1, "A100", 64), 16 + 8 + 24);
  EXPECT_EQ(sched::QueueReach(queues, 3, "A100", 64), 12 + 24);
  auto jobs = Jobs(40, 8);
  Status s = AssignQueues(jobs, queues, "A100", 64);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(
                "needs 8 GPUs, more than the queue can ever hold on training servers (6: its "
                "quota_gpus 4"),
            std::string::npos)
      << s;
  auto fits = Jobs(40, 6);
  EXPECT_TRUE(AssignQueues(fits, queues, "A100", 64).ok());
  const auto none = Queues("queue,quota_gpus,weight,jobs_share\na,4,1,0\n");
  EXPECT_FALSE(AssignQueues(jobs, none, "A100", 64).ok());
}

TEST(QueueMeterTest, QuotaHeldFractionSkipsTheFirstBoundSecondsOfEachStretch) {
  // Queue a, quota 8, bound 100 s. [0,200): demand 8 (waiting), holds 0;
  // [200,500): holds 8; [500,600): demand 2 (below quota); [600,900): demand
  // 10, holds 4 until 800 then 14. Counted: [100,200) not held, [200,500)
  // held, [700,800) not held, [800,900) held: 400 of 600 s.
  const auto queues = Queues("queue,quota_gpus,weight,jobs_share\na,8,1,1\n");
  QueueMeter m(queues, "A100", 100, 0);
  m.Waiting(0, 8);
  m.Advance(200);
  m.Waiting(0, -8);
  m.Held(0, 8, 0);
  m.Advance(500);
  m.Held(0, -6, 0);
  m.Advance(600);
  m.Held(0, 2, 0);
  m.Waiting(0, 6);
  m.Advance(800);
  m.Waiting(0, -6);
  m.Held(0, 6, 4);  // 10 on training (2 above quota), 4 on a loaned server
  m.Advance(900);
  std::vector<JobOutcome> outcomes = {{0, 10, 110, 100, "j", 0, 0, "A100"}};
  auto r = m.Finish(outcomes, {0});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NEAR(r[0].quota_held_fraction, 400.0 / 600.0, 1e-9);
  // Missed: [100,200) with an 8-GPU job waiting that fits the 8 left, and
  // [700,800) with a 6-GPU job that does not fit the 4 left.
  EXPECT_NEAR(r[0].quota_missed_s, 200, 1e-9);
  EXPECT_NEAR(r[0].quota_missed_fitting_s, 100, 1e-9);
  EXPECT_NEAR(r[0].gpu_hours, (8 * 300 + 2 * 100 + 4 * 200 + 14 * 100) / 3600.0, 1e-9);
  EXPECT_NEAR(r[0].borrowed_gpu_hours, 2 * 100 / 3600.0, 1e-9);
  EXPECT_NEAR(r[0].loaned_gpu_hours, 4 * 100 / 3600.0, 1e-9);
  EXPECT_EQ(r[0].jobs, 1);
  EXPECT_DOUBLE_EQ(r[0].avg_jct_s, 110);
  EXPECT_DOUBLE_EQ(r[0].avg_queue_s, 10);
}

}  // namespace
}  // namespace aryl::sim
