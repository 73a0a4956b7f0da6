#include <gtest/gtest.h>

#include <random>

#include "aryl/sched/state.h"
#include "test_util.h"

namespace aryl::sched {
namespace {

using testing::Catalog;
using testing::Inelastic;
using testing::Servers;

ClusterState MakeState(SchedulerConfig config = {}) {
  auto s = ClusterState::Create(Servers(2, 1), Catalog(), config);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(s).value();
}

// Every action in these tests goes through here: the invariants hold after it
// whether it was applied or refused.
Status ApplyChecked(ClusterState& st, const Action& a) {
  Status s = st.Apply(a);
  Status inv = st.CheckInvariants();
  EXPECT_TRUE(inv.ok()) << inv;
  return s;
}

Action Start(JobId job, Placement p) {
  Action a;
  a.type = ActionType::kStart;
  a.job = job;
  a.placement = std::move(p);
  return a;
}

Action Resize(JobId job, Placement p) {
  Action a = Start(job, std::move(p));
  a.type = ActionType::kResize;
  return a;
}

TEST(StateTest, ProgressAndEstimatedFinishTime) {
  // A job at 4 it/s with 1000 iterations finishes 250 s after it starts.
  ClusterState st = MakeState();
  ASSERT_TRUE(st.AddJob(Inelastic(1, 4, 1000)).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(1, {{0, 4}})).ok());
  EXPECT_DOUBLE_EQ(st.EstimatedFinishTime(1), 250);
  ASSERT_TRUE(st.AdvanceTo(100).ok());
  EXPECT_DOUBLE_EQ(st.job(1)->remaining_work, 600);
  EXPECT_DOUBLE_EQ(st.EstimatedFinishTime(1), 250);
  EXPECT_TRUE(st.CompletedBy(249).empty());
  EXPECT_EQ(st.CompletedBy(250), std::vector<JobId>{1});
  ASSERT_TRUE(st.NextCompletion().has_value());
  EXPECT_EQ(st.NextCompletion()->second, 1u);
  EXPECT_DOUBLE_EQ(st.job(1)->stats.gpu_seconds, 400);
  EXPECT_DOUBLE_EQ(st.servers()[0].busy_gpu_seconds, 400);
}

TEST(StateTest, PreemptionLosesWorkSinceTheLastCheckpointAndPaysARestart) {
  // Checkpoint every 50 s; preempted at 70 s the job falls back to its 50 s state.
  SchedulerConfig config;
  config.checkpoint_interval = 50;
  config.restart_pause = 60;
  ClusterState st = MakeState(config);
  ASSERT_TRUE(st.AddJob(Inelastic(1, 4, 1000)).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(1, {{0, 4}})).ok());
  ASSERT_TRUE(st.AdvanceTo(70).ok());
  EXPECT_DOUBLE_EQ(st.job(1)->remaining_work, 720);
  Action p;
  p.type = ActionType::kPreempt;
  p.job = 1;
  ASSERT_TRUE(ApplyChecked(st, p).ok());
  EXPECT_DOUBLE_EQ(st.job(1)->remaining_work, 800);
  EXPECT_DOUBLE_EQ(st.job(1)->stats.lost_work, 80);
  EXPECT_EQ(st.job(1)->stats.preemptions, 1);
  EXPECT_EQ(st.job(1)->status, JobStatus::kQueued);
  EXPECT_EQ(st.servers()[0].used, 0);
  ASSERT_TRUE(st.AdvanceTo(100).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(1, {{1, 4}})).ok());
  // Restart pause 60 s, then 800 / 4 = 200 s.
  EXPECT_DOUBLE_EQ(st.EstimatedFinishTime(1), 360);
  EXPECT_DOUBLE_EQ(st.job(1)->stats.first_start, 0);
  EXPECT_TRUE(st.CheckInvariants().ok());
}

TEST(StateTest, RescalePausesButLosesNothing) {
  // A resize pauses the job for rescale_pause and keeps its progress.
  SchedulerConfig config;
  config.rescale_pause = 10;
  ClusterState st = MakeState(config);
  auto spec = testing::Elastic(1, 2, 8, 1000);
  ASSERT_TRUE(st.AddJob(spec).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(1, {{0, 2}})).ok());
  ASSERT_TRUE(st.AdvanceTo(100).ok());  // 200 done
  ASSERT_TRUE(ApplyChecked(st, Resize(1, {{0, 8}})).ok());
  EXPECT_DOUBLE_EQ(st.job(1)->remaining_work, 800);
  EXPECT_EQ(st.job(1)->stats.rescales, 1);
  EXPECT_DOUBLE_EQ(st.EstimatedFinishTime(1), 110 + 100);
}

TEST(StateTest, RestartJobRescalePaysTheRestartPause) {
  // A torchrun-style job is stopped and started again on a resize: it pauses for
  // restart_pause (50 s), an in-place job for rescale_pause (10 s).
  SchedulerConfig config;
  config.rescale_pause = 10;
  config.restart_pause = 50;
  EXPECT_DOUBLE_EQ(config.RescalePause(testing::Elastic(1, 2, 8)), 10);
  ClusterState st = MakeState(config);
  auto spec = testing::Elastic(1, 2, 8, 1000);
  spec.rescale = Rescale::kRestart;
  EXPECT_DOUBLE_EQ(config.RescalePause(spec), 50);
  ASSERT_TRUE(st.AddJob(spec).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(1, {{0, 2}})).ok());
  ASSERT_TRUE(st.AdvanceTo(100).ok());  // 200 done
  ASSERT_TRUE(ApplyChecked(st, Resize(1, {{0, 8}})).ok());
  EXPECT_DOUBLE_EQ(st.job(1)->remaining_work, 800);
  EXPECT_DOUBLE_EQ(st.EstimatedFinishTime(1), 150 + 100);
  // Learned later to be in place (SetRescale): the next rescale costs 10 s.
  ASSERT_TRUE(st.SetRescale(1, Rescale::kInPlace).ok());
  ASSERT_TRUE(st.AdvanceTo(200).ok());  // 400 more done at 8 after the pause
  ASSERT_TRUE(ApplyChecked(st, Resize(1, {{0, 4}})).ok());
  EXPECT_DOUBLE_EQ(st.job(1)->remaining_work, 400);
  EXPECT_DOUBLE_EQ(st.EstimatedFinishTime(1), 210 + 100);
  EXPECT_FALSE(st.SetRescale(99, Rescale::kInPlace).ok());
}

TEST(StateTest, ApplyRejectsDoubleBookingAndLeavesStateUnchanged) {
  // Two jobs cannot hold the same GPUs; the failed start changes nothing.
  ClusterState st = MakeState();
  ASSERT_TRUE(st.AddJob(Inelastic(1, 8)).ok());
  ASSERT_TRUE(st.AddJob(Inelastic(2, 4)).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(1, {{0, 8}})).ok());
  Status s = ApplyChecked(st, Start(2, {{0, 4}}));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("job 2"), std::string::npos) << s;
  EXPECT_EQ(st.job(2)->status, JobStatus::kQueued);
  EXPECT_EQ(st.servers()[0].used, 8);
  // Held inference servers are not usable.
  Status held = ApplyChecked(st, Start(2, {{2, 4}}));
  EXPECT_FALSE(held.ok());
  EXPECT_NE(held.message().find("server 2"), std::string::npos) << held;
  EXPECT_TRUE(st.CheckInvariants().ok());
}

TEST(StateTest, JobProgressOverridesTheEstimate) {
  // The driver's measurement replaces the core's own estimate.
  ClusterState st = MakeState();
  ASSERT_TRUE(st.AddJob(Inelastic(1, 4, 1000)).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(1, {{0, 4}})).ok());
  ASSERT_TRUE(st.AdvanceTo(10).ok());
  ASSERT_TRUE(st.SetRemainingWork(1, 100).ok());
  EXPECT_DOUBLE_EQ(st.EstimatedFinishTime(1), 35);
}

TEST(StateTest, CancelFreesGpusAndCompletedByIsOrdered) {
  // A cancelled running job frees its GPUs; CompletedBy lists jobs earliest first.
  ClusterState st = MakeState();
  ASSERT_TRUE(st.AddJob(Inelastic(1, 4, 4000)).ok());  // 4 it/s: t = 1000
  ASSERT_TRUE(st.AddJob(Inelastic(2, 2, 1000)).ok());  // 2 it/s: t = 500
  ASSERT_TRUE(st.AddJob(Inelastic(3, 2, 1e9)).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(1, {{0, 4}})).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(2, {{0, 2}})).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(3, {{1, 2}})).ok());
  EXPECT_EQ(st.CompletedBy(2000), (std::vector<JobId>{2, 1}));
  ASSERT_TRUE(st.CancelJob(3).ok());
  EXPECT_EQ(st.servers()[1].used, 0);
  EXPECT_EQ(st.job(3)->status, JobStatus::kCancelled);
  EXPECT_FALSE(st.CancelJob(3).ok());
  EXPECT_TRUE(st.CheckInvariants().ok());
}

TEST(StateTest, ReturnedServerIsHeldAndUnusable) {
  // A loaned server returns to inference only when empty, and is unusable after.
  ClusterState st = MakeState();
  ASSERT_TRUE(st.LoanServer(2).ok());
  ASSERT_TRUE(st.AddJob(Inelastic(1, 4)).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(1, {{2, 4}})).ok());
  Action ret;
  ret.type = ActionType::kReturnServer;
  ret.server = 2;
  EXPECT_FALSE(ApplyChecked(st, ret).ok());  // still holds workers
  ASSERT_TRUE(st.FinishJob(1).ok());
  ASSERT_TRUE(ApplyChecked(st, ret).ok());
  EXPECT_EQ(st.server(2)->state, ServerState::kHeld);
  ASSERT_TRUE(st.AddJob(Inelastic(2, 4)).ok());
  EXPECT_FALSE(ApplyChecked(st, Start(2, {{2, 4}})).ok());
}

// A server that joins a running state: failed until recovered, then usable;
// a job whose curve the old GPU count capped can grow onto it.
TEST(StateTest, AddServerJoinsFailedAndLiftsCappedCurves) {
  auto made = ClusterState::Create({{0, "t0", Pool::kTraining, "A100", 4}}, Catalog(), {});
  ASSERT_TRUE(made.ok()) << made.status();
  ClusterState st = std::move(*made);
  ASSERT_TRUE(st.AddJob(testing::Elastic(1, 1, 8)).ok());
  EXPECT_FALSE(st.job(1)->Allowed(0, 8));  // 4 GPUs of A100 in the cluster
  ServerSpec added{1, "t1", Pool::kTraining, "A100", 4};
  ASSERT_TRUE(st.AddServer(added).ok());
  ASSERT_NE(st.server(1), nullptr);
  EXPECT_TRUE(st.server(1)->failed);
  EXPECT_FALSE(st.server(1)->usable());
  EXPECT_TRUE(st.job(1)->Allowed(0, 8));
  EXPECT_EQ(st.job(1)->requested_workers, 8);
  EXPECT_FALSE(ApplyChecked(st, Start(1, {{0, 4}, {1, 4}})).ok());  // failed: unusable
  ASSERT_TRUE(st.MarkRecovered(1).ok());
  ASSERT_TRUE(ApplyChecked(st, Start(1, {{0, 4}, {1, 4}})).ok());
  EXPECT_EQ(st.total_gpus(), 8);
  EXPECT_TRUE(st.CheckInvariants().ok());
  // Bad servers change nothing.
  EXPECT_EQ(st.AddServer({1, "other", Pool::kTraining, "A100", 4}).code(), Status::Code::kAlreadyExists);
  EXPECT_EQ(st.AddServer({2, "t1", Pool::kTraining, "A100", 4}).code(), Status::Code::kAlreadyExists);
  EXPECT_EQ(st.AddServer({2, "t2", Pool::kTraining, "A100", 0}).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.AddServer({2, "t2", Pool::kTraining, "T4", 4}).code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(st.servers().size(), 2u);
  // Sparse ids keep working.
  ASSERT_TRUE(st.AddServer({100000, "far", Pool::kInference, "A100", 2}).ok());
  EXPECT_EQ(st.server(100000)->state, ServerState::kHeld);
  EXPECT_EQ(st.server(1)->spec.name, "t1");
}

// A job's curves reach the GPUs of their type, counted from the servers
// (BuildJob reads per-type totals the state keeps): checked against a sum
// over every server after each server joins, with and without hetero_dp.
TEST(StateTest, CurvesCapAtPerTypeTotalsAsServersJoin) {
  for (bool hetero : {false, true}) {
    SchedulerConfig config;
    config.hetero_dp = hetero;
    auto made = ClusterState::Create({{0, "a0", Pool::kTraining, "A100", 2}, {1, "t0", Pool::kInference, "T4", 3}},
                                     Catalog(), config);
    ASSERT_TRUE(made.ok()) << made.status();
    ClusterState st = std::move(*made);
    const std::vector<ServerSpec> joining = {{2, "a1", Pool::kTraining, "A100", 5},
                                             {3, "t1", Pool::kInference, "T4", 1},
                                             {4, "a2", Pool::kInference, "A100", 8},
                                             {70, "a3", Pool::kTraining, "A100", 3}};
    JobId next = 1;
    for (size_t step = 0; step <= joining.size(); ++step) {
      if (step > 0) ASSERT_TRUE(st.AddServer(joining[step - 1]).ok());
      std::vector<int> brute(st.num_types(), 0);
      int all = 0;
      for (const auto& s : st.servers()) {
        brute[s.type] += s.spec.gpus;
        all += s.spec.gpus;
      }
      EXPECT_EQ(st.total_gpus(), all);
      ASSERT_TRUE(st.AddJob(testing::Elastic(next, 1, 64)).ok());
      // New and extended curves alike; with hetero_dp only the new job's (a
      // joining server extends its own type's curves only).
      for (JobId id = hetero ? next : 1; id <= next; ++id) {
        const JobInfo& j = *st.job(id);
        for (int t = 0; t < st.num_types(); ++t) {
          const int cap = std::min(64, hetero ? all : brute[t]);
          ASSERT_EQ(static_cast<int>(j.curves[t].size()), cap + 1)
              << "hetero " << hetero << " step " << step << " job " << id << " type " << t;
        }
      }
      ++next;
    }
  }
}

// Whether `job` runs slower than it could, recomputed from its placement and
// curves: the type where it is slowest among those its placement uses (the
// first such server's), against the first of the fastest allowed types.
bool SlowByBruteForce(const ClusterState& st, const JobInfo& j) {
  if (j.placement.empty()) return false;
  const int w = j.workers;
  int pace = -1;
  for (const auto& [sid, n] : j.placement) {
    const int t = st.server(sid)->type;
    if (pace < 0 || j.Thr(t, w) < j.Thr(pace, w)) pace = t;
  }
  int fastest = -1;
  for (int t = 0; t < st.num_types(); ++t) {
    if (j.Thr(t, w) > 0 && (fastest < 0 || j.Thr(t, w) > j.Thr(fastest, w))) fastest = t;
  }
  return fastest >= 0 && j.Thr(pace, w) < j.Thr(fastest, w) * (1 - 1e-9);
}

TEST(StateTest, RunningSlowMatchesARecomputationAfterRandomEvents) {
  // Jobs start, resize, stop and end on A100 and loaned T4 servers (T4 at half
  // speed) in a random order, servers join: after every step running_slow()
  // is the set of running jobs whose placement runs them slower than their
  // fastest type (CheckInvariants checks the same through RunsSlow).
  for (unsigned seed : {1u, 2u, 3u}) {
    auto made = ClusterState::Create({{0, "a0", Pool::kTraining, "A100", 8},
                                      {1, "a1", Pool::kTraining, "A100", 8},
                                      {2, "t0", Pool::kInference, "T4", 8},
                                      {3, "t1", Pool::kInference, "T4", 8}},
                                     Catalog(), {});
    ASSERT_TRUE(made.ok()) << made.status();
    ClusterState st = std::move(*made);
    ASSERT_TRUE(st.LoanServer(2).ok());
    ASSERT_TRUE(st.LoanServer(3).ok());
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    auto any_server = [&] {
      return st.servers()[pick(static_cast<int>(st.servers().size()))].spec.id;
    };
    const std::vector<std::string> models = {"linear", "sublinear", "holes"};
    JobId next = 1;
    ServerId next_server = 4;
    int slow_seen = 0;
    for (int step = 0; step < 600; ++step) {
      // A random placement of `n` workers over one or two servers.
      auto placement = [&](int n) {
        Placement p;
        const int first = n > 1 && pick(2) ? 1 + pick(n - 1) : n;
        p[any_server()] += first;
        if (first < n) p[any_server()] += n - first;
        return p;
      };
      const std::vector<JobId> running(st.running().begin(), st.running().end());
      const int what = pick(7);
      if (what == 0 || st.queued().empty()) {
        const std::string& model = models[pick(3)];
        const int n = 1 << pick(5);
        // Refused where the model does not allow the size ("holes" at 16).
        (void)st.AddJob(pick(2) ? Inelastic(next, n, 1000, model)
                                : testing::Elastic(next, 1, 16, 1000, model));
        ++next;
      } else if (what <= 2) {
        const int k = pick(static_cast<int>(st.queued().size()));
        const JobId id = *std::next(st.queued().begin(), k);
        const JobInfo& j = *st.job(id);
        const int n = j.elastic() ? 1 << pick(5) : j.spec.min_workers;
        (void)ApplyChecked(st, Start(id, placement(n)));  // refused when it does not fit
      } else if (what == 3 && !running.empty()) {
        const JobInfo& j = *st.job(running[pick(static_cast<int>(running.size()))]);
        const int n = j.elastic() ? 1 << pick(5) : j.workers;
        Placement p = pick(2) ? placement(n) : j.placement;
        if (j.elastic() && n != j.workers && pick(2)) {  // grow or shrink in place where it fits
          p = {{j.placement.begin()->first, n}};
        }
        (void)ApplyChecked(st, Resize(j.spec.id, p));
      } else if (what == 4 && !running.empty()) {
        Action stop;
        stop.type = ActionType::kPreempt;
        stop.job = running[pick(static_cast<int>(running.size()))];
        ASSERT_TRUE(ApplyChecked(st, stop).ok());
      } else if (what == 5 && !running.empty()) {
        ASSERT_TRUE(st.FinishJob(running[pick(static_cast<int>(running.size()))]).ok());
      } else if (what == 6 && step % 50 == 0) {
        // A joining server extends curves capped at the old GPU count.
        const bool t4 = pick(2);
        ServerSpec joining{next_server, "", t4 ? Pool::kInference : Pool::kTraining,
                           t4 ? "T4" : "A100", 16};
        joining.name = "s";
        joining.name.append(std::to_string(next_server));
        ASSERT_TRUE(st.AddServer(joining).ok());
        ++next_server;
      } else {
        ASSERT_TRUE(st.AdvanceTo(st.now() + 10).ok());
      }
      std::set<JobId> brute;
      for (JobId id : st.running()) {
        if (SlowByBruteForce(st, *st.job(id))) brute.insert(id);
      }
      ASSERT_EQ(std::set<JobId>(st.running_slow().begin(), st.running_slow().end()), brute)
          << "seed " << seed << " step " << step;
      slow_seen += static_cast<int>(brute.size());
      ASSERT_TRUE(st.CheckInvariants().ok()) << st.CheckInvariants();
    }
    EXPECT_GT(slow_seen, 0) << "seed " << seed << ": no job ever ran slow";
  }
}

}  // namespace
}  // namespace aryl::sched
