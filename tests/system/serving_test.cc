// The serving side of a loan (protocol/serving.h) on a live cluster: real
// aryl-scheduler and aryl-agent processes, and examples/serving/model_server.py
// (a real HTTP model server with torch) as the inference agent's serving side.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "aryl/daemon/http_server.h"
#include "aryl/protocol/messages.h"
#include "live_cluster.h"

namespace aryl {
namespace {

namespace p = aryl::protocol;
using std::chrono::milliseconds;
using namespace aryl::livetest;  // NOLINT

const std::string kServer = std::string(ARYL_SOURCE_DIR) + "/examples/serving/model_server.py";

class ServingTest : public LiveCluster {
 protected:
  // A 1-slot training agent "t" and a 2-slot inference agent "inf" whose
  // serving side is the example model server on serve_port_ (1 s of load
  // time on top of importing torch), drained through its /drain.
  void StartCluster(const std::string& drain = "", double load_seconds = 1) {
    serve_port_ = FreePort();
    url_ = "http://127.0.0.1:" + std::to_string(serve_port_);
    StartScheduler({"--serving-warmup", "5"});
    StartAgent("t", 1);
    inf_args_ = {"--serving-start",
                 "exec /usr/bin/python3 " + kServer + " --port " + std::to_string(serve_port_) + " --load-seconds " +
                     std::to_string(load_seconds),
                 "--serving-ready", url_ + "/ready", "--serving-drain",
                 drain.empty() ? "/usr/bin/python3 " + kServer + " --drain " + url_ : drain,
                 "--serving-start-timeout", "60", "--serving-stop-timeout", "10"};
    inf_pid_ = StartAgent("inf", 2, "inference", inf_args_);
    c_ = Client();
    ASSERT_TRUE(WaitAgents(*c_, 2)) << Logs();
  }
  bool Serving() {
    auto r = daemon::HttpGet("127.0.0.1", serve_port_, "/ready", 1.0);
    return r.ok() && r->first == 200;
  }
  std::vector<p::EventRow> Events(const std::string& node) {
    p::ListEvents m;
    m.node = node;
    m.limit = 1000;
    auto r = c_->Call<p::EventsReply>(m, milliseconds(3000));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->events : std::vector<p::EventRow>{};
  }
  // The seq of the first row of `kind` on `node` after seq `after`; 0: none.
  std::int64_t Seq(const std::string& node, const std::string& kind, std::int64_t after = 0) {
    for (const auto& e : Events(node))
      if (e.kind == kind && e.seq > after) return e.seq;
    return 0;
  }
  int Workers(p::JobId job) {
    auto s = Status(*c_, job);
    return s.ok() ? static_cast<int>(s->row.workers) : -1;
  }
  std::string Kinds(const std::string& node) {
    std::string out;
    for (const auto& e : Events(node)) out += e.kind + "(" + e.detail + ") ";
    return out;
  }
  int serve_port_ = 0;
  std::string url_;
  std::vector<std::string> inf_args_;
  pid_t inf_pid_ = 0;
  std::unique_ptr<p::Client> c_;
};

// The agent starts the serving side (the server is not lent); an offer drains
// and stops it before training may use the server; a reclaim's training
// leaves by the deadline less the measured warm-up, then the serving side
// starts and the reclaim completes only once it answers ready, in time.
TEST_F(ServingTest, DrainBeforeLendReadyBeforeReturn) {
  StartCluster();
  ASSERT_TRUE(WaitFor([&] { return Seq("inf", "serving_ready") > 0; }, 60)) << Logs();
  EXPECT_TRUE(Serving());
  auto job = Submit(*c_, {"sh", "-c", "while :; do sleep 0.1; done"}, 0, 1, 3);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitFor([&] { return Workers(*job) == 1; }, 15)) << Logs();

  ASSERT_TRUE(c_->Call<p::Ok>(p::PoolOffer{{"inf"}}, milliseconds(3000)).ok());
  ASSERT_TRUE(WaitFor([&] { return Seq("inf", "loan") > 0; }, 30)) << Kinds("inf") << Logs();
  const auto drained = Seq("inf", "serving_draining"), stopped = Seq("inf", "serving_stopped"),
             loan = Seq("inf", "loan");
  EXPECT_TRUE(drained > 0 && drained < stopped && stopped < loan) << Kinds("inf");
  EXPECT_FALSE(Serving()) << "lent while its model server still answers";
  ASSERT_TRUE(WaitFor([&] { return Workers(*job) == 3; }, 30)) << "the job did not grow onto the lent server\n"
                                                                 << Logs();

  const double warmup = [&] {
    for (const auto& e : Events("inf"))
      if (e.kind == "serving_ready") return e.data.value("warmup_seconds", -1.0);
    return -1.0;
  }();
  ASSERT_GT(warmup, 0);
  p::PoolReclaim reclaim;
  reclaim.servers = {"inf"};
  reclaim.deadline_seconds = warmup + 20;
  ASSERT_TRUE(c_->Call<p::Ok>(reclaim, milliseconds(3000)).ok());
  const auto asked = Seq("inf", "reclaim");
  ASSERT_TRUE(WaitFor([&] { return Seq("inf", "serving_ready", asked) > 0; }, warmup + 40)) << Kinds("inf") << Logs();
  EXPECT_TRUE(Serving());
  EXPECT_EQ(Workers(*job), 1);
  // In order: the reclaim, its warm-up in the row, training gone, then the
  // serving side started and ready, then the reclaim complete and not late.
  std::vector<p::EventRow> rows;
  for (const auto& e : Events("inf"))
    if (e.seq >= asked) rows.push_back(e);
  ASSERT_FALSE(rows.empty());
  EXPECT_NEAR(rows.front().data.value("warmup_seconds", 0.0), warmup, 0.01) << rows.front().detail;
  std::vector<std::string> kinds;
  for (const auto& e : rows)
    if (e.kind == "reclaimed" || e.kind.rfind("serving_", 0) == 0) kinds.push_back(e.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"reclaimed", "serving_starting", "serving_ready", "reclaimed"}))
      << Kinds("inf");
  const p::EventRow& done = rows.back();
  EXPECT_EQ(done.kind, "reclaimed");
  EXPECT_FALSE(done.data.value("late", true)) << done.detail;
  EXPECT_LE(done.time - rows.front().time, reclaim.deadline_seconds) << done.detail;
}

// A drain hook that fails is a named error and an event; the server is not
// lent and no training worker goes there.
TEST_F(ServingTest, FailedDrainKeepsTheServerWithInference) {
  StartCluster("echo 'the load balancer said no' >&2; exit 3");
  ASSERT_TRUE(WaitFor([&] { return Seq("inf", "serving_ready") > 0; }, 60)) << Logs();
  auto job = Submit(*c_, {"sh", "-c", "while :; do sleep 0.1; done"}, 0, 1, 3);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(c_->Call<p::Ok>(p::PoolOffer{{"inf"}}, milliseconds(3000)).ok());
  ASSERT_TRUE(WaitFor([&] { return Seq("inf", "serving_failed") > 0; }, 30)) << Kinds("inf") << Logs();
  std::string detail;
  for (const auto& e : Events("inf"))
    if (e.kind == "serving_failed") detail = e.detail;
  EXPECT_NE(detail.find("drain"), std::string::npos) << detail;
  EXPECT_NE(detail.find("exited with code 3"), std::string::npos) << detail;
  std::this_thread::sleep_for(milliseconds(2000));
  EXPECT_EQ(Seq("inf", "loan"), 0) << Kinds("inf");
  EXPECT_EQ(Workers(*job), 1);
  auto nodes = c_->Call<p::NodesReply>(p::ListNodes{}, milliseconds(2000));
  ASSERT_TRUE(nodes.ok());
  for (const auto& n : nodes->nodes)
    if (n.agent_id == "inf") EXPECT_NE(n.state, p::NodeState::kLoaned);
}

// A ready URL that never answers and a stop hook that hangs are named errors
// at their timeouts: the first server never counts as serving, the second is
// not lent (its hook is killed), and both say which step and why.
TEST_F(ServingTest, UnreadyServerAndHangingHookAreNamedErrors) {
  StartScheduler();
  const int nobody = FreePort();  // nothing listens there
  StartAgent("unready", 1, "inference",
             {"--serving-start", "exec sleep 1000", "--serving-ready",
              "http://127.0.0.1:" + std::to_string(nobody) + "/ready", "--serving-start-timeout", "3"});
  StartAgent("hangs", 1, "inference",
             {"--serving-start", "true", "--serving-stop", "sleep 1000", "--serving-stop-timeout", "2"});
  c_ = Client();
  ASSERT_TRUE(WaitAgents(*c_, 2)) << Logs();
  ASSERT_TRUE(WaitFor([&] { return Seq("unready", "serving_failed") > 0; }, 20)) << Kinds("unready") << Logs();
  for (const auto& e : Events("unready"))
    if (e.kind == "serving_failed") {
      EXPECT_EQ(e.data.value("step", ""), "ready") << e.detail;
      EXPECT_NE(e.detail.find("not ready within 3 s"), std::string::npos) << e.detail;
    }
  EXPECT_EQ(Seq("unready", "serving_ready"), 0);

  ASSERT_TRUE(WaitFor([&] { return Seq("hangs", "serving_ready") > 0; }, 20)) << Kinds("hangs") << Logs();
  ASSERT_TRUE(c_->Call<p::Ok>(p::PoolOffer{{"hangs"}}, milliseconds(3000)).ok());
  ASSERT_TRUE(WaitFor([&] { return Seq("hangs", "serving_failed") > 0; }, 20)) << Kinds("hangs") << Logs();
  for (const auto& e : Events("hangs"))
    if (e.kind == "serving_failed") {
      EXPECT_EQ(e.data.value("step", ""), "stop") << e.detail;
      EXPECT_NE(e.detail.find("did not finish within its timeout"), std::string::npos) << e.detail;
    }
  EXPECT_EQ(Seq("hangs", "loan"), 0) << Kinds("hangs");
}

// The agent dies while its serving side warms up after a reclaim (SIGKILL;
// the model server dies with it) and comes back: the scheduler tells it to
// serve, it starts the model server again, and the reclaim completes at ready.
TEST_F(ServingTest, AgentRestartMidWarmUpResumes) {
  StartCluster("", 4);
  ASSERT_TRUE(WaitFor([&] { return Seq("inf", "serving_ready") > 0; }, 60)) << Logs();
  ASSERT_TRUE(c_->Call<p::Ok>(p::PoolOffer{{"inf"}}, milliseconds(3000)).ok());
  ASSERT_TRUE(WaitFor([&] { return Seq("inf", "loan") > 0; }, 30)) << Kinds("inf") << Logs();
  p::PoolReclaim reclaim;
  reclaim.servers = {"inf"};
  reclaim.deadline_seconds = 90;
  ASSERT_TRUE(c_->Call<p::Ok>(reclaim, milliseconds(3000)).ok());
  const auto asked = Seq("inf", "reclaim");
  ASSERT_TRUE(WaitFor([&] { return Seq("inf", "serving_starting", asked) > 0; }, 30)) << Kinds("inf") << Logs();
  Kill(inf_pid_);
  EXPECT_FALSE(Serving());
  inf_pid_ = StartAgent("inf", 2, "inference", inf_args_);
  ASSERT_TRUE(WaitFor([&] { return Seq("inf", "serving_ready", asked) > 0; }, 60)) << Kinds("inf") << Logs();
  EXPECT_TRUE(Serving());
  std::int64_t complete = 0;
  for (const auto& e : Events("inf"))
    if (e.kind == "reclaimed" && e.seq > asked && e.data.contains("warmup_seconds")) complete = e.seq;
  EXPECT_GT(complete, 0) << "the reclaim did not complete at ready\n" << Kinds("inf");
}

}  // namespace
}  // namespace aryl
