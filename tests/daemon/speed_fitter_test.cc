// SpeedFitter: the daemon's fitting thread (scheduler/daemon/src/speed_fitter.h).
#include "speed_fitter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace aryl::daemon {
namespace {

using Clock = std::chrono::steady_clock;

sched::FitRequest Request(sched::JobId job, double step_time = 0.5) {
  sched::FitRequest r;
  r.job = job;
  r.samples.push_back(sched::StepSample{"A100", 1, 1, 1.0, step_time, 0.01, 20});
  r.samples.push_back(sched::StepSample{"A100", 4, 1, 0.25, step_time / 2, 0.01, 20});
  r.prior = sched::SpeedPrior{sched::OptimisticParams(), 10.0, 10.0};
  r.reference_type = "A100";
  return r;
}

// Polls until `n` fits are back or 10 s pass.
std::vector<SpeedFitter::Done> PollFor(SpeedFitter& fitter, std::size_t n) {
  std::vector<SpeedFitter::Done> out;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (out.size() < n && Clock::now() < deadline) {
    for (auto& d : fitter.Poll()) out.push_back(std::move(d));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return out;
}

TEST(SpeedFitterTest, FitsAsRunFitDoes) {
  // Two jobs' fits come back by Poll, each what SpeedModels::RunFit gives.
  SpeedFitter fitter;
  ASSERT_TRUE(fitter.Submit(Request(1)));
  ASSERT_TRUE(fitter.Submit(Request(2, 0.8)));
  std::vector<SpeedFitter::Done> done = PollFor(fitter, 2);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& d : done) {
    ASSERT_TRUE(d.result.ok()) << d.result.status().ToString();
    Result<sched::FitResult> want =
        sched::SpeedModels::RunFit(Request(d.job, d.job == 1 ? 0.5 : 0.8));
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(d.result->params.alpha_c, want->params.alpha_c);
    EXPECT_EQ(d.result->params.beta_n, want->params.beta_n);
    EXPECT_EQ(d.result->fitted_count, want->fitted_count);
    EXPECT_GE(d.seconds, 0);
  }
  EXPECT_FALSE(fitter.InFlight(1));
}

TEST(SpeedFitterTest, OneFitPerJobAtATime) {
  // A second fit of a job is refused until the first is polled.
  SpeedFitter fitter;
  ASSERT_TRUE(fitter.Submit(Request(1)));
  EXPECT_TRUE(fitter.InFlight(1));
  EXPECT_FALSE(fitter.Submit(Request(1)));
  EXPECT_TRUE(fitter.Submit(Request(2)));
  ASSERT_EQ(PollFor(fitter, 2).size(), 2u);
  EXPECT_TRUE(fitter.Submit(Request(1)));
}

TEST(SpeedFitterTest, DiscardDropsEveryFitOfTheOldModels) {
  // Queued and running fits are dropped by Discard; the job may be submitted
  // again at once, and only that fit comes back.
  SpeedFitter fitter;
  for (sched::JobId id = 1; id <= 20; ++id) ASSERT_TRUE(fitter.Submit(Request(id)));
  fitter.Discard();
  EXPECT_FALSE(fitter.InFlight(1));
  ASSERT_TRUE(fitter.Submit(Request(1, 0.9)));
  std::vector<SpeedFitter::Done> done = PollFor(fitter, 1);
  // A dropped fit would be back by now.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (auto& d : fitter.Poll()) done.push_back(std::move(d));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].job, 1);
}

TEST(SpeedFitterTest, StopJoinsPromptlyAndRefusesMore) {
  // Stop with a long queue returns after at most the running fit; then
  // nothing is accepted, and a second Stop is harmless.
  SpeedFitter fitter;
  for (sched::JobId id = 1; id <= 200; ++id) ASSERT_TRUE(fitter.Submit(Request(id)));
  const auto t0 = Clock::now();
  fitter.Stop();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  EXPECT_FALSE(fitter.Submit(Request(999)));
  fitter.Stop();
}

}  // namespace
}  // namespace aryl::daemon
