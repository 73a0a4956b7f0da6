// Teams on a live cluster (protocol/queues.h): a real aryl-scheduler with a
// --queues file, a real aryl-agent and runtime workers that checkpoint.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "aryl/daemon/http_server.h"
#include "aryl/protocol/messages.h"
#include "live_cluster.h"

namespace aryl {
namespace {

namespace p = aryl::protocol;
using std::chrono::milliseconds;
using namespace aryl::livetest;  // NOLINT
namespace fs = std::filesystem;

class TeamsTest : public LiveCluster {
 protected:
  // Two teams with one cpu slot of quota each, lending to each other.
  std::string WriteQueues() {
    const fs::path path = dir_ / "queues.csv";
    std::ofstream(path) << "queue,quota_gpus,weight,gpu_type,cohort\n"
                           "a,1,1,cpu,lab\n"
                           "b,1,1,cpu,lab\n";
    return path.string();
  }
  const p::QueueRow* Row(const p::QueuesReply& r, const std::string& name) {
    for (const auto& q : r.queues)
      if (q.queue == name) return &q;
    return nullptr;
  }
  static std::int64_t Gpus(const std::vector<p::TypeCount>& v) {
    std::int64_t n = 0;
    for (const auto& t : v) n += t.gpus;
    return n;
  }
  // The step rank 0 restored (the runtime prints "aryl: restored checkpoint
  // step=N" to its output), from the agent's worker logs; -1 when none yet.
  std::int64_t RestoredStep() {
    static const std::regex re(R"(aryl: restored checkpoint step=(\d+))");
    std::int64_t step = -1;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir_ / "logs-t", ec); it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (ec) break;
      if (!it->is_regular_file(ec)) continue;
      const std::string text = ReadFile(it->path());
      for (std::sregex_iterator m(text.begin(), text.end(), re), end; m != end; ++m)
        step = std::max<std::int64_t>(step, std::stoll((*m)[1]));
    }
    return step;
  }
};

// Team a's 2-worker job runs on a's 1 slot of quota and 1 borrowed from b.
// Team b submits a 1-worker job: it is within b's quota and no slot is free,
// so a's job, running on borrowed quota, is suspended with a checkpoint (not
// killed) and b's job runs; `aryl queues` and the metrics show who holds
// what. When b's job ends, a's job starts again from its checkpoint.
TEST_F(TeamsTest, BorrowedJobIsSuspendedForTheLenderAndResumesFromItsCheckpoint) {
  StartScheduler({"--queues", WriteQueues(), "--quota-min-runtime", "1", "--checkpoint-interval", "600"});
  StartAgent("t", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();

  p::SubmitJob a;
  a.argv = {ARYL_RT_TEST_WORKER, "--steps", "1000000", "--global-batch", "24", "--dataset", "240", "--sleep-ms", "20"};
  a.workers = 2;
  a.queue = "a";
  a.elastic = "inplace";
  a.checkpoint_dir = (dir_ / "ckpt-a").string();
  auto ra = c->Call<p::SubmitReply>(a, milliseconds(3000));
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(WaitFor([&] {
    auto s = Status(*c, ra->job);
    return s.ok() && s->row.workers == 2 && s->row.step > 20;
  }, 30)) << Logs();
  auto before = c->Call<p::QueuesReply>(p::ListQueues{}, milliseconds(2000));
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->queues.size(), 2u);
  EXPECT_EQ(Gpus(Row(*before, "a")->used), 2);
  EXPECT_EQ(Gpus(Row(*before, "a")->borrowed), 1);
  EXPECT_EQ(Gpus(Row(*before, "b")->lent), 1);
  EXPECT_EQ(Row(*before, "a")->running, 1);

  p::SubmitJob b;
  b.argv = {"sleep", "4"};
  b.workers = 1;
  b.queue = "b";
  b.priority = "normal";
  auto rb = c->Call<p::SubmitReply>(b, milliseconds(3000));
  ASSERT_TRUE(rb.ok()) << rb.status();
  ASSERT_TRUE(WaitState(*c, rb->job, p::JobState::kRunning, 20)) << Logs();
  auto during = c->Call<p::QueuesReply>(p::ListQueues{}, milliseconds(2000));
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(Gpus(Row(*during, "b")->used), 1);
  EXPECT_EQ(Row(*during, "a")->pending, 1);
  EXPECT_EQ(Row(*during, "a")->running, 0);
  auto sa = Status(*c, ra->job);
  ASSERT_TRUE(sa.ok());
  EXPECT_NE(sa->row.state, p::JobState::kRunning);
  EXPECT_EQ(sa->row.queue, "a");
  // Its REASON names the quota: a holds none of its 1 and b lends nothing now.
  std::string reason;
  EXPECT_TRUE(WaitFor([&] {
    auto s = Status(*c, ra->job);
    reason = s.ok() ? s->row.pending_reason : s.status().ToString();
    return reason.rfind("Quota: needs 2 workers at once; queue a holds 0 of its 1 cpu quota", 0) == 0;
  }, 5)) << reason;
  // Suspended, not killed: the stop saved a checkpoint, and the journal says why.
  ASSERT_TRUE(WaitFor([&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_ / "ckpt-a", ec))
      if (e.path().filename().string().rfind("ckpt-", 0) == 0) return true;
    return false;
  }, 10)) << "no checkpoint of a's job\n" << Logs();
  p::ListEvents q;
  q.job = ra->job;
  auto events = c->Call<p::EventsReply>(q, milliseconds(2000));
  ASSERT_TRUE(events.ok()) << events.status();
  bool preempted = false;
  for (const auto& e : events->events) preempted |= e.kind == "preempt" && e.detail.find("quota") != std::string::npos;
  EXPECT_TRUE(preempted) << "no preempt event naming the quota" << Logs();
  // The series follow within a publication (the scheduler's tick).
  std::string scrape;
  EXPECT_TRUE(WaitFor([&] {
    auto metrics = daemon::HttpGet("127.0.0.1", http_port_, "/metrics");
    scrape = metrics.ok() ? metrics->second : metrics.status().ToString();
    return scrape.find("aryl_queue_used_gpus{queue=\"b\"} 1\n") != std::string::npos &&
           scrape.find("aryl_queue_pending_jobs{queue=\"a\"} 1\n") != std::string::npos;
  }, 5)) << scrape;
  EXPECT_NE(scrape.find("aryl_queue_quota_gpus{queue=\"a\"} 1\n"), std::string::npos) << scrape;

  // b's job ends; a's job runs again, from its checkpoint, and trains on.
  ASSERT_TRUE(WaitState(*c, rb->job, p::JobState::kCompleted, 20)) << Logs();
  ASSERT_TRUE(WaitFor([&] { return RestoredStep() > 0; }, 30)) << "a's job never restored a checkpoint\n" << Logs();
  const std::int64_t restored = RestoredStep();
  ASSERT_TRUE(WaitFor([&] {
    auto s = Status(*c, ra->job);
    return s.ok() && s->row.state == p::JobState::kRunning && s->row.workers == 2 && s->row.step > restored + 10;
  }, 30)) << Logs();
  // aryl usage: from the journal, per queue: a's job used 2 training slots
  // before and after its suspension and was preempted once; b's job 1.
  p::UsageRequest usage;
  usage.by = "queue";
  auto used = c->Call<p::UsageReply>(usage, milliseconds(3000));
  ASSERT_TRUE(used.ok()) << used.status();
  std::map<std::string, p::UsageRow> by_queue;
  for (const auto& row : used->rows) by_queue[row.key] = row;
  ASSERT_EQ(by_queue.count("a"), 1u);
  ASSERT_EQ(by_queue.count("b"), 1u);
  EXPECT_EQ(by_queue["a"].jobs, 1);
  EXPECT_EQ(by_queue["a"].preemptions, 1);
  EXPECT_EQ(by_queue["b"].jobs, 1);
  EXPECT_EQ(by_queue["b"].preemptions, 0);
  EXPECT_GT(by_queue["a"].training_gpu_hours, 2 * 2.0 / 3600) << "2 slots for more than 2 s";
  EXPECT_GT(by_queue["b"].training_gpu_hours, 3.0 / 3600) << "1 slot for about 4 s";
  EXPECT_LT(by_queue["b"].training_gpu_hours, 20.0 / 3600);
  EXPECT_EQ(by_queue["a"].loaned_gpu_hours, 0);
  ASSERT_TRUE(c->Call<p::Ok>(p::CancelJob{.job = ra->job}, milliseconds(2000)).ok());
}

// aryl queues reload: a good file takes effect at once and is journaled; a
// bad one is refused with its line and changes nothing (protocol/queues.h, Q3).
TEST_F(TeamsTest, ReloadTakesAGoodFileAndRefusesABadOne) {
  const std::string path = WriteQueues();
  StartScheduler({"--queues", path});
  StartAgent("t", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  auto job = Submit(*c, {"sleep", "30"}, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitState(*c, *job, p::JobState::kRunning, 10)) << Logs();
  std::ofstream(path) << "queue,quota_gpus,weight,gpu_type\na,1,1,cpu\nb,1,1,cpu\na,1,1,cpu\n";
  auto bad = c->Call<p::QueuesReply>(p::ReloadQueues{}, milliseconds(3000));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":4: field 'queue': value 'a': duplicate name"), std::string::npos)
      << bad.status();
  auto same = c->Call<p::QueuesReply>(p::ListQueues{}, milliseconds(2000));
  ASSERT_TRUE(same.ok());
  ASSERT_EQ(same->queues.size(), 2u);
  EXPECT_EQ(same->queues[0].cohort, "lab") << "the old queues stay in force";
  std::ofstream(path) << "queue,quota_gpus,weight,gpu_type,users\nc,2,3,cpu,alice\na,0,1,cpu,*\n";
  auto fresh = c->Call<p::QueuesReply>(p::ReloadQueues{}, milliseconds(5000));
  ASSERT_TRUE(fresh.ok()) << fresh.status() << Logs();
  ASSERT_EQ(fresh->queues.size(), 2u);
  EXPECT_EQ(fresh->queues[0].queue, "c");
  EXPECT_EQ(fresh->queues[0].users, std::vector<std::string>{"alice"});
  // The running job, of queue a (now without quota), keeps running; a's row counts it.
  EXPECT_EQ(fresh->queues[1].running, 1);
  auto s = Status(*c, *job);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->row.state, p::JobState::kRunning);
  p::ListEvents q;
  q.kind = "queues";
  auto events = c->Call<p::EventsReply>(q, milliseconds(2000));
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->events.size(), 1u);
  EXPECT_NE(events->events[0].detail.find("reloaded " + path + ": c, a"), std::string::npos)
      << events->events[0].detail;
}

// A submission names a queue that exists and a priority class the scheduler
// knows; a scheduler without --queues takes neither (protocol/queues.h, Q1).
TEST_F(TeamsTest, UnknownQueueOrPriorityIsANamedError) {
  StartScheduler({"--queues", WriteQueues()});
  StartAgent("t", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  p::SubmitJob m;
  m.argv = {"true"};
  m.workers = 1;
  m.queue = "c";
  auto unknown = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("--queue c: no such queue (queues: a, b)"), std::string::npos)
      << unknown.status();
  m.queue.reset();  // the default queue: the first, a
  auto fine = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_TRUE(fine.ok()) << fine.status();
  auto row = Status(*c, fine->job);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->row.queue, "a");
  m.priority = "urgent";
  auto bad = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("priority"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("urgent"), std::string::npos) << bad.status();
}

TEST_F(TeamsTest, WithoutQueuesANamedQueueIsRefused) {
  StartScheduler();
  StartAgent("t", 1);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();
  p::SubmitJob m;
  m.argv = {"true"};
  m.workers = 1;
  m.queue = "research";
  auto r = c->Call<p::SubmitReply>(m, milliseconds(3000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("without queues"), std::string::npos) << r.status();
  auto list = c->Call<p::QueuesReply>(p::ListQueues{}, milliseconds(2000));
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->queues.empty());
}

// A bad queues file stops the scheduler at start with the file, line and
// field, and exit code 2 (a configuration to fix, not to restart on).
TEST_F(TeamsTest, BadQueuesFileStopsTheSchedulerNamingTheLine) {
  const fs::path path = dir_ / "bad.csv";
  std::ofstream(path) << "queue,quota_gpus,weight,gpu_type\na,1,1,cpu\na,2,1,cpu\n";
  LaunchScheduler({"--queues", path.string()});
  ASSERT_TRUE(WaitFor([&] {
    launcher_.Poll();
    return !launcher_.Running(scheduler_pid_);
  }, 10));
  const std::string log = ReadFile(dir_ / "scheduler.log");
  EXPECT_NE(log.find(path.string() + ":3: field 'queue': value 'a': duplicate name (first on line 2)"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace aryl
