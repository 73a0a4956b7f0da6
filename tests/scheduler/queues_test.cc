// Teams (queues.h): the queues file's parser, and one test per quota rule.
#include <iostream>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "aryl/sched/pending.h"
#include "aryl/sched/queue_usage.h"
#include "aryl/sched/queues.h"
#include "aryl/sched/scheduler.h"
#include "test_util.h"

namespace aryl::sched {
namespace {

using testing::Elastic;
using testing::Harness;
using testing::Inelastic;
using testing::Servers;

QueueCluster Cluster(int gpus = 16) { return {{{"A100", gpus}}, "A100"}; }

std::shared_ptr<const QueueConfig> Queues(const std::string& csv, int gpus = 16) {
  auto q = ParseQueuesCsv(csv, "q.csv", Cluster(gpus));
  EXPECT_TRUE(q.ok()) << q.status();
  return std::make_shared<QueueConfig>(q.ok() ? *q : QueueConfig{});
}

SchedulerConfig WithQueues(const std::string& csv, int gpus = 16) {
  SchedulerConfig c;
  c.queues = Queues(csv, gpus);
  return c;
}

JobSpec In(JobSpec j, const std::string& queue, int priority = kPriorityNormal) {
  j.queue = queue;
  j.priority = priority;
  return j;
}

// Training GPUs (all workers) each queue's running jobs hold.
std::map<std::string, int> Held(const ClusterState& s) {
  std::map<std::string, int> out;
  for (JobId id : s.running()) {
    const JobInfo& j = *s.job(id);
    for (const auto& [sid, n] : j.placement) {
      if (!s.server(sid)->loaned()) out[j.spec.queue] += n;
    }
  }
  return out;
}

// Sends the Ticks the policy asks for (Scheduler::NextWakeup) up to `until`.
void TicksUntil(Harness& h, Seconds until) {
  for (int i = 0; i < 100; ++i) {
    const Seconds w = h.scheduler().NextWakeup();
    if (!(w > h.now()) || w > until) return;
    h.Send(Tick{}, w - h.now());
  }
}

// --- The queues file -------------------------------------------------------------

TEST(QueuesFileTest, ParsesColumnsInAnyOrderWithDefaults) {
  auto q = ParseQueuesCsv(
      "# teams\n"
      "weight,queue,jobs_share,quota_gpus,borrow_limit,cohort,priority_mix\n"
      "2,research,0.75,8,4,lab,0.1:0.6:0.3\n"
      "\n"
      "1,default,0.25,4,,lab,\n",
      "q.csv", Cluster());
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_EQ(q->queues.size(), 2u);
  EXPECT_EQ(q->queues[0].name, "research");
  EXPECT_EQ(q->queues[0].Nominal("A100"), 8);
  EXPECT_DOUBLE_EQ(q->queues[0].weight, 2);
  EXPECT_EQ(q->queues[0].borrow_limit, 4);
  EXPECT_EQ(q->queues[0].lend_limit, -1);
  EXPECT_DOUBLE_EQ(q->queues[0].priority_mix[kPriorityHigh], 0.3);
  EXPECT_EQ(q->queues[1].borrow_limit, -1);
  EXPECT_EQ(q->Find(""), 1);  // the queue named "default"
  EXPECT_EQ(q->Find("research"), 0);
  EXPECT_EQ(q->Find("nobody"), -1);
}

TEST(QueuesFileTest, ErrorsNameTheLineTheFieldAndTheValue) {
  const std::string head = "queue,quota_gpus,weight,jobs_share\n";
  struct Case {
    std::string text;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {head + "a,8,heavy,1\n", "q.csv:2: field 'weight': value 'heavy': not a number"},
      {head + "a,8,0,1\n", "q.csv:2: field 'weight': value '0': must be > 0"},
      {head + "a,2.5,1,1\n", "q.csv:2: field 'quota_gpus': value '2.5'"},
      {head + "a,17,1,1\n", "q.csv:2: field 'quota_gpus': value '17': above the cluster's 16 A100"},
      {head + "a,10,1,0.5\nb,10,1,0.5\n",
       "q.csv:3: field 'quota_gpus': value '10': the quotas of A100 sum to 20"},
      {head + "a,8,1,0.5\na,4,1,0.5\n",
       "q.csv:3: field 'queue': value 'a': duplicate name (first on line 2)"},
      {"queue,quota_gpus,weight,jobs_share,gpu_type\na,8,1,1,H100\n",
       "q.csv:2: field 'gpu_type': value 'H100': unknown GPU type"},
      {"queue,quota_gpus,weight,jobs_share,cohort\na,8,1,0.5,lab\nb,4,1,0.5,\n",
       "q.csv:3: field 'cohort': value '': queue 'b' is in no cohort"},
      {"queue,quota_gpus,weight\na,8,1\n", "q.csv:1: field 'header'"},
      {"queue,quota,weight,jobs_share\n", "q.csv:1: field 'header': value 'quota': unknown column"},
      {head + "a,8,1\n", "q.csv:2: field 'row'"},
      {head + "a,8,1,0.5\n", "q.csv: field 'jobs_share': value '0.5'"},
      {"queue,quota_gpus,weight,jobs_share,priority_mix\na,8,1,1,0.5:0.6:0\n",
       "q.csv:2: field 'priority_mix': value '0.5:0.6:0': the fractions do not sum to 1"},
      {"queue,quota_gpus,weight,jobs_share,borrow_limit\na,8,1,1,-2\n",
       "q.csv:2: field 'borrow_limit': value '-2'"},
      {head, "q.csv: no queue"},
  };
  for (const Case& c : cases) {
    auto q = ParseQueuesCsv(c.text, "q.csv", Cluster());
    ASSERT_FALSE(q.ok()) << c.text;
    EXPECT_EQ(q.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(q.status().message().find(c.expect), std::string::npos)
        << "got: " << q.status().message() << "\nwanted: " << c.expect;
  }
}

TEST(QueuesFileTest, AJobNamingAnUnknownQueueOrPriorityIsRefused) {
  Harness h(Servers(2, 0), "baseline", WithQueues("queue,quota_gpus,weight,jobs_share\na,8,1,1\n"));
  auto bad = h.Try(JobSubmitted{In(Inelastic(1, 1), "b")});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("queue 'b': no such queue"), std::string::npos)
      << bad.status();
  auto prio = h.Try(JobSubmitted{In(Inelastic(2, 1), "a", 7)});
  ASSERT_FALSE(prio.ok());
  EXPECT_NE(prio.status().message().find("priority 7"), std::string::npos) << prio.status();
  // A job naming no queue goes to the first (no queue is named "default").
  h.Submit(Inelastic(3, 1));
  EXPECT_EQ(h.job(3).queue, 0);
}

// --- Admission ----------------------------------------------------------------------

// Two queues of 8 GPUs each on 16 GPUs, one of them lends at most 4.
const char kTwo[] =
    "queue,quota_gpus,weight,jobs_share,lend_limit\n"
    "a,8,1,0.5,-1\n"
    "b,8,1,0.5,4\n";

TEST(QuotaTest, BorrowingStopsAtTheLenderLendingLimit) {
  // Queue a wants 16 GPUs; b is idle but lends only 4 of its 8: a runs 12.
  Harness h(Servers(2, 0), "baseline", WithQueues(kTwo));
  for (JobId id = 1; id <= 4; ++id) h.Submit(In(Inelastic(id, 4, 1e6), "a"));
  EXPECT_EQ(Held(h.state())["a"], 12);
  EXPECT_EQ(h.job(4).status, JobStatus::kQueued);
}

TEST(QuotaTest, BorrowingLimitCapsAQueue) {
  Harness h(
      Servers(2, 0), "baseline",
      WithQueues("queue,quota_gpus,weight,jobs_share,borrow_limit\na,8,1,0.5,2\nb,8,1,0.5,-1\n"));
  for (JobId id = 1; id <= 6; ++id) h.Submit(In(Inelastic(id, 2, 1e6), "a"));
  EXPECT_EQ(Held(h.state())["a"], 10);  // its 8 plus a borrowing limit of 2
}

TEST(QuotaTest, HigherPriorityClassAdmitsFirstWithinAQueue) {
  // One free slot of 8 and two queued jobs of queue a: the high one starts.
  Harness h(Servers(1, 0), "baseline",
            WithQueues("queue,quota_gpus,weight,jobs_share\na,8,1,1\n", 8));
  h.Submit(In(Inelastic(1, 8, 100), "a"));
  h.Submit(In(Inelastic(2, 8, 10), "a", kPriorityLow), 1);  // shorter, but low
  h.Submit(In(Inelastic(3, 8, 1000), "a", kPriorityHigh), 1);
  h.Send(JobFinished{1}, 200);
  EXPECT_EQ(h.job(3).status, JobStatus::kRunning);
  EXPECT_EQ(h.job(2).status, JobStatus::kQueued);
}

// --- Getting quota back -------------------------------------------------------------

class QuotaReclaimTest : public ::testing::TestWithParam<const char*> {};

TEST_P(QuotaReclaimTest, AQueueUnderQuotaGetsItsGpusBackWithinTheBound) {
  // a fills the cluster (8 its own, 8 borrowed from idle b); at t=100 b asks
  // for its 8. The borrowed job is suspended once it has run
  // quota_min_runtime (300 s) and b's job starts then, within the bound
  // (quota_reclaim_deadline, 600 s, after it was queued).
  SchedulerConfig c = WithQueues("queue,quota_gpus,weight,jobs_share\na,8,1,0.5\nb,8,1,0.5\n");
  Harness h(Servers(2, 0), GetParam(), c);
  h.Submit(In(Inelastic(1, 8, 1e6), "a"));
  h.Submit(In(Inelastic(2, 8, 1e6), "a"));
  ASSERT_EQ(Held(h.state())["a"], 16);
  h.Submit(In(Inelastic(3, 8, 1e6), "b"), 100);
  EXPECT_EQ(h.job(3).status, JobStatus::kQueued);  // job 2 is inside its minimum runtime
  bool suspended = false;
  h.scheduler().set_action_observer([&](const Action& a, const ClusterState&) {
    if (a.type != ActionType::kPreempt) return;
    EXPECT_EQ(a.job, 2u) << "job 1 runs within its queue's quota";
    EXPECT_TRUE(a.suspend);
    suspended = true;
  });
  TicksUntil(h, 100 + c.quota_reclaim_deadline);
  EXPECT_TRUE(suspended);
  EXPECT_EQ(h.job(3).status, JobStatus::kRunning);
  EXPECT_LE(h.job(3).started_at, 100 + c.quota_reclaim_deadline);
  EXPECT_GE(h.job(3).started_at, c.quota_min_runtime);  // not before job 2's minimum runtime
  EXPECT_EQ(h.job(1).status, JobStatus::kRunning);
  EXPECT_EQ(h.job(1).stats.preemptions, 0);
}

TEST_P(QuotaReclaimTest, TheDeadlineOverridesTheMinimumRuntime) {
  // With a minimum runtime (1000 s) longer than the deadline (600 s), b's
  // job queued at t=100 still gets its quota at t=700: the borrowed job is
  // suspended after 700 s of its 1000.
  SchedulerConfig c = WithQueues("queue,quota_gpus,weight,jobs_share\na,8,1,0.5\nb,8,1,0.5\n");
  c.quota_min_runtime = 1000;
  Harness h(Servers(2, 0), GetParam(), c);
  h.Submit(In(Inelastic(1, 8, 1e6), "a"));
  h.Submit(In(Inelastic(2, 8, 1e6), "a"));
  h.Submit(In(Inelastic(3, 8, 1e6), "b"), 100);
  TicksUntil(h, 100 + c.quota_reclaim_deadline - 1);
  EXPECT_EQ(h.job(3).status, JobStatus::kQueued);
  TicksUntil(h, 100 + c.quota_reclaim_deadline + 1);
  EXPECT_EQ(h.job(3).status, JobStatus::kRunning);
  EXPECT_NEAR(h.job(3).started_at, 100 + c.quota_reclaim_deadline, 0.01);
  EXPECT_EQ(h.job(2).stats.preemptions, 1);
  EXPECT_EQ(h.job(1).stats.preemptions, 0);
}

TEST_P(QuotaReclaimTest, TheLowestClassIsSuspendedFirst) {
  // a (quota 8) runs a normal, a high and a low job of 8 GPUs on 24; b
  // (quota 16) wants 8. Ordered by class, a's high job is within its quota
  // and the other two are borrowed: the low one is suspended, whatever
  // their start order.
  SchedulerConfig c = WithQueues("queue,quota_gpus,weight,jobs_share\na,8,1,0.5\nb,16,1,0.5\n", 24);
  Harness h(Servers(3, 0), GetParam(), c);
  h.Submit(In(Inelastic(1, 8, 1e6), "a", kPriorityLow));
  h.Submit(In(Inelastic(2, 8, 1e6), "a", kPriorityNormal), 1);
  h.Submit(In(Inelastic(3, 8, 1e6), "a", kPriorityHigh), 1);
  ASSERT_EQ(Held(h.state())["a"], 24);
  h.Submit(In(Inelastic(4, 8, 1e6), "b"), 1000);  // every job past its minimum runtime
  TicksUntil(h, h.now() + 1);
  EXPECT_EQ(h.job(4).status, JobStatus::kRunning);
  EXPECT_EQ(h.job(1).stats.preemptions, 1);
  EXPECT_EQ(h.job(2).stats.preemptions, 0);
  EXPECT_EQ(h.job(3).stats.preemptions, 0);
}

INSTANTIATE_TEST_SUITE_P(RoundPolicies, QuotaReclaimTest,
                         ::testing::Values("baseline", "aryl", "loan-only"));

TEST(QuotaTest, AJobStraddlingItsQueuesQuotaIsBorrowingAndGivesWay) {
  // a's one 2-GPU job holds a's 1 GPU of quota and 1 borrowed from idle b. b
  // then asks for its 1: a's job reaches beyond a's quota, so it is suspended
  // (once past its minimum runtime) and b's job starts; a's job waits.
  SchedulerConfig c = WithQueues("queue,quota_gpus,weight,jobs_share\na,1,1,0.5\nb,1,1,0.5\n", 2);
  Harness h(Servers(1, 0, 2), "aryl", c);
  h.Submit(In(Inelastic(1, 2, 1e6), "a"));
  ASSERT_EQ(h.job(1).status, JobStatus::kRunning);
  h.Submit(In(Inelastic(2, 1, 1e6), "b"), c.quota_min_runtime + 1);
  TicksUntil(h, c.quota_min_runtime + 2);
  EXPECT_EQ(h.job(2).status, JobStatus::kRunning);
  EXPECT_EQ(h.job(1).status, JobStatus::kQueued);
  EXPECT_TRUE(h.job(1).suspended);
}

TEST(QuotaTest, ElasticBorrowersShrinkBeforeAnyoneIsPreempted) {
  // a's elastic job grows over all 16 GPUs (b lends them); b's job within
  // quota takes its 8 back from a's flexible workers at once, no preemption.
  Harness h(Servers(2, 0), "aryl",
            WithQueues("queue,quota_gpus,weight,jobs_share\na,8,1,0.5\nb,8,1,0.5\n"));
  h.Submit(In(Elastic(1, 4, 16, 1e6), "a"));
  ASSERT_EQ(h.job(1).workers, 16);
  h.Submit(In(Inelastic(2, 8, 1e6), "b"), 10);
  EXPECT_EQ(h.job(2).status, JobStatus::kRunning);
  EXPECT_EQ(h.job(1).status, JobStatus::kRunning);
  EXPECT_EQ(h.job(1).workers, 8);
  EXPECT_EQ(h.job(1).stats.preemptions, 0);
}

// --- Long random runs: the rules hold after every plan -------------------------------

const char kFour[] =
    "queue,quota_gpus,weight,jobs_share,borrow_limit,lend_limit\n"
    "w,12,3,0.25,-1,-1\n"
    "x,8,2,0.25,-1,6\n"
    "y,4,1,0.25,8,-1\n"
    "z,0,1,0.25,-1,-1\n";

struct RandomStats {
  std::map<std::string, double> gpu_seconds;     // training GPU-time per queue
  std::map<std::string, double> loaned_seconds;  // loaned GPU-time per queue
  int quota_preemptions = 0;
  int below_quota = 0;  // of those, preemptions that left the victim's queue below its quota
};

// Random submissions (random queue, class, size, elastic or not) and
// completions at the core's own estimates, with the Ticks the policy asks for.
// After every quota preemption: the victim's queue held more than its quota
// before it (the victim ran on borrowed GPUs, wholly or in part), and it is
// not the queue the GPUs go to. Counts the preemptions that took a queue
// below its quota (of a job straddling it).
RandomStats RandomRun(const std::string& policy, std::uint64_t seed, const char* csv, int steps,
                      bool same_jobs) {
  SchedulerConfig c = WithQueues(csv, 32);
  const QueueConfig& qc = *c.queues;
  Harness h(Servers(4, 2), policy, c);
  if (policy != "baseline") h.Loan({4});
  std::mt19937_64 rng(seed);
  RandomStats out;
  std::map<JobId, int> on_training;  // each job's training workers after its last action
  auto training_workers = [](const ClusterState& s, const JobInfo& j) {
    int n = 0;
    for (const auto& [sid, k] : j.placement) n += s.server(sid)->loaned() ? 0 : k;
    return n;
  };
  h.scheduler().set_action_observer([&](const Action& a, const ClusterState& s) {
    Status inv = s.CheckInvariants();
    EXPECT_TRUE(inv.ok()) << inv;
    const int held_before = on_training[a.job];
    if (const JobInfo* j = s.job(a.job)) on_training[a.job] = training_workers(s, *j);
    if (a.type != ActionType::kPreempt) return;
    ASSERT_NE(a.reason.find("quota reclaim"), std::string::npos) << a.reason;
    ++out.quota_preemptions;
    const JobInfo& victim = *s.job(a.job);
    const std::string& q = victim.spec.queue;
    const int nominal = qc.queues[qc.Find(q)].Nominal("A100");
    EXPECT_GT(Held(s)[q] + held_before, nominal)
        << "job " << a.job << " of queue " << q << " ran within its quota";
    out.below_quota += Held(s)[q] < nominal;
    EXPECT_EQ(a.reason.find("queue " + q + ":"), std::string::npos)
        << "a queue preempted its own job";
  });
  Seconds last = 0;
  auto account = [&](Seconds t) {
    for (const auto& [q, n] : Held(h.state())) out.gpu_seconds[q] += n * (t - last);
    for (JobId id : h.state().running()) {
      const JobInfo& j = *h.state().job(id);
      for (const auto& [sid, n] : j.placement) {
        if (h.state().server(sid)->loaned()) out.loaned_seconds[j.spec.queue] += n * (t - last);
      }
    }
    last = t;
  };
  JobId next = 1;
  for (int step = 0; step < steps; ++step) {
    const Seconds dt = 1 + static_cast<double>(rng() % 120);
    const Seconds wake = h.scheduler().NextWakeup();
    auto c1 = h.state().NextCompletion();
    if (c1 && c1->first <= h.now() + dt && c1->first <= wake) {
      account(c1->first);
      h.Send(JobFinished{c1->second}, c1->first - h.now());
      continue;
    }
    if (wake > h.now() && wake <= h.now() + dt) {
      account(wake);
      h.Send(Tick{}, wake - h.now());
      continue;
    }
    account(h.now() + dt);
    const std::string q = qc.queues[rng() % qc.queues.size()].name;
    const int prio = static_cast<int>(rng() % kPriorityClasses);
    if (same_jobs) {
      h.Submit(In(Inelastic(next++, 1, 4000 + rng() % 4000), q, prio), dt);
    } else {
      const int n = 1 << (rng() % 4);
      JobSpec j = rng() % 2 ? Inelastic(next, n, 500 + rng() % 20000)
                            : Elastic(next, n, 2 * n, 500 + rng() % 20000);
      ++next;
      h.Submit(In(j, q, prio), dt);
    }
  }
  return out;
}

class RandomQuotaTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RandomQuotaTest, LentCapacityIsNeverTakenFromAQueueWithinItsQuota) {
  int preemptions = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    RandomStats s = RandomRun(GetParam(), seed, kFour, 600, false);
    EXPECT_GT(s.gpu_seconds["z"], 0) << "z (no quota) borrows";
    preemptions += s.quota_preemptions;
  }
  int below = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) below += RandomRun(GetParam(), seed, kFour, 600, false).below_quota;
  EXPECT_GT(preemptions, 0) << "the runs never took quota back: the check above saw nothing";
  // Straddling jobs go last: most preemptions leave the victim its quota.
  EXPECT_LE(below * 4, preemptions) << below << " of " << preemptions << " took a queue below its quota";
  std::cout << GetParam() << ": " << preemptions << " quota preemptions, " << below << " below quota\n";
}

INSTANTIATE_TEST_SUITE_P(RoundPolicies, RandomQuotaTest,
                         ::testing::Values("baseline", "aryl", "loan-only", "elastic-only",
                                           "optimus", "afs"));

TEST(FairShareTest, SaturatedQueuesWithoutQuotaShareByWeightOverALongRun) {
  // Two queues without quota (every GPU is borrowed), weights 1 and 3, both
  // always backlogged with 1-GPU jobs: over a long run b gets 3/4 of the
  // GPU-time, within 0.03.
  const char csv[] = "queue,quota_gpus,weight,jobs_share\na,0,1,0.5\nb,0,3,0.5\n";
  RandomStats s = RandomRun("baseline", 7, csv, 4000, true);
  const double total = s.gpu_seconds["a"] + s.gpu_seconds["b"];
  ASSERT_GT(total, 0);
  EXPECT_NEAR(s.gpu_seconds["b"] / total, 0.75, 0.03)
      << "a " << s.gpu_seconds["a"] << " b " << s.gpu_seconds["b"];
  EXPECT_EQ(s.quota_preemptions, 0);  // nobody has a quota to take back
}

TEST(FairShareTest, LoanedServersAreSharedByWeightAmongQueuesWithDemand) {
  // Two queues holding their 16-GPU quotas (weights 1 and 3), both always
  // backlogged; one loaned server of 8 GPUs belongs to no team: over a long
  // run b gets 3/4 of its GPU-time, within 0.05.
  const char csv[] = "queue,quota_gpus,weight,jobs_share\na,16,1,0.5\nb,16,3,0.5\n";
  RandomStats s = RandomRun("loan-only", 5, csv, 4000, true);
  const double total = s.loaned_seconds["a"] + s.loaned_seconds["b"];
  ASSERT_GT(total, 0);
  EXPECT_NEAR(s.loaned_seconds["b"] / total, 0.75, 0.05)
      << "a " << s.loaned_seconds["a"] << " b " << s.loaned_seconds["b"];
  EXPECT_NEAR(s.gpu_seconds["a"] / (s.gpu_seconds["a"] + s.gpu_seconds["b"]), 0.5,
              0.03);  // their quotas
}

TEST(QuotaTest, QueuesBorrowOnlyWithinTheirCohort) {
  // a and b in cohort lab, c alone in ops; 24 GPUs, quotas 8 each. c is
  // idle, b is idle: a borrows b's 8, never c's.
  Harness h(Servers(3, 0), "baseline",
            WithQueues("queue,quota_gpus,weight,jobs_share,cohort\na,8,1,0.4,lab\nb,8,1,0.3,lab\nc,"
                       "8,1,0.3,ops\n",
                       24));
  for (JobId id = 1; id <= 6; ++id) h.Submit(In(Inelastic(id, 4, 1e6), "a"));
  EXPECT_EQ(Held(h.state())["a"], 16);
  EXPECT_EQ(h.job(5).status, JobStatus::kQueued);
  // c's own jobs start on its quota at once.
  h.Submit(In(Inelastic(7, 8, 1e6), "c"), 1);
  EXPECT_EQ(h.job(7).status, JobStatus::kRunning);
}

// --- Spare capacity ------------------------------------------------------------------

TEST(SpareShareTest, WeightedSharesFillByWeightAndNeverBeyondDemand) {
  EXPECT_EQ(WeightedShares({1, 3}, {100, 100}, 16), (std::vector<int>{4, 12}));
  EXPECT_EQ(WeightedShares({1, 3}, {100, 2}, 16),
            (std::vector<int>{14, 2}));  // b wants less than its 12
  EXPECT_EQ(WeightedShares({1, 1, 1}, {100, 100, 0}, 7),
            (std::vector<int>{4, 3, 0}));  // tie: lowest index
  EXPECT_EQ(WeightedShares({1, 1}, {3, 2}, 16),
            (std::vector<int>{3, 2}));  // all demand met, the rest unused
  EXPECT_EQ(WeightedShares({2, 1}, {0, 0}, 16), (std::vector<int>{0, 0}));
}

TEST(SpareShareTest, AQueueWithElasticDemandGetsItsWeightShareOfSpareGpus) {
  // 32 GPUs, no quotas: queue a (weight 1) runs three elastic jobs, b
  // (weight 3) one; every job could use all spare GPUs. Without queues the
  // knapsack would favour whichever jobs gain most; with them b's one job
  // gets at least 3/4 of the spare GPUs and a's jobs at least 1/4.
  Harness h(Servers(4, 0), "aryl",
            WithQueues("queue,quota_gpus,weight,jobs_share\na,0,1,0.5\nb,0,3,0.5\n", 32));
  h.Submit(In(Elastic(1, 2, 32, 1e6), "a"));
  h.Submit(In(Elastic(2, 2, 32, 1e6), "a"));
  h.Submit(In(Elastic(3, 2, 32, 1e6), "a"));
  h.Submit(In(Elastic(4, 2, 32, 1e6), "b"));
  const int spare = 32 - 4 * 2;
  const int a_extra = h.job(1).workers + h.job(2).workers + h.job(3).workers - 3 * 2;
  const int b_extra = h.job(4).workers - 2;
  EXPECT_GE(b_extra, spare * 3 / 4) << "a " << a_extra << " b " << b_extra;
  EXPECT_GE(a_extra, spare / 4) << "a " << a_extra << " b " << b_extra;
}

// --- The live scheduler's file and what a queue holds ---------------------------

TEST(QueuesFileTest, TheLiveFileNamesTypesAndUsersAndLeavesSizesToTheAgents) {
  QueueCluster live;
  live.open = true;
  auto q = ParseQueuesCsv(
      "queue,quota_gpus,weight,gpu_type,users,cohort\n"
      "vision,64,2,H100,alice;bob,lab\n"
      "nlp,8,1,cpu,*,lab\n",
      "teams.csv", live);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->queues[0].Nominal("H100"), 64);  // no agent yet: no size to check it against
  EXPECT_TRUE(q->queues[0].MayUse("bob"));
  EXPECT_FALSE(q->queues[0].MayUse("carol"));
  EXPECT_TRUE(q->queues[1].users.empty());
  EXPECT_TRUE(q->queues[1].MayUse("carol"));
  auto no_type = ParseQueuesCsv("queue,quota_gpus,weight\na,1,1\n", "teams.csv", live);
  ASSERT_FALSE(no_type.ok());
  EXPECT_NE(no_type.status().message().find("teams.csv:1: field 'header'"), std::string::npos) << no_type.status();
  EXPECT_NE(no_type.status().message().find("no column 'gpu_type'"), std::string::npos) << no_type.status();
  auto empty_type = ParseQueuesCsv("queue,quota_gpus,weight,gpu_type\na,1,1,\n", "teams.csv", live);
  ASSERT_FALSE(empty_type.ok());
  EXPECT_NE(empty_type.status().message().find("teams.csv:2: field 'gpu_type'"), std::string::npos)
      << empty_type.status();
  auto bad_users = ParseQueuesCsv("queue,quota_gpus,weight,gpu_type,users\na,1,1,cpu,alice;;bob\n", "t.csv", live);
  ASSERT_FALSE(bad_users.ok());
  EXPECT_NE(bad_users.status().message().find("t.csv:2: field 'users': value 'alice;;bob'"), std::string::npos)
      << bad_users.status();
}

TEST(QueueUsageTest, UsedBorrowedLentLoanedAndPendingPerQueue) {
  // a and b have 8 A100s each in one cohort; a runs 12 (borrowing 4 of b's
  // idle quota) and one more job of a's, needing 8, waits.
  Harness h(Servers(2, 1), "aryl",
            WithQueues("queue,quota_gpus,weight,jobs_share,cohort\na,8,2,0.5,lab\nb,8,1,0.5,lab\n"));
  for (JobId id = 1; id <= 3; ++id) h.Submit(In(Inelastic(id, 4, 1e6), "a"));
  h.Submit(In(Inelastic(4, 8, 1e6), "a"));
  auto rows = UsageByQueue(h.state(), *h.state().config().queues, /*elastic=*/true);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].queue, "a");
  EXPECT_EQ(rows[0].quota.at("A100"), 8);
  EXPECT_EQ(rows[0].used.at("A100"), 12);
  EXPECT_EQ(rows[0].borrowed.at("A100"), 4);
  EXPECT_EQ(rows[0].running, 3);
  EXPECT_EQ(rows[0].pending, 1);
  EXPECT_EQ(rows[1].used.at("A100"), 0);
  EXPECT_EQ(rows[1].lent.at("A100"), 4);
  EXPECT_EQ(rows[1].borrowed.count("A100"), 0u);
  EXPECT_DOUBLE_EQ(rows[0].share, 4.0 / 2);
  EXPECT_EQ(rows[1].running + rows[1].pending, 0);
}

TEST(QueueUsageTest, AJobItsQueueMayNotBorrowForWaitsForQuota) {
  // a holds its 8 GPUs and may borrow none (limit 0); b's 8 are idle. a's
  // next job waits for quota, not capacity; b's fits and goes.
  Harness h(Servers(2, 0), "baseline",
            WithQueues("queue,quota_gpus,weight,jobs_share,borrow_limit\na,8,1,0.5,0\nb,8,1,0.5,-1\n"));
  h.Submit(In(Inelastic(1, 8, 1e6), "a"));
  h.Submit(In(Inelastic(2, 4, 1e6), "a"));
  ASSERT_EQ(h.job(2).status, JobStatus::kQueued);
  auto why = h.scheduler().WhyPending({2});
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0].cause, PendingCause::kQuota) << PendingCauseName(why[0].cause);
  EXPECT_EQ(why[0].queue, "a");
  EXPECT_EQ(why[0].quota_type, "A100");
  EXPECT_EQ(why[0].quota, 8);
  EXPECT_EQ(why[0].quota_used, 8);
}

// --- Without teams -------------------------------------------------------------------

TEST(QuotaTest, OneQueueHoldingTheTrainingClusterDecidesAsNoQueues) {
  // A single queue whose quota is the whole training cluster changes no
  // decision of any round policy on training servers: same plans, event by
  // event. (With loaned servers it may: a job beyond the quota uses them in
  // the borrowing pass, after every job within quota.)
  for (const char* policy : {"baseline", "aryl", "loan-only", "elastic-only", "optimus", "afs"}) {
    SchedulerConfig with = WithQueues("queue,quota_gpus,weight,jobs_share\nall,32,1,1\n", 32);
    Harness a(Servers(4, 0), policy);
    Harness b(Servers(4, 0), policy, with);
    std::mt19937_64 rng(11);
    for (JobId id = 1; id <= 200; ++id) {
      const Seconds dt = static_cast<double>(rng() % 300);
      auto ca = a.state().NextCompletion();
      if (ca && ca->first <= a.now() + dt) {
        Plan pa = a.Send(JobFinished{ca->second}, ca->first - a.now());
        Plan pb = b.Send(JobFinished{ca->second}, ca->first - b.now());
        ASSERT_EQ(pa.actions.size(), pb.actions.size()) << policy << " at finish of " << ca->second;
        continue;
      }
      const int n = 1 << (rng() % 4);
      JobSpec j = rng() % 2 ? Inelastic(id, n, 500 + rng() % 20000)
                            : Elastic(id, n, 2 * n, 500 + rng() % 20000);
      Plan pa = a.Submit(j, dt);
      Plan pb = b.Submit(j, dt);
      ASSERT_EQ(pa.actions.size(), pb.actions.size()) << policy << " at job " << id;
      for (size_t k = 0; k < pa.actions.size(); ++k) {
        EXPECT_EQ(pa.actions[k].job, pb.actions[k].job) << policy;
        EXPECT_EQ(pa.actions[k].placement, pb.actions[k].placement) << policy;
      }
    }
  }
}

}  // namespace
}  // namespace aryl::sched
