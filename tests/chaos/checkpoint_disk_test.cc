// A full checkpoint disk under real processes (issue 34 §3): aryl-scheduler,
// aryl-agent and elastic_mlp workers (libtorch, Gloo) whose checkpoint
// directory is a small tmpfs. Before: the first failed write was followed by
// every later one failing (nothing older was removed to make room), only a few
// failures reached the scheduler's counters, and a crash restored a checkpoint
// thousands of steps old.
//
// A short job first writes one checkpoint, to learn its size S. Then:
//  1. Another file leaves room for 1.5 checkpoints: the job's first
//     checkpoint fits, every later write fails (the newest good one is never
//     removed, and there is nothing older). Each failure is counted by the
//     scheduler (aryl_job_checkpoint_failures_total); once the file is gone,
//     checkpoints are written again.
//  2. The disk is filled once more, now with three checkpoints kept: the
//     runtime's CheckpointManager removes older ones and the write goes
//     through; no write fails.
// Then every worker of the job is SIGKILLed: the job restores a checkpoint
// written after the disk emptied and completes all its steps.
#include <sys/statvfs.h>

#include "chaos_fixture.h"
#include "scrape.h"

namespace aryl {
namespace {

using namespace aryl::chaostest;  // NOLINT

constexpr int kEvery = 20;  // steps between checkpoints

// Lines of the job's workers' stderr that contain `needle`.
int CountErrLines(const std::vector<fs::path>& outs, const std::string& needle) {
  int n = 0;
  for (const auto& out : outs) {
    fs::path err = out;
    err.replace_extension(".err");
    std::istringstream in(ReadFile(err));
    for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  }
  return n;
}

// The pids of the processes whose environment names `ckpt_dir` as their
// checkpoint directory: the job's workers.
std::vector<pid_t> WorkersOf(const std::string& ckpt_dir) {
  std::vector<pid_t> pids;
  std::string needle = "ARYL_CHECKPOINT_DIR=" + ckpt_dir;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string env = ReadFile(e.path() / "environ");
    for (std::size_t at = 0; at < env.size();) {
      std::size_t end = env.find('\0', at);
      if (end == std::string::npos) end = env.size();
      if (env.compare(at, end - at, needle) == 0) pids.push_back(std::stoi(name));
      at = end + 1;
    }
  }
  return pids;
}

// The job's submission: elastic_mlp on 2 workers, checkpointing every
// kEvery steps into `dir`. --hidden 96: a checkpoint of about 180 KB.
p::SubmitJob MlpJob(int steps, const fs::path& dir) {
  p::SubmitJob m;
  m.argv = {ARYL_MLP_BIN, "--steps", std::to_string(steps), "--log-every", "10", "--hidden", "96",
            "--sleep-ms", "15"};
  m.min_workers = 2;
  m.max_workers = 2;
  m.checkpoint_dir = dir.string();
  m.env["ARYL_CHECKPOINT_EVERY"] = std::to_string(kEvery);
  m.name = "ckpt-disk";
  return m;
}

// Free bytes of the file system at `dir`.
std::uint64_t FreeBytes(const fs::path& dir) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return 0;
  return static_cast<std::uint64_t>(v.f_bavail) * v.f_frsize;
}

// Writes `bytes` (rounded down to 4 KiB) into `dir`/`name`.
void Fill(const fs::path& dir, const char* name, std::uint64_t bytes) {
  std::FILE* f = std::fopen((dir / name).c_str(), "w");
  if (!f) return;
  static const std::vector<char> block(4096, 'x');
  for (std::uint64_t n = 0; n + block.size() <= bytes; n += block.size())
    if (std::fwrite(block.data(), 1, block.size(), f) != block.size()) break;
  std::fclose(f);
}

TEST_F(ChaosTest, CheckpointDiskFillsUpAndEmpties) {
  std::string disk = MountTmpfs("ckptdisk", 1024);
  if (disk.empty()) {
    std::printf("SKIPPED: this machine does not allow a tmpfs mount (needs CAP_SYS_ADMIN)\n");
    result_recorded_ = true;
    GTEST_SKIP() << "no tmpfs mount allowed here";
  }
  StartScheduler();
  StartAgent("a1", 2);
  auto c = Client();
  ASSERT_TRUE(WaitAgents(*c, 1)) << Logs();

  // The size of one checkpoint (in 4 KiB blocks, as tmpfs counts it).
  fs::path probe = fs::path(disk) / "probe";
  auto first = c->Call<p::SubmitReply>(MlpJob(kEvery, probe), milliseconds(3000));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(WaitState(*c, first->job, p::JobState::kCompleted, 60)) << Logs();
  std::uint64_t size = 0;
  for (const auto& e : fs::directory_iterator(probe))
    if (e.path().extension() == ".aryl") size = std::max<std::uint64_t>(size, fs::file_size(e.path()));
  ASSERT_GT(size, 0u) << "the probe job wrote no checkpoint\n" << Logs();
  size = (size + 4095) / 4096 * 4096;
  fs::remove_all(probe);
  ASSERT_GT(FreeBytes(disk), 4 * size) << "the disk holds fewer than four checkpoints of " << size << " bytes";

  // 1. Room for 1.5 checkpoints: the first is written, the next ones fail.
  Fill(disk, "filler", FreeBytes(disk) - size - size / 2);
  fs::path ckpt = fs::path(disk) / "ckpt";
  auto reply = c->Call<p::SubmitReply>(MlpJob(kSteps, ckpt), milliseconds(3000));
  ASSERT_TRUE(reply.ok()) << reply.status();
  p::JobId job = reply->job;
  auto outs = [&] { return WorkerOutputs(job); };
  bool failing = WaitFor([&] { return CountErrLines(outs(), "failed (") >= 3; }, 60);
  fs::remove(fs::path(disk) / "filler");
  ASSERT_TRUE(failing) << "the writes did not fail on a full disk\n" << Logs();
  ASSERT_TRUE(WaitFor([&] { return CountErrLines(outs(), "checkpoints written again after") > 0; }, 30))
      << "checkpoints were not written again once the disk emptied\n" << Logs();

  // Every failure is counted by the scheduler.
  int failures = CountErrLines(outs(), "failed (");
  std::string series = "aryl_job_checkpoint_failures_total{job_id=\"" + std::to_string(job) + "\",name=\"ckpt-disk\"}";
  double counted = -1;
  WaitFor([&] { return (counted = ScrapeValue(http_port_, series)) == failures; }, 15);
  EXPECT_EQ(counted, failures) << "the scheduler counted " << counted << " of " << failures
                               << " failed writes (series " << series << ")\n" << Logs();

  // 2. Full once more with three checkpoints kept: older ones make room.
  auto st = Status(*c, job);
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_TRUE(WaitTraining(*c, job, 2, st->row.step + 3 * kEvery, 60)) << Logs();
  Fill(disk, "filler", FreeBytes(disk));
  ASSERT_TRUE(WaitFor([&] { return CountErrLines(outs(), "older checkpoint(s) to make room") > 0; }, 30))
      << "no checkpoint made room from older ones\n" << Logs();
  fs::remove(fs::path(disk) / "filler");
  EXPECT_EQ(CountErrLines(outs(), "failed ("), failures) << "a write failed though older checkpoints could make room";
  st = Status(*c, job);
  ASSERT_TRUE(st.ok()) << st.status();
  std::int64_t made_room_at = st->row.step;

  // 3. Every worker killed once two more checkpoints followed: the job
  //    restores one written after the disk emptied.
  ASSERT_TRUE(WaitTraining(*c, job, 2, made_room_at + 2 * kEvery, 60)) << Logs();
  std::vector<pid_t> workers = WorkersOf(ckpt.string());
  ASSERT_FALSE(workers.empty()) << "no worker found with ARYL_CHECKPOINT_DIR=" << ckpt.string();
  for (pid_t w : workers) ::kill(w, SIGKILL);
  p::JobState end = FollowToEnd(*c, job, 150);
  Outcome o = ReadOutcome(job);
  bool ok = end == p::JobState::kCompleted && o.done_steps == kSteps && o.steps_lost <= 3 * kEvery;
  Record(ok, o.steps_lost, max_pause_s_);
  EXPECT_EQ(p::ToString(end), "completed") << Logs();
  EXPECT_EQ(o.done_steps, kSteps) << Logs();
  // A checkpoint at most kEvery steps old, plus the steps printed (every 10)
  // and trained before the kill reached every rank.
  EXPECT_LE(o.steps_lost, 3 * kEvery) << "steps trained twice: " << o.steps_lost << "\n" << Logs();
  std::int64_t restored = 0;
  static const std::regex restore_re(R"(^aryl: restored checkpoint step=(\d+) )");
  for (const auto& path : outs()) {
    std::istringstream in(ReadFile(path));
    for (std::string line; std::getline(in, line);) {
      std::smatch sm;
      if (std::regex_search(line, sm, restore_re)) restored = std::max<std::int64_t>(restored, std::stoll(sm[1]));
    }
  }
  EXPECT_GE(restored, made_room_at) << "restored a checkpoint from before the disk emptied";
}

}  // namespace
}  // namespace aryl
