// WhyPending: each cause a queued job can wait for, read off the core's state.
#include <gtest/gtest.h>

#include "aryl/sched/pending.h"
#include "test_util.h"

namespace aryl::sched {
namespace {

using testing::Elastic;
using testing::Harness;
using testing::Inelastic;
using testing::Servers;

constexpr double kLong = 1e9;  // work that outlasts every test

PendingReason Why(Harness& h, JobId id) { return h.scheduler().WhyPending({id}).at(0); }

JobSpec OnType(JobSpec j, const std::string& type) {
  j.gpu_types = {type};
  return j;
}

TEST(PendingTest, NoServerOfItsGpuTypeInService) {
  // The only T4 server failed: a T4 job waits for it to come back.
  auto servers = Servers(1, 0, 4);
  auto t4 = Servers(1, 0, 4, "T4", 1);
  servers.insert(servers.end(), t4.begin(), t4.end());
  Harness h(servers);
  h.Send(ServerFailed{1}, 1);
  h.Submit(OnType(Inelastic(1, 2, kLong), "T4"), 1);
  const PendingReason r = Why(h, 1);
  EXPECT_EQ(r.cause, PendingCause::kNoServer);
  ASSERT_EQ(r.types.size(), 1u);
  EXPECT_EQ(r.types[0].gpu_type, "T4");
  EXPECT_EQ(r.types[0].gpus, 4);
  EXPECT_EQ(r.types[0].in_service, 0);
  EXPECT_EQ(PendingCauseName(r.cause), "NoServer");
}

TEST(PendingTest, MinSizeLargerThanTheServersInService) {
  // Two 4-GPU servers, one failed: a 6-worker job fits the cluster, not what is in service.
  Harness h(Servers(2, 0, 4));
  h.Send(ServerFailed{1}, 1);
  h.Submit(Inelastic(1, 6, kLong), 1);
  const PendingReason r = Why(h, 1);
  EXPECT_EQ(r.cause, PendingCause::kMinSize);
  EXPECT_EQ(r.need, 6);
  ASSERT_EQ(r.types.size(), 1u);
  EXPECT_EQ(r.types[0].gpus, 8);
  EXPECT_EQ(r.types[0].in_service, 4);
  EXPECT_TRUE(r.types[0].fits_size);
}

TEST(PendingTest, ElasticJobNeedsItsSmallestAllowedSize) {
  // min 5 in powers of two: a start needs 8 workers, more than the one server in service.
  Harness h(Servers(2, 0, 4));
  h.Send(ServerFailed{1}, 1);
  JobSpec j = Elastic(1, 5, 8, kLong);
  j.granularity.kind = Granularity::Kind::kPowerOfTwo;
  h.Submit(j, 1);
  const PendingReason r = Why(h, 1);
  EXPECT_EQ(r.cause, PendingCause::kMinSize);
  EXPECT_EQ(r.need, 8);
}

TEST(PendingTest, GangNeedsItsWorkersFreeTogetherOnOneType) {
  // One free A100 and two free T4s: a 3-worker job has 3 free GPUs, not 3 of one type.
  auto servers = Servers(1, 0, 4);
  auto t4 = Servers(1, 0, 4, "T4", 1);
  servers.insert(servers.end(), t4.begin(), t4.end());
  Harness h(servers);
  h.Submit(OnType(Inelastic(1, 3, kLong), "A100"), 1);
  h.Submit(OnType(Inelastic(2, 2, kLong), "T4"), 1);
  ASSERT_EQ(h.job(1).status, JobStatus::kRunning);
  ASSERT_EQ(h.job(2).status, JobStatus::kRunning);
  h.Submit(Inelastic(3, 3, kLong), 1);
  const PendingReason r = Why(h, 3);
  EXPECT_EQ(r.cause, PendingCause::kGang);
  ASSERT_EQ(r.types.size(), 2u);
  EXPECT_EQ(r.types[0].free + r.types[1].free, 3);
}

TEST(PendingTest, CapacityCountsTheJobsAheadOfIt) {
  // A full 4-GPU server: two 2-worker jobs wait for capacity, the later one behind the earlier.
  Harness h(Servers(1, 0, 4));
  h.Submit(Inelastic(1, 4, kLong), 1);
  h.Submit(Inelastic(2, 2, kLong), 1);
  h.Submit(Inelastic(3, 2, kLong), 1);
  const auto r = h.scheduler().WhyPending({1, 2, 3});
  EXPECT_EQ(r[0].cause, PendingCause::kNone) << "job 1 runs";
  EXPECT_EQ(r[1].cause, PendingCause::kCapacity);
  EXPECT_EQ(r[1].ahead, 0);
  EXPECT_EQ(r[2].cause, PendingCause::kCapacity);
  EXPECT_EQ(r[2].ahead, 1);
  EXPECT_EQ(r[2].need, 2);
  EXPECT_EQ(r[2].types.at(0).free, 0);
}

TEST(PendingTest, FlexibleWorkersCountAsFreeUntilTheNextRound) {
  // An elastic job holds every GPU above its base size: a job queued without a
  // round fits them, and the next round starts it by shrinking the elastic job.
  Harness h(Servers(1, 0, 4));
  h.Submit(Elastic(1, 1, 4, kLong), 1);
  ASSERT_EQ(h.job(1).workers, 4);
  JobSpec j = Inelastic(2, 2, kLong);
  j.submit_time = h.now() + 1;
  ASSERT_TRUE(h.scheduler().Apply({h.now() + 1, JobSubmitted{j}}).ok());
  const PendingReason r = Why(h, 2);
  EXPECT_EQ(r.cause, PendingCause::kPriority);
  EXPECT_EQ(r.types.at(0).free, 0);
  EXPECT_EQ(r.types.at(0).flexible, 3);
  h.Send(Tick{}, 2);
  EXPECT_EQ(h.job(2).status, JobStatus::kRunning);
  EXPECT_EQ(Why(h, 2).cause, PendingCause::kNone);
}

TEST(PendingTest, TiresiasOrderIsItsQueues) {
  // tiresias: the queued jobs ahead of one are those of its own queue before it.
  Harness h(Servers(1, 0, 4), "tiresias");
  h.Submit(Inelastic(1, 4, kLong), 1);
  h.Submit(Inelastic(2, 4, kLong), 1);
  h.Submit(Inelastic(3, 4, kLong), 1);
  const auto r = h.scheduler().WhyPending({2, 3});
  EXPECT_EQ(r[0].cause, PendingCause::kCapacity);
  EXPECT_EQ(r[0].ahead, 0);
  EXPECT_EQ(r[1].ahead, 1);
}

}  // namespace
}  // namespace aryl::sched
