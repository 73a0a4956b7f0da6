// A generation that cannot form, on a live cluster: real aryl-scheduler,
// aryl-agent and runtime workers (rt_test_worker, Gloo) on loopback, real
// SIGKILLs. The same scenarios run by the thousand in aryl-simtest
// (docs/simtest.md); here they are checked once with real processes.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <set>
#include <string>

#include "aryl/protocol/messages.h"
#include "live_cluster.h"

namespace aryl {
namespace {

namespace p = aryl::protocol;
using std::chrono::milliseconds;
using namespace aryl::livetest;  // NOLINT

// The pid of worker `worker` of job `job`, from the environment the agent
// gave it (ARYL_JOB_ID, ARYL_WORKER_ID); 0 when no such process runs.
pid_t WorkerPid(p::JobId job, p::WorkerId worker) {
  const std::string want_job = "ARYL_JOB_ID=" + std::to_string(job);
  const std::string want_worker = "ARYL_WORKER_ID=" + std::to_string(worker);
  DIR* d = ::opendir("/proc");
  if (!d) return 0;
  pid_t found = 0;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/environ", std::ios::binary);
    std::string var;
    bool job_ok = false, worker_ok = false;
    while (std::getline(in, var, '\0')) {
      job_ok = job_ok || var == want_job;
      worker_ok = worker_ok || var == want_worker;
    }
    if (job_ok && worker_ok) {
      found = pid;
      break;
    }
  }
  ::closedir(d);
  return found;
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
  ASSERT_TRUE(WaitFor([&] { return (joiner = WorkerPid(job, 2)) > 0; }, 15)) << Logs();
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
