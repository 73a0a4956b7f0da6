// A reclaim's deadline in the live system: a job the core expects to finish
// before the deadline is left to finish on the reclaimed server, which returns
// to inference when it empties; one still there when the deadline minus its
// checkpoint time comes leaves then (a round at Scheduler::NextWakeup), and the
// server is back by the deadline. Real scheduler, agents and workers (/bin/sh).
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "aryl/protocol/messages.h"
#include "live_cluster.h"
#include "scrape.h"

namespace aryl {
namespace {

namespace p = aryl::protocol;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

using namespace aryl::livetest;  // NOLINT

class ReclaimDeadline : public LiveCluster {
 protected:
  // One training and one inference agent of 2 slots; the inference one lent;
  // an in-place elastic job of 1..4 workers of `seconds` that says it has
  // `work` steps (the daemon's model: 1 step/s per worker), at 4 workers.
  p::JobId StartLoanedJob(p::Client& c, int seconds, double work) {
    StartScheduler();
    StartAgent("t", 2);
    StartAgent("i", 2, "inference");
    EXPECT_TRUE(WaitAgents(c, 2)) << Logs();
    p::PoolOffer offer;
    offer.servers = {"i"};
    auto ok = c.Call<p::Ok>(offer, milliseconds(3000));
    EXPECT_TRUE(ok.ok()) << ok.status();
    p::SubmitJob m;
    m.argv = {"sh", "-c", "sleep " + std::to_string(seconds)};
    m.min_workers = 1;
    m.max_workers = 4;
    m.elastic = "inplace";
    m.total_work = work;
    auto r = c.Call<p::SubmitReply>(m, milliseconds(3000));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return 0;
    EXPECT_TRUE(WaitFor([&] {
      auto s = Status(c, r->job);
      return s.ok() && s->row.state == p::JobState::kRunning && s->row.workers == 4;
    }, 15)) << Logs();
    return r->job;
  }
  aryl::Status Reclaim(p::Client& c, double deadline_s, std::string* reply = nullptr) {
    p::PoolReclaim m;
    m.servers = {"i"};
    m.deadline_seconds = deadline_s;
    auto r = c.Call<p::Ok>(m, milliseconds(3000));
    if (r.ok() && reply) *reply = r->message;
    return r.ok() ? aryl::Status::Ok() : r.status();
  }
  // The detail of the newest journal row of `kind` ("" when none).
  std::string NewestDetail(p::Client& c, const std::string& kind) {
    p::ListEvents m;
    m.kind = kind;
    auto r = c.Call<p::EventsReply>(m, milliseconds(1000));
    return r.ok() && !r->events.empty() ? r->events.back().detail : "";
  }
  p::NodeState NodeState(p::Client& c, const std::string& id) {
    auto r = c.Call<p::NodesReply>(p::ListNodes{}, milliseconds(1000));
    if (r.ok())
      for (const auto& n : r->nodes)
        if (n.agent_id == id) return n.state;
    return p::NodeState::kDisconnected;
  }
};

// The job ends (8 s) long before the deadline (60 s): it keeps its 4 workers
// to the end, and the server returns when it is empty, on time.
TEST_F(ReclaimDeadline, JobThatEndsBeforeTheDeadlineIsLeftToFinish) {
  auto c = Client();
  const p::JobId job = StartLoanedJob(*c, 8, 8);
  ASSERT_NE(job, 0);
  const std::int64_t rescales = Status(*c, job)->row.rescales;
  std::string reply;
  ASSERT_TRUE(Reclaim(*c, 60, &reply).ok()) << Logs();
  // Durations for people, not std::to_string's "60.000000".
  EXPECT_EQ(reply, "reclaim accepted; servers are empty within 60 s");
  EXPECT_EQ(NewestDetail(*c, "reclaim"), "1 server(s) within 60 s");
  ASSERT_TRUE(WaitFor([&] { return NodeState(*c, "i") == p::NodeState::kReclaiming; }, 3)) << Logs();
  // Not shrunk while it runs out.
  for (int i = 0; i < 10; ++i) {
    auto s = Status(*c, job);
    ASSERT_TRUE(s.ok()) << s.status();
    if (s->row.state != p::JobState::kRunning) break;
    EXPECT_EQ(s->row.workers, 4) << Logs();
    EXPECT_EQ(NodeState(*c, "i"), p::NodeState::kReclaiming) << Logs();
    std::this_thread::sleep_for(milliseconds(200));
  }
  ASSERT_TRUE(WaitState(*c, job, p::JobState::kCompleted, 30)) << Logs();
  auto done = Status(*c, job);
  EXPECT_EQ(done->row.rescales, rescales) << Logs();
  EXPECT_EQ(ScrapeValue(http_port_, "aryl_preemptions_total"), 0) << Logs();
  ASSERT_TRUE(WaitFor([&] { return NodeState(*c, "i") == p::NodeState::kHeld; }, 10)) << Logs();
  // Its reclaim lasted as long as the job's rest, counted from the request.
  std::smatch m;
  const std::string log = ReadFile(dir_ / "scheduler.log");
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(server i returned to inference after ([0-9.]+) s)"))) << Logs();
  EXPECT_GE(std::stod(m[1].str()), 3.0) << Logs();
  const std::string reclaimed = NewestDetail(*c, "reclaimed");
  EXPECT_TRUE(std::regex_match(reclaimed, std::regex(R"(i empty after [0-9]+(\.[0-9]{1,2})? s)"))) << reclaimed;
  EXPECT_TRUE(WaitFor([&] { return ScrapeValue(http_port_, "aryl_reclaims_total") == 1; }, 3)) << Logs();
  EXPECT_EQ(ScrapeValue(http_port_, "aryl_reclaims_late_total"), 0) << Logs();
}

// The job says 8 steps (2 s at 4 workers) but runs 60 s. Left to finish at
// the reclaim (8 s deadline, 5 s checkpoint time), it is still there 3 s
// later: it shrinks off the server then, and the server is back by the
// deadline. (The stand-in's workers there cannot leave on request, so they
// are stopped one second before the deadline, as for any reclaim.)
TEST_F(ReclaimDeadline, JobStillThereLeavesByTheDeadline) {
  auto c = Client();
  const p::JobId job = StartLoanedJob(*c, 60, 8);
  ASSERT_NE(job, 0);
  const auto reclaimed = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - reclaimed).count(); };
  ASSERT_TRUE(Reclaim(*c, 8).ok()) << Logs();
  // Left at first: still on 4 workers after the reply.
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(Status(*c, job)->row.workers, 4) << Logs();
  EXPECT_EQ(NodeState(*c, "i"), p::NodeState::kReclaiming) << Logs();
  // Shrunk at the deadline minus the checkpoint time (3 s after the reclaim).
  ASSERT_TRUE(WaitFor([&] { return Status(*c, job)->row.workers == 2; }, 10)) << Logs();
  const double shrunk = since();
  EXPECT_GE(shrunk, 2.5) << Logs();
  EXPECT_LE(shrunk, 6.0) << Logs();
  ASSERT_TRUE(WaitFor([&] { return NodeState(*c, "i") == p::NodeState::kHeld; }, 10)) << Logs();
  const double back = since();
  auto s = Status(*c, job);
  EXPECT_EQ(s->row.state, p::JobState::kRunning) << Logs();
  EXPECT_EQ(s->row.workers, 2) << Logs();
  EXPECT_EQ(ScrapeValue(http_port_, "aryl_preemptions_total"), 0) << Logs();
  EXPECT_EQ(ScrapeValue(http_port_, "aryl_reclaims_late_total"), 0) << Logs();
  std::printf("reclaim with an 8 s deadline: shrunk after %.2f s, server back after %.2f s\n", shrunk, back);
}

}  // namespace
}  // namespace aryl
