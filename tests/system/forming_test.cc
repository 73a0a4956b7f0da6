// A generation that cannot form, on a live cluster: real aryl-scheduler,
// aryl-agent and runtime workers (rt_test_worker, Gloo) on loopback, real
// SIGKILLs. The same scenarios run by the thousand in aryl-simtest
// (docs/simtest.md); here they are checked once with real processes.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "aryl/protocol/messages.h"
#include "live_cluster.h"

namespace aryl {
namespace {

namespace p = aryl::protocol;
using std::chrono::milliseconds;
using namespace aryl::livetest;  // NOLINT
namespace fs = std::filesystem;

// The pid of worker `worker` of job `job`, from the agents' logs ("job 1
// worker 2 (rank 2, slot 0) started: pid 9446"); 0 before it started.
pid_t WorkerPid(const fs::path& dir, p::JobId job, p::WorkerId worker) {
  const std::regex line("job " + std::to_string(job) + " worker " + std::to_string(worker) +
                        " \\([^)]*\\) started: pid ([0-9]+)");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("agent-", 0) != 0) continue;
    std::smatch m;
    const std::string text = ReadFile(e.path());
    if (std::regex_search(text, m, line)) return static_cast<pid_t>(std::stol(m[1].str()));
  }
  return 0;
}

class FormingTest : public LiveCluster {
 protected:
  // A 2-slot training agent and a 2-slot inference agent; an elastic runtime
  // job (min 1, max 4) of `steps` steps whose step time falls with workers
  // (1.5 ms a sample of a global batch of 24: 18 ms a step at 2 workers).
  p::JobId StartJob(p::Client& c, std::int64_t steps) {
    StartScheduler();
    StartAgent("t", 2);
    StartAgent("i", 2, "inference");
    EXPECT_TRUE(WaitAgents(c, 2)) << Logs();
    p::SubmitJob m;
    m.argv = {ARYL_RT_TEST_WORKER, "--steps", std::to_string(steps), "--global-batch", "24", "--dataset", "240",
              "--sleep-us-per-sample", "1500"};
    m.min_workers = 1;
    m.max_workers = 4;
    m.elastic = "inplace";
    m.total_work = static_cast<double>(steps);
    auto r = c.Call<p::SubmitReply>(m, milliseconds(3000));
    EXPECT_TRUE(r.ok()) << r.status();
    const p::JobId job = r.ok() ? r->job : 0;
    EXPECT_TRUE(WaitFor([&] {
      auto s = Status(c, job);
      return s.ok() && s->row.workers == 2 && s->row.step > 10;
    }, 30)) << Logs();
    return job;
  }
  void Lend(p::Client& c) {
    p::PoolOffer offer;
    offer.servers = {"i"};
    auto ok = c.Call<p::Ok>(offer, milliseconds(3000));
    ASSERT_TRUE(ok.ok()) << ok.status();
  }
  std::int64_t Step(p::Client& c, p::JobId job) {
    auto s = Status(c, job);
    return s.ok() ? s->row.step : -1;
  }
};

// A joiner of a grow is SIGKILLed while the grow forms (the issue's
// livelock: before, new generations every ~30 s whose joiners never joined,
// and no step for minutes). Now the scheduler abandons the forming
// generation, its other joiner is stopped, and a new plan forms: the job
// trains on, grows back to 4 workers and completes.
TEST_F(FormingTest, JoinerKilledDuringAGrowDoesNotStallTheJob) {
  auto c = Client();
  const p::JobId job = StartJob(*c, 2500);
  ASSERT_GT(job, 0u);
  Lend(*c);
  // Workers 0 and 1 run; the grow starts 2 and 3 on the lent server.
  pid_t joiner = 0;
  ASSERT_TRUE(WaitFor([&] { return (joiner = WorkerPid(dir_, job, 2)) > 0; }, 15)) << Logs();
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_EQ(::kill(joiner, SIGKILL), 0);
  const std::int64_t at_kill = Step(*c, job);
  // Training goes on within the forming timeout, not after minutes.
  EXPECT_TRUE(WaitFor([&] { return Step(*c, job) > at_kill + 100; }, 45)) << "stalled at step " << at_kill << "\n"
                                                                        << Logs();
  // The job grows back onto the lent server and ends.
  EXPECT_TRUE(WaitFor([&] {
    auto s = Status(*c, job);
    return s.ok() && (s->row.workers == 4 || s->row.state == p::JobState::kCompleted);
  }, 60)) << Logs();
  EXPECT_TRUE(WaitState(*c, job, p::JobState::kCompleted, 90)) << Logs();
  // The abandoned generation is in the journal.
  auto d = c->Call<p::EventsReply>(p::ListEvents{.job = job}, milliseconds(3000));
  ASSERT_TRUE(d.ok()) << d.status();
  bool abandoned = false;
  for (const auto& e : d->events) abandoned = abandoned || e.kind == "generation_abandoned";
  EXPECT_TRUE(abandoned) << Logs();
}

// A grow does not follow a grow while the first forms: one offer, one resize
// (2 -> 4), not the 2 -> 4 -> 1 -> 2 seen before the forming rule.
TEST_F(FormingTest, OneOfferIsOneResize) {
  auto c = Client();
  const p::JobId job = StartJob(*c, 1500);
  ASSERT_GT(job, 0u);
  Lend(*c);
  ASSERT_TRUE(WaitFor([&] {
    auto s = Status(*c, job);
    return s.ok() && s->row.workers == 4 && s->row.step > 0;
  }, 30)) << Logs();
  std::this_thread::sleep_for(std::chrono::seconds(5));
  auto s = Status(*c, job);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->row.workers, 4);
  EXPECT_EQ(s->row.rescales, 1) << Logs();
}

}  // namespace
}  // namespace aryl
