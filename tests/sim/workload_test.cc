#include "aryl/sim/workload.h"

#include <gtest/gtest.h>

#include <map>

namespace aryl::sim {
namespace {

const std::string kThroughputDir = std::string(ARYL_SOURCE_DIR) + "/data/throughput";

std::shared_ptr<const sched::ThroughputCatalog> Catalog() {
  auto c = LoadCatalog(kThroughputDir, {.reference_type = "A100", .relative_speed = 0.25, .other_types = {"T4", "V100"},
                                        .batch_size = 0});
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

Trace MakeTrace(int n, int gpus) {
  Trace t;
  for (int i = 0; i < n; ++i) {
    TraceJob j;
    j.name = "job-" + std::to_string(i);
    j.submit_time = i;
    j.duration = 100;
    j.num_gpu = gpus;
    j.source = "t.csv:" + std::to_string(i + 2);
    t.jobs.push_back(j);
  }
  return t;
}

TEST(WorkloadTest, TheDefaultRowIsTheModelsUsualBatch) {
  // By default each table's row is the measured batch nearest the model's
  // usual one (data/throughput/usual_batch.csv): resnet50 256 (of 64/128/256),
  // resnet50_cifar10 128 (of 64/128/256), bert 128 on A100 (usual 256; rows
  // 64/128) and 384 on T4 (its only row), rescaled to A100 iterations.
  auto c = LoadCatalog(kThroughputDir, {.reference_type = "A100", .other_types = {"T4"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR((*c)->Throughput("resnet50", "A100", 1), 1.843374951404324, 1e-12);
  EXPECT_NEAR((*c)->Throughput("resnet50_cifar10", "A100", 1), 26.39903482326002, 1e-12);
  EXPECT_NEAR((*c)->Throughput("bert", "A100", 1), 3.5749256045333064, 1e-12);
  EXPECT_NEAR((*c)->Throughput("bert", "T4", 1), 0.03440690542609718 * 384 / 128, 1e-12);
  // With the usual batch, resnet50 keeps scaling from 8 to 64 GPUs; the first row flattens.
  auto first = LoadCatalog(kThroughputDir, {.reference_type = "A100", .batch_size = 0});
  ASSERT_TRUE(first.ok());
  EXPECT_GT((*c)->Throughput("resnet50", "A100", 64) / (*c)->Throughput("resnet50", "A100", 8), 1.5);
  EXPECT_LT((*first)->Throughput("resnet50", "A100", 64) / (*first)->Throughput("resnet50", "A100", 8), 1.0);
}

TEST(WorkloadTest, CatalogConvertsOtherTypesToReferenceIterations) {
  // bert's T4 table (batch 384) is rescaled to A100 iterations (batch 64); V100 has no
  // table and runs at the relative speed; A100 values are the measured ones.
  auto c = Catalog();
  EXPECT_NEAR(c->Throughput("bert", "A100", 1), 6.030661553957379, 1e-12);
  EXPECT_NEAR(c->Throughput("bert", "T4", 1), 0.03440690542609718 * 384 / 64, 1e-12);
  EXPECT_NEAR(c->Throughput("gpt2", "V100", 8), 0.25 * c->Throughput("gpt2", "A100", 8), 1e-12);
  EXPECT_EQ(c->Throughput("resnet50_cifar10", "A100", 16), 0);  // a 0 cell: not allowed
  EXPECT_TRUE(LoadCatalog("/no/such/dir", {}).status().IsNotFound());
}

TEST(WorkloadTest, ModelsAreAssignedFromTheJobIdOnly) {
  // The same job id gets the same model whatever the seed; work = duration x thr(n).
  auto c = Catalog();
  Trace t = MakeTrace(200, 8);
  auto a = BuildJobs(t, *c, {.seed = 1});
  auto b = BuildJobs(t, *c, {.seed = 99});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok());
  std::map<std::string, int> models;
  for (std::size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].model, (*b)[i].model);
    EXPECT_EQ((*a)[i].id, i + 1);
    EXPECT_NEAR((*a)[i].total_work, 100 * c->Throughput((*a)[i].model, "A100", 8), 1e-9);
    ++models[(*a)[i].model];
  }
  EXPECT_GE(models.size(), 5u);  // spread over the catalog
}

TEST(WorkloadTest, SixteenGpuJobsNeverGetAModelThatForbidsIt) {
  // resnet50_cifar10 has 0 at 16 GPUs: a 16-GPU job must get another model.
  auto c = Catalog();
  auto jobs = BuildJobs(MakeTrace(300, 16), *c, {});
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  for (const auto& j : *jobs) EXPECT_NE(j.model, "resnet50_cifar10");
}

TEST(WorkloadTest, ElasticFractionAndRange) {
  // About F of the jobs become elastic, on [n/2, 2n] powers of two, requested n.
  auto c = Catalog();
  auto jobs = BuildJobs(MakeTrace(2000, 4), *c, {.elastic_fraction = 0.3, .elastic_lo = 0.5, .elastic_hi = 2, .seed = 5});
  ASSERT_TRUE(jobs.ok());
  int elastic = 0;
  for (const auto& j : *jobs) {
    if (j.kind != sched::JobKind::kElastic) {
      EXPECT_EQ(j.min_workers, 4);
      EXPECT_EQ(j.max_workers, 4);
      continue;
    }
    ++elastic;
    EXPECT_EQ(j.min_workers, 2);
    EXPECT_EQ(j.requested_workers, 4);
    EXPECT_EQ(j.max_workers, 8);
    EXPECT_EQ(j.granularity.kind, sched::Granularity::Kind::kPowerOfTwo);
  }
  EXPECT_NEAR(elastic / 2000.0, 0.3, 0.04);
  auto again = BuildJobs(MakeTrace(2000, 4), *c, {.elastic_fraction = 0.3, .seed = 5});
  for (std::size_t i = 0; i < jobs->size(); ++i) EXPECT_EQ((*jobs)[i].kind, (*again)[i].kind);
}

TEST(WorkloadTest, TraceColumnsWinAndBadModelsNameTheRow) {
  // Explicit elastic columns are used as given; an unknown model names file:line.
  auto c = Catalog();
  Trace t = MakeTrace(2, 4);
  t.jobs[0].model = "gpt2";
  t.jobs[0].elastic = true;
  t.jobs[0].min_workers = 1;
  t.jobs[0].max_workers = 6;
  auto jobs = BuildJobs(t, *c, {});
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ((*jobs)[0].model, "gpt2");
  EXPECT_EQ((*jobs)[0].kind, sched::JobKind::kElastic);
  EXPECT_EQ((*jobs)[0].min_workers, 1);
  EXPECT_EQ((*jobs)[0].max_workers, 6);
  t.jobs[1].model = "nosuchmodel";
  auto bad = BuildJobs(t, *c, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.csv:3: model: no throughput table for 'nosuchmodel'"), std::string::npos)
      << bad.status();
  EXPECT_FALSE(ParseElasticRange("2:1").ok());
  EXPECT_FALSE(ParseElasticRange("0.5").ok());
  EXPECT_TRUE(ParseElasticRange("0.5:2").ok());
}

}  // namespace
}  // namespace aryl::sim
