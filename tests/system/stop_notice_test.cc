// A job's own stop grace and the stop notice (ARYL_STOP_NOTICE), on a live
// cluster: real aryl-scheduler and aryl-agent, a shell script as the program
// that does not link the runtime, as torchrun-style scripts do not.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "aryl/protocol/messages.h"
#include "live_cluster.h"

namespace aryl {
namespace {

namespace p = aryl::protocol;
using std::chrono::milliseconds;
using namespace aryl::livetest;  // NOLINT
namespace fs = std::filesystem;

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// On SIGTERM the script copies its notice, takes 3 s to "checkpoint" and
// writes `saved`; it records the notice's path when it starts.
const char* kScript =
    "trap 'cat \"$ARYL_STOP_NOTICE\" > notice.json; sleep 3; echo saved > saved; exit 0' TERM; "
    "echo \"$ARYL_STOP_NOTICE\" > notice-path; while :; do sleep 0.1; done";

class StopNoticeTest : public LiveCluster {
 protected:
  // A one-worker job running kScript in <dir>/<name>, with `grace` if given.
  p::JobId Start(p::Client& c, const std::string& name, std::optional<double> grace) {
    const fs::path cwd = dir_ / name;
    fs::create_directories(cwd);
    p::SubmitJob m;
    m.argv = {"sh", "-c", kScript};
    m.workers = 1;
    m.cwd = cwd.string();
    m.stop_grace = grace;
    auto r = c.Call<p::SubmitReply>(m, milliseconds(3000));
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(WaitFor([&] { return fs::exists(cwd / "notice-path"); }, 10)) << Logs();
    return r.ok() ? r->job : 0;
  }
};

// The scheduler's --stop-grace is 2 s (LiveCluster). A job that asks for 6 s
// gets them: its script, 3 s to save, finishes; the notice appeared with the
// SIGTERM and says by when (6 s on), why, and which worker; it is gone once
// the worker is. A job that asks for 1 s is killed before it saves.
TEST_F(StopNoticeTest, JobsOwnGraceAndTheNoticeFile) {
  StartScheduler();
  StartAgent("a", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  const p::JobId slow = Start(*c, "slow", 6.0);
  const p::JobId quick = Start(*c, "quick", 1.0);
  std::string path_line = ReadFile(dir_ / "slow" / "notice-path");
  const fs::path notice = path_line.substr(0, path_line.find('\n'));
  ASSERT_FALSE(notice.empty());
  EXPECT_FALSE(fs::exists(notice)) << "the notice appears only with a stop";
  auto d = c->Call<p::JobDescription>(p::DescribeJob{.job = slow}, milliseconds(3000));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->stop_grace, 6.0);

  const double cancelled_at = UnixNow();
  ASSERT_TRUE(c->Call<p::Ok>(p::CancelJob{.job = slow}, milliseconds(3000)).ok());
  ASSERT_TRUE(c->Call<p::Ok>(p::CancelJob{.job = quick}, milliseconds(3000)).ok());
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ / "slow" / "saved"); }, 10))
      << "a 6 s grace did not leave 3 s to save\n" << Logs();
  auto j = nlohmann::json::parse(ReadFile(dir_ / "slow" / "notice.json"), nullptr, false);
  ASSERT_TRUE(j.is_object()) << ReadFile(dir_ / "slow" / "notice.json");
  EXPECT_EQ(j.value("grace_seconds", 0.0), 6.0) << j;
  EXPECT_NEAR(j.value("deadline", 0.0), cancelled_at + 6.0, 2.0) << j;
  EXPECT_EQ(j.value("job", std::int64_t{0}), slow) << j;
  EXPECT_FALSE(j.value("reason", std::string()).empty()) << j;
  EXPECT_TRUE(WaitFor([&] { return !fs::exists(notice); }, 5)) << "the notice outlived its worker";

  ASSERT_TRUE(WaitState(*c, quick, p::JobState::kCancelled, 10)) << Logs();
  EXPECT_TRUE(fs::exists(dir_ / "quick" / "notice.json")) << "the quick job saw no notice";
  std::this_thread::sleep_for(milliseconds(3500));
  EXPECT_FALSE(fs::exists(dir_ / "quick" / "saved")) << "a 1 s grace let the worker run 3 s";
}

// A grace above the scheduler's --max-stop-grace is refused, naming both.
TEST_F(StopNoticeTest, GraceAboveTheSchedulersMaximumRefused) {
  StartScheduler({"--max-stop-grace", "30"});
  StartAgent("a", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  p::SubmitJob m;
  m.argv = {"true"};
  m.workers = 1;
  m.stop_grace = 60;
  auto r = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--stop-grace 60 s"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("--max-stop-grace 30 s"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace aryl
