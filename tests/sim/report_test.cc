#include "aryl/sim/report.h"

#include <gtest/gtest.h>

#include "aryl/sim/cluster_spec.h"
#include "aryl/sim/metrics.h"

namespace aryl::sim {
namespace {

TEST(ClusterSpecTest, ParsesGroupsAndBuildsServers) {
  // "2x8xA100+1x4xV100" gives three training servers; inference ids follow.
  auto t = ParsePoolSpec("2x8xA100+1x4xV100", "--training");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->Servers(), 3);
  EXPECT_EQ(t->Gpus(), 20);
  EXPECT_EQ(t->ToString(), "2x8xA100+1x4xV100");
  auto i = ParsePoolSpec("2x8xT4", "--inference");
  ASSERT_TRUE(i.ok());
  auto servers = BuildServers(*t, *i);
  ASSERT_EQ(servers.size(), 5u);
  EXPECT_EQ(servers[2].gpu_type, "V100");
  EXPECT_EQ(servers[3].pool, sched::Pool::kInference);
  EXPECT_EQ(servers[3].id, 3u);
  EXPECT_EQ(servers[3].name, "infer-000");
  EXPECT_EQ(ParsePoolSpec("none", "--inference")->Servers(), 0);
  auto bad = ParsePoolSpec("64x8", "--training");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--training: '64x8'"), std::string::npos) << bad.status();
  EXPECT_FALSE(ParsePoolSpec("64x0xA100", "--training").ok());
  EXPECT_FALSE(ParsePoolSpec("ax8xA100", "--training").ok());
}

TEST(MetricsTest, PercentilesAndSummary) {
  // Linear-interpolated percentiles; queuing counts submit -> first start.
  std::vector<double> v{1, 2, 3, 4, 5};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 3);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 5);
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 4.6);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
  std::vector<JobOutcome> jobs{{0, 0, 10}, {5, 10, 30}, {6, -1, -1}};
  RunMetrics m;
  auto jct = SummarizeJobs(jobs, m);
  EXPECT_EQ(m.jobs_submitted, 3);
  EXPECT_EQ(m.jobs_completed, 2);
  EXPECT_DOUBLE_EQ(m.avg_jct_s, 17.5);
  EXPECT_DOUBLE_EQ(m.avg_queue_s, 2.5);
  EXPECT_EQ(jct, (std::vector<double>{10, 25}));
}

TEST(ReportTest, JsonHasExactlyTheSchemaKeys) {
  // Each run serializes to exactly the documented keys, in order.
  RunMetrics m;
  m.policy = "aryl";
  auto j = RunToJson(m);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "policy", "jobs_completed", "avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s",
                      "avg_wait_s", "p50_wait_s", "p95_wait_s", "p99_wait_s", "avg_queue_s", "p50_queue_s",
                      "p95_queue_s", "p99_queue_s", "training_usage", "overall_usage", "loaned_gpu_hours",
                      "allocated_gpu_hours", "useful_gpu_hours", "useful_norm_gpu_hours", "wasted_gpu_hours", "lost_gpu_hours",
                      "preemptions", "rescales", "rescale_pause_gpu_hours", "reclaims", "reclaims_late", "sim_wall_s"}));
}

TEST(ReportTest, TableShowsRatiosToBaseline) {
  // With a run named baseline the table adds ratios (JCT: baseline/policy).
  RunMetrics base;
  base.policy = "baseline";
  base.avg_jct_s = 7200;
  base.overall_usage = 0.5;
  RunMetrics aryl = base;
  aryl.policy = "aryl";
  aryl.avg_jct_s = 3600;
  aryl.overall_usage = 0.75;
  std::string table = FormatTable({base, aryl});
  EXPECT_NE(table.find("ratio to baseline"), std::string::npos) << table;
  EXPECT_NE(table.find("2.00x"), std::string::npos) << table;
  EXPECT_NE(table.find("1.50x"), std::string::npos) << table;
  EXPECT_EQ(FormatTable({aryl}).find("ratio"), std::string::npos);
}

// A run that wasted a fraction of a GPU-hour less than nothing (rounding in
// the accounting) prints 0, not "-0".
TEST(ReportTest, TableNeverPrintsMinusZero) {
  RunMetrics m;
  m.policy = "baseline";
  m.wasted_gpu_hours = -0.3;
  std::string table = FormatTable({m});
  EXPECT_EQ(table.find("-0"), std::string::npos) << table;
}

TEST(ReportTest, ReclaimsOfServersARunNeverUsedAreExplained) {
  // The simulator lends idle inference servers under every policy, so a run
  // that never trains on them (baseline) still counts a reclaim per rise in
  // demand; the table says so under it rather than leave 2168 reclaims beside
  // 0 loaned GPU-hours unexplained.
  RunMetrics base;
  base.policy = "baseline";
  base.reclaims = 2168;
  RunMetrics aryl = base;
  aryl.policy = "aryl";
  aryl.loaned_gpu_hours = 2872;
  aryl.reclaims = 2171;
  std::string table = FormatTable({base, aryl});
  EXPECT_NE(table.find("baseline: 2168 reclaims of lent servers it never ran on (0 loaned GPU-h)"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("aryl: 2171 reclaims"), std::string::npos) << table;
  // No note when no such run was reclaimed.
  base.reclaims = 0;
  EXPECT_EQ(FormatTable({base, aryl}).find("never ran on"), std::string::npos);
}

}  // namespace
}  // namespace aryl::sim
