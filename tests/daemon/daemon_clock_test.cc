// The daemon in this process, on a ManualClock (DaemonOptions::clock): what
// it records and decides reads the injected time, not the machine's. Its
// agent is a protocol client that registers and answers nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "aryl/clock.h"
#include "aryl/daemon/daemon.h"
#include "aryl/protocol/inspect.h"
#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"

namespace aryl::daemon {
namespace {

namespace p = aryl::protocol;
using namespace std::chrono_literals;

class DaemonClockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("aryl-daemon-clock-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    DaemonOptions o;
    o.endpoint = "ipc://" + (dir_ / "s.sock").string();
    o.state_path = ":memory:";
    o.restart_grace = 0;
    o.clock = &clock_;
    auto d = Daemon::Start(o);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    daemon_ = std::move(*d);
    thread_ = std::thread([this] { daemon_->Run(stop_); });
  }
  void TearDown() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    daemon_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<p::Client> Connect(const std::string& identity = "") {
    auto c = p::Client::Connect({.endpoint = daemon_->endpoint(), .identity = identity});
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  std::vector<p::EventRow> Events(p::Client& c, p::JobId job) {
    p::ListEvents q;
    q.job = job;
    auto r = c.Call<p::EventsReply>(q, 5s);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->events : std::vector<p::EventRow>{};
  }

  static constexpr double kT0 = 1'800'000'000;  // 2027-01-15
  ManualClock clock_{kT0};
  std::filesystem::path dir_;
  std::unique_ptr<Daemon> daemon_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST_F(DaemonClockTest, RecordsReadTheInjectedClock) {
  auto agent = Connect("a");
  ASSERT_TRUE(agent);
  p::AgentRegister reg;
  reg.agent_id = "a";
  reg.host = "127.0.0.1";
  reg.gpu_type = "cpu";
  reg.slots = 1;
  reg.cluster_id = "default";
  reg.instance = 7;
  auto registered = agent->Call<p::AgentRegistered>(reg, 5s);
  ASSERT_TRUE(registered.ok()) << registered.status().ToString();

  auto user = Connect();
  ASSERT_TRUE(user);
  p::SubmitJob submit;
  submit.workers = 1;
  submit.argv = {"true"};
  auto job = user->Call<p::SubmitReply>(submit, 5s);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto rows = user->Call<p::JobsReply>(p::ListJobs{}, 5s);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->jobs.size(), 1u);
  EXPECT_DOUBLE_EQ(rows->jobs[0].submit_time, kT0);

  // An hour later by the daemon's clock (a moment by the machine's).
  clock_.Advance(3600);
  ASSERT_TRUE(user->Call<p::Ok>(p::CancelJob{job->job}, 5s).ok());
  bool submitted = false, cancelled = false;
  for (const auto& e : Events(*user, job->job)) {
    if (e.kind == "submit") {
      submitted = true;
      EXPECT_DOUBLE_EQ(e.time, kT0) << e.detail;
    }
    if (e.kind == "cancel" || e.kind == "cancelled" || e.kind == "end") {
      cancelled = true;
      EXPECT_DOUBLE_EQ(e.time, kT0 + 3600) << e.kind << ": " << e.detail;
    }
  }
  EXPECT_TRUE(submitted);
  EXPECT_TRUE(cancelled);
}

}  // namespace
}  // namespace aryl::daemon
