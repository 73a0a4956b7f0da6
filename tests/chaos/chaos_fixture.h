// ChaosTest: the fixture of the fault tests (chaos_test.cc on loopback,
// netns_test.cc across network namespaces): an elastic_mlp training job on a
// live cluster, what its workers printed, and one JSON result line per run
// for `./dev chaos N` (ARYL_CHAOS_RESULTS).
#pragma once

#include <sys/mount.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>

#include "live_cluster.h"

namespace aryl::chaostest {

using namespace aryl::livetest;  // NOLINT

constexpr int kSteps = 1200;

class ChaosTest : public LiveCluster {
 protected:
  void TearDown() override {
    if (!result_recorded_) Record(false, -1, -1);
    for (const auto& m : mounts_) ::umount2(m.c_str(), MNT_DETACH);
    LiveCluster::TearDown();
  }

  // An elastic_mlp job of kSteps steps, min..max workers, checkpointing every
  // 50 steps into the scratch directory.
  // `sleep_ms` per step keeps a run long enough to be cut off mid-way.
  Result<p::JobId> SubmitTraining(p::Client& c, int min, int max, int sleep_ms = 0) {
    p::SubmitJob m;
    m.argv = {ARYL_MLP_BIN, "--steps", std::to_string(kSteps), "--log-every", "10", "--hidden", "64",
              "--sleep-ms", std::to_string(sleep_ms)};
    m.min_workers = min;
    m.max_workers = max;
    m.checkpoint_dir = (dir_ / "ckpt").string();
    m.env["ARYL_CHECKPOINT_EVERY"] = "50";
    m.name = "chaos-mlp";
    ARYL_ASSIGN_OR_RETURN(auto reply, c.Call<p::SubmitReply>(m, milliseconds(3000)));
    return reply.job;
  }

  // Every worker output file of every agent, oldest worker first.
  std::vector<fs::path> WorkerOutputs(p::JobId job) {
    std::vector<std::pair<long, fs::path>> files;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (!e.is_directory() || e.path().filename().string().rfind("logs-", 0) != 0) continue;
      fs::path jd = e.path() / ("job-" + std::to_string(job));
      if (!fs::exists(jd)) continue;
      for (const auto& f : fs::directory_iterator(jd)) {
        std::string name = f.path().filename().string();
        if (f.path().extension() != ".out" || name.rfind("worker-", 0) != 0) continue;
        files.push_back({std::stol(name.substr(7)), f.path()});
      }
    }
    std::sort(files.begin(), files.end());
    std::vector<fs::path> out;
    for (auto& [id, path] : files) out.push_back(path);
    return out;
  }

  // The step rank 0 printed in its "done steps=N" line (0: none), and the steps
  // trained twice: the newest step seen before each restore from a checkpoint
  // minus the restored step.
  struct Outcome {
    std::int64_t done_steps = 0;
    std::int64_t steps_lost = 0;
  };
  Outcome ReadOutcome(p::JobId job) {
    Outcome o;
    std::int64_t newest = 0;
    static const std::regex step_re(R"(^step=(\d+) )"), done_re(R"(^done steps=(\d+) )"),
        restore_re(R"(^aryl: restored checkpoint step=(\d+) )");
    for (const auto& path : WorkerOutputs(job)) {
      std::istringstream in(ReadFile(path));
      std::string line;
      while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_search(line, m, step_re)) newest = std::max<std::int64_t>(newest, std::stoll(m[1]));
        if (std::regex_search(line, m, done_re)) o.done_steps = std::max<std::int64_t>(o.done_steps, std::stoll(m[1]));
        if (std::regex_search(line, m, restore_re)) {
          o.steps_lost += std::max<std::int64_t>(0, newest - std::stoll(m[1]));
        }
      }
    }
    return o;
  }

  // Lines "job <job> worker <w> (...) started" in the agents' logs: one per
  // worker process the agents started for the job.
  int WorkerStarts(p::JobId job) {
    int n = 0;
    std::string needle = "job " + std::to_string(job) + " worker ";
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().rfind("agent-", 0) != 0) continue;
      std::istringstream in(ReadFile(e.path()));
      std::string line;
      while (std::getline(in, line))
        if (line.find(needle) != std::string::npos && line.find(") started: pid") != std::string::npos) n++;
    }
    return n;
  }

  // Polls the job until it is terminal (or `timeout_s`), keeping the longest
  // time its step did not advance while it was not terminal.
  p::JobState FollowToEnd(p::Client& c, p::JobId job, double timeout_s) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    std::int64_t last_step = -1;
    auto last_change = Clock::now();
    p::JobState state = p::JobState::kQueued;
    while (Clock::now() < deadline) {
      auto r = Status(c, job);
      if (r.ok()) {
        state = r->row.state;
        if (IsTerminal(state)) break;
        if (r->row.step != last_step) {
          last_step = r->row.step;
          last_change = Clock::now();
        }
        max_pause_s_ = std::max(max_pause_s_, std::chrono::duration<double>(Clock::now() - last_change).count());
      }
      std::this_thread::sleep_for(milliseconds(200));
    }
    return state;
  }

  // Waits until the job trains on `workers` workers past step `step`.
  bool WaitTraining(p::Client& c, p::JobId job, int workers, std::int64_t step, double timeout_s) {
    return WaitFor([&] {
      auto r = Status(c, job);
      return r.ok() && r->row.workers >= workers && r->row.step >= step;
    }, timeout_s);
  }

  // The agent that hosts rank 0 of the job's current start (its store).
  std::string RankZeroAgent(p::JobId job) {
    for (const auto& path : WorkerOutputs(job)) {
      std::string text = ReadFile(path);
      if (text.find("start worker=") != std::string::npos) {
        std::string dir = path.parent_path().parent_path().filename().string();  // logs-<id>
        last_rank0_agent_ = dir.substr(5);
      }
    }
    return last_rank0_agent_;
  }

  // "done steps=" lines printed by any worker of the job: one per copy that
  // finished training.
  int DoneLines(p::JobId job) {
    int n = 0;
    for (const auto& path : WorkerOutputs(job)) {
      std::istringstream in(ReadFile(path));
      std::string line;
      while (std::getline(in, line)) n += line.rfind("done steps=", 0) == 0;
    }
    return n;
  }

  void ExpectCompletedOnce(p::Client& c, p::JobId job, double timeout_s, bool extra_ok = true) {
    p::JobState end = FollowToEnd(c, job, timeout_s);
    Outcome o = ReadOutcome(job);
    int done = DoneLines(job);
    Record(end == p::JobState::kCompleted && o.done_steps == kSteps && done == 1 && extra_ok, o.steps_lost,
           max_pause_s_);
    EXPECT_EQ(p::ToString(end), "completed") << Logs();
    EXPECT_EQ(o.done_steps, kSteps) << Logs();
    EXPECT_EQ(done, 1) << "copies of the job that finished training: " << done << "\n" << Logs();
  }

  void Record(bool ok, std::int64_t steps_lost, double max_pause, const std::string& extra_json = "") {
    result_recorded_ = true;
    const char* file = std::getenv("ARYL_CHAOS_RESULTS");
    if (!file || !*file) return;
    std::FILE* f = std::fopen(file, "a");
    if (!f) return;
    std::fprintf(f, "{\"fault\":\"%s\",\"ok\":%s,\"steps_lost\":%lld,\"max_pause_s\":%.2f%s%s}\n",
                 ::testing::UnitTest::GetInstance()->current_test_info()->name(), ok ? "true" : "false",
                 static_cast<long long>(steps_lost), max_pause, extra_json.empty() ? "" : ",", extra_json.c_str());
    std::fclose(f);
  }

  // A small tmpfs under the scratch directory (the state disk of the disk-full
  // test); empty when this machine does not allow mounts.
  std::string MountTmpfs(const std::string& name, int size_kb) {
    fs::path at = dir_ / name;
    fs::create_directories(at);
    std::string opts = "size=" + std::to_string(size_kb) + "k";
    if (::mount("tmpfs", at.c_str(), "tmpfs", 0, opts.c_str()) != 0) return "";
    mounts_.push_back(at.string());
    return at.string();
  }

  // A scheduler, agents a1 and a2 of 2 slots each, and a training job of 1..4
  // workers running on all 4 past step 100; the pids of the agent that hosts
  // rank 0 (and the job's store) and of the other one.
  void StartTraining(p::Client& c, p::JobId* job, pid_t* rank0, pid_t* other) {
    StartScheduler();
    pid_t a1 = StartAgent("a1", 2);
    pid_t a2 = StartAgent("a2", 2);
    ASSERT_TRUE(WaitAgents(c, 2)) << Logs();
    auto submitted = SubmitTraining(c, 1, 4);
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    *job = *submitted;
    ASSERT_TRUE(WaitTraining(c, *job, 4, 100, 60)) << Logs();
    bool first = RankZeroAgent(*job) == "a1";
    *rank0 = first ? a1 : a2;
    *other = first ? a2 : a1;
  }

  // Pauses one agent (SIGSTOP) past the agent timeout, resumes it (SIGCONT),
  // and checks the job completes after all its steps.
  void PauseAgent(bool rank_zero) {
    auto c = Client();
    p::JobId job = 0;
    pid_t rank0 = 0, other = 0;
    ASSERT_NO_FATAL_FAILURE(StartTraining(*c, &job, &rank0, &other));
    pid_t victim = rank_zero ? rank0 : other;
    ::kill(victim, SIGSTOP);
    std::this_thread::sleep_for(milliseconds(5000));  // past the 3 s agent timeout
    ::kill(victim, SIGCONT);
    p::JobState end = FollowToEnd(*c, job, 150);
    Outcome o = ReadOutcome(job);
    bool ok = end == p::JobState::kCompleted && o.done_steps == kSteps;
    Record(ok, o.steps_lost, max_pause_s_);
    EXPECT_EQ(p::ToString(end), "completed") << Logs();
    EXPECT_EQ(o.done_steps, kSteps) << "the job ended before its program did all its steps\n" << Logs();
  }

  double max_pause_s_ = 0;
  bool result_recorded_ = false;
  std::string last_rank0_agent_;
  std::vector<std::string> mounts_;
};

}  // namespace aryl::chaostest
