#include "aryl/sim/simulator.h"

#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include <fstream>

#include "aryl/sched/throughput.h"
#include "aryl/sim/report.h"
#include "aryl/sim/trace.h"
#include "aryl/sim/workload.h"

namespace aryl::sim {
namespace {

// A catalog with one model "m" whose throughput is linear: w workers -> w it/s on
// A100, so a job of duration d at n GPUs has n*d iterations and runs exactly d s.
std::shared_ptr<const sched::ThroughputCatalog> LinearCatalog() {
  auto c = std::make_shared<sched::ThroughputCatalog>();
  EXPECT_TRUE(c->AddTable("m", "A100", {{1, 2, 4, 8, 16}, {1, 2, 4, 8, 16}}).ok());
  return c;
}

sched::JobSpec Job(sched::JobId id, double submit, double duration, int gpus) {
  sched::JobSpec j;
  j.id = id;
  j.name = "j" + std::to_string(id);
  j.submit_time = submit;
  j.min_workers = j.max_workers = gpus;
  j.model = "m";
  j.total_work = duration * gpus;
  return j;
}

SimConfig OneServer() {
  SimConfig c;
  c.training = *ParsePoolSpec("1x8xA100", "--training");
  c.inference = {};
  c.tick = 0;
  c.progress = false;
  c.timeline_interval = 10;
  return c;
}

std::vector<sched::JobSpec> ThreeJobs() {
  // Each job needs the whole server; durations 100, 50, 10 submitted at 0, 1, 2.
  return {Job(1, 0, 100, 8), Job(2, 1, 50, 8), Job(3, 2, 10, 8)};
}

TEST(SimulatorTest, ThreeJobsOnOneServerFifo) {
  // FIFO: A 0-100, B 100-150, C 150-160 -> JCT 100, 149, 158; queue 0, 99, 148.
  SimConfig c = OneServer();
  c.scheduler.fifo = true;
  Simulator sim(c, ThreeJobs(), DemandCurve::Constant(0), LinearCatalog());
  auto r = sim.Run("baseline");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metrics.jobs_completed, 3);
  EXPECT_NEAR(r->metrics.avg_jct_s, (100 + 149 + 158) / 3.0, 1e-6);
  EXPECT_NEAR(r->metrics.avg_queue_s, (0 + 99 + 148) / 3.0, 1e-6);
  EXPECT_NEAR(r->metrics.p50_jct_s, 149, 1e-6);
  EXPECT_EQ(r->metrics.preemptions, 0);
  EXPECT_NEAR(r->metrics.end_time_s, 160, 1e-6);
  // Busy all the time between the first and last submission.
  EXPECT_NEAR(r->metrics.training_usage, 1.0, 1e-9);
}

TEST(SimulatorTest, ThreeJobsOnOneServerSjf) {
  // SJF: A 0-100 (alone at t=0), then C 100-110, B 110-160 -> JCT 100, 159, 108.
  Simulator sim(OneServer(), ThreeJobs(), DemandCurve::Constant(0), LinearCatalog());
  auto r = sim.Run("baseline");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->metrics.avg_jct_s, (100 + 159 + 108) / 3.0, 1e-6);
  EXPECT_NEAR(r->metrics.avg_queue_s, (0 + 109 + 98) / 3.0, 1e-6);
  EXPECT_EQ(r->jcts, (std::vector<double>{100, 108, 159}));
}

SimConfig WithLoanedServer(const std::string& demand_csv, DemandCurve* demand) {
  SimConfig c = OneServer();
  c.inference = *ParsePoolSpec("1x8xA100", "--inference");
  c.reclaim_deadline = 30;
  *demand = *ParseDemandCsv(demand_csv, "d.csv", 1);
  return c;
}

// J1 (8 GPUs, 1000 s) on the training server and J2 (default 8 GPUs, 1000 s,
// t=1) on the inference server, loaned at t=0 and reclaimed at t=100 with
// `deadline` seconds of notice.
Result<RunResult> ReclaimAtHundred(const std::string& policy, double deadline,
                                   sched::JobSpec j2 = Job(2, 1, 1000, 8)) {
  DemandCurve demand = DemandCurve::Constant(0);
  SimConfig c = WithLoanedServer("time_s,servers\n0,0\n100,1\n", &demand);
  c.reclaim_deadline = deadline;
  Simulator sim(c, {Job(1, 0, 1000, 8), std::move(j2)}, demand, LinearCatalog());
  return sim.Run(policy);
}

TEST(SimulatorTest, ReclaimPreemptsTheInelasticJobOnTheLoanedServer) {
  // The inference server is loaned at t=0 and reclaimed at t=100. J1 (8 GPUs, 1000 s)
  // takes the training server, J2 (8 GPUs, 1000 s, t=1) the loaned one. The reclaim
  // preempts J2 with no notice (deadline 0: no checkpoint on notice, 99 s lost); it
  // restarts when J1 ends at 1000, pays the 60 s restart pause and ends at 2060:
  // JCT 2059.
  auto r = ReclaimAtHundred("loan-only", 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metrics.reclaims, 1);
  EXPECT_EQ(r->metrics.reclaims_late, 0);
  EXPECT_EQ(r->metrics.preemptions, 1);
  EXPECT_NEAR(r->metrics.avg_jct_s, (1000 + 2059) / 2.0, 1e-6);
  EXPECT_NEAR(r->metrics.loaned_gpu_hours, 8 * 99 / 3600.0, 1e-9);
  // The baseline never uses the loaned server: J2 waits for J1.
  auto b = ReclaimAtHundred("baseline", 0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->metrics.preemptions, 0);
  EXPECT_EQ(b->metrics.loaned_gpu_hours, 0);
  EXPECT_NEAR(b->metrics.avg_jct_s, (1000 + 1999) / 2.0, 1e-6);
}

TEST(SimulatorTest, WaitingAndUsefulWorkCountWhatThePreemptionCost) {
  // The no-notice reclaim above: J2 starts at once (time to first start 0) but
  // waits 900 s after its preemption (JCT 2059 - 99 s held before - 1060 s after).
  // Allocated 8 x (1000 + 99 + 1060) GPU-s; useful 8 x 2000 (J2 kept 1000 s of
  // progress); wasted 8 x (99 lost + 60 paused). The loaned type is A100, so the
  // normalized useful work equals the useful work.
  auto r = ReclaimAtHundred("loan-only", 0);
  ASSERT_TRUE(r.ok()) << r.status();
  const RunMetrics& m = r->metrics;
  EXPECT_NEAR(m.avg_queue_s, 0, 1e-9);
  EXPECT_NEAR(m.avg_wait_s, 900 / 2.0, 1e-6);
  EXPECT_NEAR(m.p95_wait_s, 900 * 0.95, 1e-6);
  EXPECT_NEAR(m.allocated_gpu_hours, 8 * 2159 / 3600.0, 1e-9);
  EXPECT_NEAR(m.useful_gpu_hours, 8 * 2000 / 3600.0, 1e-9);
  EXPECT_NEAR(m.useful_norm_gpu_hours, 8 * 2000 / 3600.0, 1e-9);
  EXPECT_NEAR(m.wasted_gpu_hours, 8 * 159 / 3600.0, 1e-9);
  ASSERT_EQ(r->jobs.size(), 2u);
  EXPECT_EQ(r->jobs[1].name, "j2");
  EXPECT_EQ(r->jobs[1].preemptions, 1);
  EXPECT_EQ(r->jobs[1].gpu_types, "A100");
  EXPECT_NEAR(r->jobs[1].waiting(), 900, 1e-6);
  // --jobs-csv writes the same, one row per job.
  const std::string path = ::testing::TempDir() + "/jobs.csv";
  ASSERT_TRUE(WriteJobsCsv(path, {*r}).ok());
  std::ifstream in(path);
  std::string header, row1, row2;
  std::getline(in, header);
  std::getline(in, row1);
  std::getline(in, row2);
  EXPECT_EQ(header, "policy,job_id,submit_s,first_start_s,finish_s,waiting_s,preemptions,rescales,gpu_types");
  EXPECT_EQ(row1, "loan-only,j1,0.000,0.000,1000.000,0.000,0,0,A100");
  EXPECT_EQ(row2, "loan-only,j2,1.000,1.000,2060.000,900.000,1,0,A100");
}

TEST(SimulatorTest, UsefulWorkIsNormalizedToTrainingGpuSpeed) {
  // J1 holds the training server; J2 (8 GPUs, 100 s of A100 work) runs on a loaned
  // T4 server at a quarter of the speed: 400 s, 8 x 400 useful GPU-s, but only
  // 8 x 100 GPU-s at training speed.
  auto catalog = std::make_shared<sched::ThroughputCatalog>();
  ASSERT_TRUE(catalog->AddTable("m", "A100", {{1, 2, 4, 8, 16}, {1, 2, 4, 8, 16}}).ok());
  ASSERT_TRUE(catalog->AddTable("m", "T4", {{1, 2, 4, 8, 16}, {0.25, 0.5, 1, 2, 4}}).ok());
  SimConfig c = OneServer();
  c.inference = *ParsePoolSpec("1x8xT4", "--inference");
  c.scheduler.type_aware = false;  // take the slow server rather than wait
  Simulator sim(c, {Job(1, 0, 1000, 8), Job(2, 1, 100, 8)}, DemandCurve::Constant(0), catalog);
  auto r = sim.Run("loan-only");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->jobs[1].gpu_types, "T4");
  EXPECT_NEAR(r->metrics.useful_gpu_hours, 8 * (1000 + 400) / 3600.0, 1e-9);
  EXPECT_NEAR(r->metrics.useful_norm_gpu_hours, 8 * (1000 + 100) / 3600.0, 1e-9);
  EXPECT_NEAR(r->metrics.wasted_gpu_hours, 0, 1e-9);
}

TEST(SimulatorTest, ReclaimWithNoticeCheckpointsBeforePreempting) {
  // The same reclaim with a 30 s deadline: J2's checkpoint on notice takes 5 s
  // (no state size: the fixed part), so it keeps its 99 s of work, resumes at 1000
  // after the 10 s resume pause with 901 s left and ends at 1911: JCT 1910.
  auto r = ReclaimAtHundred("loan-only", 30);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metrics.preemptions, 1);
  EXPECT_EQ(r->metrics.reclaims_late, 0);
  EXPECT_NEAR(r->metrics.avg_jct_s, (1000 + 1910) / 2.0, 1e-6);
  // A state that takes longer to save than the notice is not saved: as with no notice.
  sched::JobSpec big = Job(2, 1, 1000, 8);
  big.state_bytes = 26e9;  // 5 s + 26 s > 30 s
  auto l = ReclaimAtHundred("loan-only", 30, big);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_NEAR(l->metrics.avg_jct_s, (1000 + 2059) / 2.0, 1e-6);
}

TEST(SimulatorTest, ALongerReclaimDeadlineNeverCostsMore) {
  // 2x8 training and 3x8 loaned A100 servers, 40 jobs (1-8 GPUs, 60-3,000 s,
  // every other one elastic on [n, 2n]) arriving over 2,000 s; at t=1,500
  // inference takes all three servers back. With a deadline of 0, 60, 300 or
  // 3,600 s, a longer one never costs more preemptions or more GPU-time of
  // lost work, and jobs left to finish make the longest deadline strictly
  // cheaper than no notice. Under loan-only (no shrinks) the wasted GPU-time
  // (lost work and pauses) never grows either; under aryl a reclaim may trade
  // a preemption for shrinks, whose rescale pauses can cost more GPU-time
  // (costs are ordered by preemptions first). Every reclaim is met in time
  // (the fidelity checks).
  std::mt19937_64 rng(5);
  std::vector<sched::JobSpec> jobs;
  for (int i = 1; i <= 40; ++i) {
    const int gpus = 1 << (rng() % 4);
    sched::JobSpec j = Job(i, (i - 1) * 50.0, 60 + static_cast<double>(rng() % 2941), gpus);
    if (i % 2 == 0) {
      j.kind = sched::JobKind::kElastic;
      j.max_workers = 2 * gpus;
      j.requested_workers = gpus;
    }
    jobs.push_back(j);
  }
  for (const char* policy : {"aryl", "loan-only"}) {
    double prev_wasted = 0, prev_lost = 0;
    std::int64_t prev_preempt = 0, prev_preempt0 = 0;
    for (double deadline : {0.0, 60.0, 300.0, 3600.0}) {
      DemandCurve demand = DemandCurve::Constant(0);
      SimConfig c = OneServer();
      c.training = *ParsePoolSpec("2x8xA100", "--training");
      c.inference = *ParsePoolSpec("3x8xA100", "--inference");
      demand = *ParseDemandCsv("time_s,servers\n0,0\n1500,3\n", "d.csv", 3);
      c.reclaim_deadline = deadline;
      Simulator sim(c, jobs, demand, LinearCatalog());
      auto r = sim.Run(policy);
      ASSERT_TRUE(r.ok()) << policy << " deadline " << deadline << ": " << r.status();
      const RunMetrics& m = r->metrics;
      EXPECT_EQ(m.reclaims_late, 0);
      std::printf("[deadline] %s %5.0f s: preemptions %lld, lost %.3f GPU-h, wasted %.3f GPU-h, avg JCT %.1f s\n",
                  policy, deadline, static_cast<long long>(m.preemptions), m.lost_gpu_hours, m.wasted_gpu_hours,
                  m.avg_jct_s);
      if (deadline > 0) {
        EXPECT_LE(m.preemptions, prev_preempt) << policy << " deadline " << deadline;
        EXPECT_LE(m.lost_gpu_hours, prev_lost + 1e-9) << policy << " deadline " << deadline;
        if (std::string(policy) == "loan-only") {
          EXPECT_LE(m.wasted_gpu_hours, prev_wasted + 1e-9) << policy << " deadline " << deadline;
        }
      }
      if (deadline == 3600) EXPECT_LT(m.preemptions, prev_preempt0);
      if (deadline == 0) prev_preempt0 = m.preemptions;
      prev_wasted = m.wasted_gpu_hours;
      prev_lost = m.lost_gpu_hours;
      prev_preempt = m.preemptions;
    }
  }
}

TEST(SimulatorTest, ReclaimShrinksAnElasticJobInsteadOfPreempting) {
  // An elastic job [8, 16] grows onto the loaned server; the reclaim at t=100 shrinks
  // it back to 8 on the training server: a rescale, no preemption.
  DemandCurve demand = DemandCurve::Constant(0);
  SimConfig c = WithLoanedServer("time_s,servers\n0,0\n100,1\n", &demand);
  sched::JobSpec j = Job(1, 0, 1000, 8);
  j.kind = sched::JobKind::kElastic;
  j.max_workers = 16;
  j.requested_workers = 8;
  Simulator sim(c, {j}, demand, LinearCatalog());
  auto r = sim.Run("aryl");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metrics.preemptions, 0);
  EXPECT_EQ(r->metrics.reclaims, 1);
  EXPECT_GE(r->metrics.rescales, 1);
  EXPECT_GT(r->metrics.loaned_gpu_hours, 0);
  EXPECT_LT(r->metrics.avg_jct_s, 1000);  // faster than at its requested size
}

TEST(SimulatorTest, AJobThatCanNeverRunFailsTheRun) {
  // A 16-GPU job fits only across the training server and the loaned one, which the
  // baseline never uses: the queue can never drain, and the run is an error.
  DemandCurve demand = DemandCurve::Constant(0);
  SimConfig c = WithLoanedServer("time_s,servers\n0,0\n", &demand);
  c.stall_limit = 100;
  c.tick = 50;
  Simulator sim(c, {Job(1, 0, 10, 16)}, demand, LinearCatalog());
  auto r = sim.Run("baseline");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1 of 1 jobs never finished under baseline"), std::string::npos) << r.status();
  // A job larger than the whole cluster is refused by the core when submitted.
  Simulator too_big(OneServer(), {Job(1, 0, 10, 32)}, DemandCurve::Constant(0), LinearCatalog());
  EXPECT_FALSE(too_big.Run("baseline").ok());
}

TEST(SimulatorTest, FidelityCatchesADoubleBookedGpu) {
  // A plan that starts a job on 16 GPUs of an 8-GPU server fails the run, naming both.
  SimConfig c = OneServer();
  c.plan_hook = [](sched::Plan& plan) {
    for (auto& a : plan.actions) {
      if (a.type == sched::ActionType::kStart && a.job == 2) a.placement.begin()->second += 8;
    }
  };
  Simulator sim(c, ThreeJobs(), DemandCurve::Constant(0), LinearCatalog());
  auto r = sim.Run("baseline");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fidelity: GPU double-booked"), std::string::npos) << r.status();
}

TEST(SimulatorTest, FidelityCatchesAMissedReclaim) {
  // A plan whose server returns are dropped leaves the reclaim unmet: an error at its deadline.
  DemandCurve demand = DemandCurve::Constant(0);
  SimConfig c = WithLoanedServer("time_s,servers\n0,0\n100,1\n", &demand);
  c.plan_hook = [](sched::Plan& plan) {
    std::erase_if(plan.actions, [](const sched::Action& a) { return a.type == sched::ActionType::kReturnServer; });
  };
  Simulator sim(c, {Job(1, 0, 1000, 8)}, demand, LinearCatalog());
  auto r = sim.Run("baseline");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fidelity: a reclaim due at t=130 still misses 1 servers"), std::string::npos)
      << r.status();
}

TEST(SimulatorTest, FidelityCatchesAJobRunAtTheWrongSize) {
  // Starting an inelastic 8-GPU job on 4 GPUs is outside [min, max]: an error.
  SimConfig c = OneServer();
  c.plan_hook = [](sched::Plan& plan) {
    for (auto& a : plan.actions) {
      if (a.type == sched::ActionType::kStart) a.placement.begin()->second = 4;
    }
  };
  Simulator sim(c, ThreeJobs(), DemandCurve::Constant(0), LinearCatalog());
  auto r = sim.Run("baseline");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside [8, 8]"), std::string::npos) << r.status();
}

// The shipped trace of cluster10 on a small cluster with a daily inference cycle.
Simulator RealTraceSim(SpeedKnowledge speed = SpeedKnowledge::kOracle) {
  auto trace = ReadTraces({std::string(ARYL_SOURCE_DIR) + "/data/traces/itp/cluster10.csv"});
  EXPECT_TRUE(trace.ok()) << trace.status();
  auto catalog = LoadCatalog(std::string(ARYL_SOURCE_DIR) + "/data/throughput",
                             {.reference_type = "A100", .relative_speed = 0.25, .other_types = {"T4"}});
  EXPECT_TRUE(catalog.ok()) << catalog.status();
  auto jobs = BuildJobs(*trace, **catalog, {.elastic_fraction = 0.5, .seed = 3});
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  SimConfig c;
  c.training = *ParsePoolSpec("2x8xA100", "--training");
  c.inference = *ParsePoolSpec("2x8xT4", "--inference");
  c.progress = false;
  c.scheduler.seed = 3;
  c.speed_knowledge = speed;
  auto demand = ParseDemand("daily:noise=0.1", 2, 3);
  EXPECT_TRUE(demand.ok());
  return Simulator(c, std::move(*jobs), std::move(*demand), std::move(*catalog));
}

std::string JsonWithoutWallTime(const RunMetrics& m) {
  auto j = RunToJson(m);
  j["sim_wall_s"] = 0;
  return j.dump();
}

TEST(SimulatorTest, SameInputsAndSeedGiveIdenticalResults) {
  // Two runs of every policy on a real trace agree byte for byte (sim_wall_s aside),
  // and every fidelity check passes.
  Simulator sim = RealTraceSim();
  for (const std::string policy : {"aryl", "baseline", "loan-only", "elastic-only", "optimus", "afs", "tiresias"}) {
    auto a = sim.Run(policy);
    auto b = sim.Run(policy);
    ASSERT_TRUE(a.ok()) << policy << ": " << a.status();
    ASSERT_TRUE(b.ok()) << policy << ": " << b.status();
    EXPECT_EQ(JsonWithoutWallTime(a->metrics), JsonWithoutWallTime(b->metrics)) << policy;
    EXPECT_EQ(a->metrics.jobs_completed, 260) << policy;
    EXPECT_EQ(a->metrics.reclaims_late, 0) << policy;
    EXPECT_LE(a->metrics.training_usage, 1.0) << policy;
    EXPECT_LE(a->metrics.overall_usage, 1.0) << policy;
  }
}

TEST(SimulatorTest, LearnedAndLinearSpeedPassEveryCheckAndRepeat) {
  // Without the oracle (speeds fitted from noisy samples, or the linear model)
  // every policy still completes every job, meets every reclaim, and repeats
  // byte for byte; learning lands nearer the oracle than the linear model.
  Simulator oracle = RealTraceSim();
  Simulator learned = RealTraceSim(SpeedKnowledge::kLearned);
  Simulator linear = RealTraceSim(SpeedKnowledge::kLinear);
  for (const std::string policy : {"aryl", "baseline", "elastic-only", "optimus", "afs", "tiresias"}) {
    for (Simulator* sim : {&learned, &linear}) {
      auto a = sim->Run(policy);
      auto b = sim->Run(policy);
      ASSERT_TRUE(a.ok()) << policy << ": " << a.status();
      ASSERT_TRUE(b.ok()) << policy << ": " << b.status();
      EXPECT_EQ(JsonWithoutWallTime(a->metrics), JsonWithoutWallTime(b->metrics)) << policy;
      EXPECT_EQ(a->metrics.jobs_completed, 260) << policy;
      EXPECT_EQ(a->metrics.reclaims_late, 0) << policy;
    }
  }
  auto o = oracle.Run("aryl");
  auto l = learned.Run("aryl");
  auto n = linear.Run("aryl");
  ASSERT_TRUE(o.ok() && l.ok() && n.ok());
  EXPECT_LT(std::fabs(l->metrics.avg_jct_s - o->metrics.avg_jct_s), std::fabs(n->metrics.avg_jct_s - o->metrics.avg_jct_s));
}

TEST(SimulatorTest, TwoJobsOneThatScalesOneFlatUnderEachSpeedKnowledge) {
  // Two elastic jobs [2, 16] on one 16-GPU server: "scales" runs w it/s at w
  // GPUs, "flat" 1 it/s at any size (a fixed per-step cost). The oracle gives
  // the 12 spare GPUs to "scales"; the linear model splits them. Learning does
  // not find "flat" out here (a known gap, docs/scheduler.md, failure mode 1):
  // measured only at 7-10 GPUs, "flat" is predicted slower below them by the
  // prior's shape, so it is never shrunk and never measured there. This pins
  // the gap: all three complete, the oracle is best, learning stays within 2x.
  auto c = std::make_shared<sched::ThroughputCatalog>();
  ASSERT_TRUE(c->AddTable("scales", "A100", {{1, 2, 4, 8, 16}, {1, 2, 4, 8, 16}}).ok());
  ASSERT_TRUE(c->AddTable("flat", "A100", {{1, 2, 4, 8, 16}, {1, 1, 1, 1, 1}}).ok());
  std::vector<sched::JobSpec> jobs;
  for (sched::JobId id : {1, 2}) {
    sched::JobSpec j = Job(id, 0, 20000, 2);
    j.kind = sched::JobKind::kElastic;
    j.max_workers = 16;
    j.model = id == 1 ? "scales" : "flat";
    j.total_work = id == 1 ? 40000 : 20000;
    jobs.push_back(j);
  }
  SimConfig config = OneServer();
  config.training = *ParsePoolSpec("1x16xA100", "--training");
  config.tick = 600;
  std::map<SpeedKnowledge, double> scales_jct;
  for (SpeedKnowledge k : {SpeedKnowledge::kOracle, SpeedKnowledge::kLearned, SpeedKnowledge::kLinear}) {
    config.speed_knowledge = k;
    Simulator sim(config, jobs, DemandCurve::Constant(0), c);
    auto r = sim.Run("aryl");
    ASSERT_TRUE(r.ok()) << SpeedKnowledgeName(k) << ": " << r.status();
    ASSERT_EQ(r->metrics.jobs_completed, 2);
    scales_jct[k] = r->jobs[0].finish - r->jobs[0].submit;
  }
  EXPECT_NEAR(scales_jct[SpeedKnowledge::kOracle], 40000.0 / 14 + 30, 1);  // 14 GPUs after one rescale
  EXPECT_GT(scales_jct[SpeedKnowledge::kLinear], 1.5 * scales_jct[SpeedKnowledge::kOracle]);
  EXPECT_GT(scales_jct[SpeedKnowledge::kLearned], scales_jct[SpeedKnowledge::kOracle]);
  EXPECT_LT(scales_jct[SpeedKnowledge::kLearned], 2 * scales_jct[SpeedKnowledge::kOracle]);
}

}  // namespace
}  // namespace aryl::sim
