// The daemon's core snapshot saved a slice at a time (core_snapshot_save.cc):
// requests are answered, and journal rows appended, between its pieces, and a
// restart on the state it left rebuilds the same core.
#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <regex>

#include "core_journal.h"
#include "driven_test_util.h"

namespace aryl::daemon::testing {
namespace {

// Keeps the daemon's "core journal: ..." and "core: ..." lines.
class CoreLines final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::string> lines;

 protected:
  void sink_it_(const spdlog::details::log_msg& m) override {
    std::string s(m.payload.data(), m.payload.size());
    if (s.rfind("core", 0) == 0) lines.push_back(s);
  }
  void flush_() override {}
};

class DrivenSnapshot : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = spdlog::default_logger();
    lines_ = std::make_shared<CoreLines>();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", lines_));
  }
  void TearDown() override { spdlog::set_default_logger(saved_); }
  // The committed snapshots' lines: "N rows replaced by a snapshot of B bytes ... in K slices".
  std::vector<std::smatch> Committed() {
    static const std::regex re(R"(core journal: (\d+) rows replaced by a snapshot of (\d+) bytes.* in (\d+) slices)");
    std::vector<std::smatch> out;
    for (const auto& l : lines_->lines) {
      std::smatch m;
      if (std::regex_search(l, m, re)) out.push_back(m);
    }
    return out;
  }
  // How many snapshots began (the live core forgot its ended jobs).
  std::size_t Begun() {
    std::size_t begun = 0;
    for (const auto& l : lines_->lines) begun += l.find(" rows begun ") != std::string::npos;
    return begun;
  }
  // The encoder runs on a thread of its own, in real time, while virtual time
  // may race ahead of it on a busy machine: ticks (bounded, 60 s real time)
  // until every snapshot begun is committed.
  void Settle(DrivenCluster& c) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (Committed().size() < Begun() && std::chrono::steady_clock::now() < deadline) c.Run(DrivenCluster::kTick);
    ASSERT_EQ(Committed().size(), Begun()) << "a snapshot still not committed after 60 s";
  }
  // The jobs' rows once no job's state, size, generation or reason changed
  // over 6 virtual seconds, longer than a stop's grace (bounded): elastic jobs
  // that restart to resize are not caught half-way, their workers stopping
  // and their next start due.
  std::vector<p::JobRow> Quiescent(DrivenCluster& c, const std::vector<p::JobId>& jobs) {
    auto rows = [&] {
      std::vector<p::JobRow> out;
      for (auto id : jobs) out.push_back(*c.Job(id));
      return out;
    };
    auto same = [](const std::vector<p::JobRow>& a, const std::vector<p::JobRow>& b) {
      for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i].state != b[i].state || a[i].workers != b[i].workers || a[i].generation != b[i].generation ||
            a[i].pending_reason != b[i].pending_reason)
          return false;
      return true;
    };
    std::vector<p::JobRow> last = rows();
    for (int i = 0; i < 20; ++i) {
      c.Run(6.0);
      Settle(c);
      std::vector<p::JobRow> now = rows();
      if (same(now, last)) return now;
      last = std::move(now);
    }
    ADD_FAILURE() << "the jobs never stood still for 6 s";
    return last;
  }
  // A new scheduler process on the state left, which it rebuilds from the snapshot.
  void RestartFromTheSnapshot(DrivenCluster& c) {
    const std::size_t logged = lines_->lines.size();
    c.RestartDaemon();
    ASSERT_TRUE(c.start_failures().empty()) << c.start_failures().front();
    bool from_snapshot = false;
    for (std::size_t i = logged; i < lines_->lines.size(); ++i)
      from_snapshot |= lines_->lines[i].find("from a snapshot and") != std::string::npos;
    EXPECT_TRUE(from_snapshot);
  }
  std::shared_ptr<spdlog::logger> saved_;
  std::shared_ptr<CoreLines> lines_;
};

// 1,500 elastic jobs on 40 agents, a snapshot every 300 rows, one 256 KB
// piece a slice and no gap: the snapshots of more than one piece are saved
// over several steps with submissions (journal rows) between them; a restart
// on that state gives every job back as it was.
TEST_F(DrivenSnapshot, SavedInSlicesWithRowsBetweenRestoresTheSameCore) {
  DaemonOptions o = DrivenCluster::Defaults();
  o.journal_snapshot_rows = 300;
  o.snapshot_slice_ms = 0;
  o.snapshot_gap_ms = 0;
  o.max_jobs_per_user = 0;
  o.submit_rate_per_user = 0;
  TestCluster c(o, /*restartable=*/true);
  for (int i = 0; i < 40; ++i) c.AddAgent("t" + std::to_string(i), p::Pool::kTraining, 8);
  std::vector<p::JobId> jobs;
  for (int i = 0; i < 1500; ++i) {
    auto job = c.Submit(Elastic(1, 1 + i % 4));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    jobs.push_back(*job);
    if (i % 100 == 99) c.Run(DrivenCluster::kTick);
  }
  c.Run(2.0);
  ASSERT_NO_FATAL_FAILURE(Settle(c));
  auto committed = Committed();
  ASSERT_FALSE(committed.empty());
  // The largest: saved in three pieces or more, and the commit.
  const auto& big = *std::max_element(committed.begin(), committed.end(), [](const auto& a, const auto& b) {
    return std::stoll(a[2].str()) < std::stoll(b[2].str());
  });
  EXPECT_GT(std::stoll(big[2].str()), static_cast<long long>(2 * StateStore::kCoreSnapshotPieceBytes));
  EXPECT_GE(std::stoi(big[3].str()), 4) << big[0].str();
  const std::vector<p::JobRow> rows = Quiescent(c, jobs);
  auto before = c.Call<p::StatusReply>(p::StatusRequest{});
  ASSERT_TRUE(before.ok()) << before.status().ToString();

  ASSERT_NO_FATAL_FAILURE(RestartFromTheSnapshot(c));
  auto after = c.Call<p::StatusReply>(p::StatusRequest{});
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->summary["jobs_by_state"], before->summary["jobs_by_state"]);
  // The rebuilt core decides as the old one would have: rounds place and
  // resize nothing, every queued job waits for the same reason.
  c.Run(2.0);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    auto row = c.Job(jobs[i]);
    ASSERT_TRUE(row.ok());
    EXPECT_EQ(row->state, rows[i].state) << "job " << jobs[i];
    EXPECT_EQ(row->workers, rows[i].workers) << "job " << jobs[i];
    EXPECT_EQ(row->generation, rows[i].generation) << "job " << jobs[i];
    EXPECT_EQ(row->pending_reason, rows[i].pending_reason) << "job " << jobs[i];
  }
}

// Jobs cancelled between snapshots: each snapshot forgets them in the live
// core (Scheduler::ForgetEnded, in place of a restore), and a restart on
// the state left builds a core that decides as the live one: every job's
// state, size and reason the same, before and after a few more rounds.
TEST_F(DrivenSnapshot, EndedJobsForgottenInPlaceRestoreTheSameCore) {
  DaemonOptions o = DrivenCluster::Defaults();
  o.journal_snapshot_rows = 100;
  o.max_jobs_per_user = 0;
  o.submit_rate_per_user = 0;
  TestCluster c(o, /*restartable=*/true);
  for (int i = 0; i < 12; ++i) c.AddAgent("t" + std::to_string(i), p::Pool::kTraining, 8);
  std::vector<p::JobId> jobs;
  for (int i = 0; i < 400; ++i) {
    auto job = c.Submit(Elastic(1, 1 + i % 4));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    jobs.push_back(*job);
    if (i % 7 == 6) ASSERT_TRUE(c.Call<p::Ok>(p::CancelJob{jobs[i - 3]}).ok());
    if (i % 50 == 49) {
      c.Run(DrivenCluster::kTick);
      ASSERT_NO_FATAL_FAILURE(Settle(c));
    }
  }
  c.Run(2.0);
  ASSERT_NO_FATAL_FAILURE(Settle(c));
  ASSERT_GE(Begun(), 3u);
  const std::vector<p::JobRow> rows = Quiescent(c, jobs);
  c.RestartDaemon();
  ASSERT_TRUE(c.start_failures().empty()) << c.start_failures().front();
  c.Run(2.0);
  int cancelled = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    auto row = c.Job(jobs[i]);
    ASSERT_TRUE(row.ok());
    cancelled += row->state == p::JobState::kCancelled;
    EXPECT_EQ(row->state, rows[i].state) << "job " << jobs[i];
    EXPECT_EQ(row->workers, rows[i].workers) << "job " << jobs[i];
    EXPECT_EQ(row->generation, rows[i].generation) << "job " << jobs[i];
    EXPECT_EQ(row->pending_reason, rows[i].pending_reason) << "job " << jobs[i];
  }
  EXPECT_GT(cancelled, 40);
}

// The speed models go in the snapshot's own pieces, after the core
// (core_journal.h), not in meta by the commit's transaction (about 40 MB at
// 100,000 jobs with step samples); a restart reads them from there: every
// job's model, samples and fits included, is what it was.
TEST_F(DrivenSnapshot, SpeedModelsAreSavedInTheSnapshotsPieces) {
  DaemonOptions o = DrivenCluster::Defaults();
  o.speed = "learned";  // the daemon's default; the driven cluster's is "linear"
  o.journal_snapshot_rows = 30;
  o.snapshot_slice_ms = 0;
  o.snapshot_gap_ms = 0;
  StateStore* store = nullptr;
  DrivenCluster c(o, [&store](const std::string& path) -> Result<std::unique_ptr<StateStore>> {
    ARYL_ASSIGN_OR_RETURN(auto s, StateStore::Open(path));
    store = s.get();
    return s;
  });
  c.on_error = [](const std::string& what) { ADD_FAILURE() << what; };
  for (int i = 0; i < 4; ++i) c.AddAgent("t" + std::to_string(i), p::Pool::kTraining, 4);
  std::vector<p::JobId> jobs;
  for (int i = 0; i < 6; ++i) {
    auto job = c.Submit(Elastic(1, 2));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    jobs.push_back(*job);
  }
  c.Run(3.0);
  // Each running job's rank 0 sends step summaries at its size.
  int sent = 0;
  for (int seq = 1; seq <= 4; ++seq) {
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      auto row = c.Job(jobs[i]);
      ASSERT_TRUE(row.ok());
      auto on = c.WorkersOf(jobs[i]);
      if (row->state != JobState::kRunning || on.empty()) continue;
      p::StepStats st;
      st.seq = seq;
      st.generation = row->generation;
      st.workers = row->workers;
      st.count = 20;
      st.median_s = 0.2 + 0.05 * static_cast<double>(i) + 0.01 * seq;
      st.spread_s = 0.01;
      c.Progress(on.begin()->first, jobs[i], row->generation, 20 * seq, true, st);
      ++sent;
    }
    c.Run(1.0);
  }
  ASSERT_GT(sent, 8);
  c.Run(2.0);
  ASSERT_NO_FATAL_FAILURE(Settle(c));
  ASSERT_FALSE(Committed().empty());

  // The committed text: the core's JSON, a newline, the models' JSON.
  ASSERT_NE(store, nullptr);
  auto text = store->CoreSnapshot();
  ASSERT_TRUE(text.ok() && text->has_value()) << text.status().ToString();
  const SnapshotParts parts = SplitSnapshot(**text);
  ASSERT_TRUE(parts.models.has_value()) << "the models follow the core in the pieces";
  EXPECT_TRUE(SnapshotFromJson(parts.core).ok());
  EXPECT_EQ(parts.models->substr(0, 1), "{");
  auto meta = store->GetMeta("speed_models");
  ASSERT_TRUE(meta.ok());
  EXPECT_TRUE(!meta->has_value() || (*meta)->empty()) << "no copy of the models in meta";

  std::vector<p::JobSpeed> before;
  int samples = 0;
  for (auto id : jobs) {
    auto d = c.Call<p::JobDescription>(p::DescribeJob{id});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    ASSERT_TRUE(d->speed.has_value()) << "job " << id;
    samples += static_cast<int>(d->speed->samples.size());
    before.push_back(*d->speed);
  }
  EXPECT_GT(samples, 0) << "the summaries became samples";

  ASSERT_NO_FATAL_FAILURE(RestartFromTheSnapshot(c));
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    auto d = c.Call<p::JobDescription>(p::DescribeJob{jobs[i]});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    ASSERT_TRUE(d->speed.has_value()) << "job " << jobs[i] << ": its model came back";
    EXPECT_EQ(*d->speed, before[i]) << "job " << jobs[i];
  }
}

}  // namespace
}  // namespace aryl::daemon::testing
