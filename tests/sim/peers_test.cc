// Peers and ablations held to their definitions on the shipped traces:
// tiresias against its authors' simulator, and loan-only as a true ablation
// (no elasticity: every job at its requested size, always).
#include <gtest/gtest.h>

#include "aryl/sim/simulator.h"
#include "aryl/sim/trace.h"
#include "aryl/sim/workload.h"

namespace aryl::sim {
namespace {

std::vector<sched::JobSpec> TraceJobs(const std::string& file, double elastic_fraction,
                                      std::shared_ptr<const sched::ThroughputCatalog>* catalog) {
  auto trace = ReadTraces({std::string(ARYL_SOURCE_DIR) + "/data/traces/itp/" + file});
  EXPECT_TRUE(trace.ok()) << trace.status();
  auto cat = LoadCatalog(std::string(ARYL_SOURCE_DIR) + "/data/throughput",
                         {.reference_type = "A100", .relative_speed = 0.25, .other_types = {"T4"}});
  EXPECT_TRUE(cat.ok()) << cat.status();
  *catalog = *cat;
  auto jobs = BuildJobs(*trace, **cat, {.elastic_fraction = elastic_fraction, .seed = 1});
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  return std::move(*jobs);
}

// cluster01.csv (1,595 jobs) on 8 servers x 8 GPUs, no inference cluster: the
// scenario measured with the reference simulator (SymbioticLab/Tiresias,
// run_sim.py --schedule dlas-gpu-2 --scheme count, 64 GPUs), whose average JCT
// is 10.87 h. The reference charges nothing for a suspension.
double TiresiasAvgJctHours(double resume_pause) {
  std::shared_ptr<const sched::ThroughputCatalog> catalog;
  auto jobs = TraceJobs("cluster01.csv", 0, &catalog);
  SimConfig c;
  c.training = *ParsePoolSpec("8x8xA100", "--training");
  c.inference = {};
  c.progress = false;
  c.scheduler.resume_pause = resume_pause;
  Simulator sim(c, std::move(jobs), DemandCurve::Constant(0), catalog);
  auto r = sim.Run("tiresias");
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return 0;
  EXPECT_EQ(r->metrics.jobs_completed, 1595);
  return r->metrics.avg_jct_s / 3600;
}

TEST(PeersTest, TiresiasAgreesWithItsReferenceSimulatorOnCluster01) {
  // Within 5% of the reference's 10.87 h, with the reference's free suspension
  // and with the default resume pause.
  EXPECT_NEAR(TiresiasAvgJctHours(0), 10.87, 0.05 * 10.87);
  EXPECT_NEAR(TiresiasAvgJctHours(sched::SchedulerConfig{}.resume_pause), 10.87, 0.05 * 10.87);
}

// cluster10 with half of the jobs elastic, on a cluster that borrows from a
// busy inference side, so that reclaims hit jobs on loaned servers.
Result<RunResult> RunWithReclaims(const std::string& policy, SimConfig* config = nullptr) {
  std::shared_ptr<const sched::ThroughputCatalog> catalog;
  auto jobs = TraceJobs("cluster10.csv", 0.5, &catalog);
  SimConfig c;
  c.training = *ParsePoolSpec("1x8xA100", "--training");
  c.inference = *ParsePoolSpec("3x8xT4", "--inference");
  c.progress = false;
  if (config) c = *config;
  auto demand = ParseDemand("daily:noise=0.1,step=600", c.inference.Servers(), 1);
  EXPECT_TRUE(demand.ok());
  Simulator sim(c, std::move(jobs), std::move(*demand), catalog);
  return sim.Run(policy);
}

TEST(PeersTest, LoanOnlyRunsEveryJobAtItsRequestedSizeThroughReclaims) {
  // The simulator fails a run in which a non-elastic policy runs a job at any
  // other size; loan-only passes with reclaims that preempt and never resize.
  auto r = RunWithReclaims("loan-only");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->metrics.reclaims, 0);
  EXPECT_GT(r->metrics.preemptions, 0);
  EXPECT_EQ(r->metrics.rescales, 0);
  EXPECT_GT(r->metrics.loaned_gpu_hours, 0);
}

TEST(PeersTest, FidelityCatchesAnotherSizeUnderANonElasticPolicy) {
  // An elastic job [4, 16] that asked for 8 GPUs, started on 4 by a plan hook
  // under loan-only: inside [min, max], but not its requested size: an error.
  auto catalog = std::make_shared<sched::ThroughputCatalog>();
  ASSERT_TRUE(catalog->AddTable("m", "A100", {{1, 2, 4, 8, 16}, {1, 2, 4, 8, 16}}).ok());
  sched::JobSpec j;
  j.id = 1;
  j.name = "j1";
  j.kind = sched::JobKind::kElastic;
  j.min_workers = 4;
  j.max_workers = 16;
  j.requested_workers = 8;
  j.model = "m";
  j.total_work = 8000;
  SimConfig c;
  c.training = *ParsePoolSpec("1x8xA100", "--training");
  c.inference = {};
  c.progress = false;
  c.plan_hook = [](sched::Plan& plan) {
    for (auto& a : plan.actions) {
      if (a.type == sched::ActionType::kStart) a.placement.begin()->second = 4;
    }
  };
  Simulator sim(c, {j}, DemandCurve::Constant(0), catalog);
  auto r = sim.Run("loan-only");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at 4 workers under a non-elastic policy; it asked for 8"), std::string::npos)
      << r.status();
  // aryl may run it at 4.
  c.plan_hook = nullptr;
  Simulator ok(c, {j}, DemandCurve::Constant(0), catalog);
  EXPECT_TRUE(ok.Run("aryl").ok());
}

}  // namespace
}  // namespace aryl::sim
