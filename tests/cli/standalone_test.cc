// aryl-run --standalone as a new user meets it, with /bin/sh workers: torchrun's
// flags give torchrun's world, a second run keeps the first run's logs, a
// missing program is reported once, and a restart-kind elastic job without a
// checkpoint is told that a resize starts it again from step 0 (and a
// preempted one, once); each state line is printed once.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct RunResult {
  int code = -1;
  std::string out;  // stdout and stderr
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

RunResult Exec(const std::vector<std::string>& argv, int timeout_s = 60) {
  std::string cmd = "ARYL_CONFIG=/dev/null ARYL_SCHEDULER= timeout " + std::to_string(timeout_s);
  for (const auto& a : argv) cmd += " " + Quote(a);
  cmd += " 2>&1 </dev/null";
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Standalone : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("aryl-standalone-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // aryl-run --standalone --work-dir DIR/work ARGS.
  RunResult Run(std::vector<std::string> args, int timeout_s = 60) {
    std::vector<std::string> argv = {ARYL_RUN_BIN, "--standalone", "--work-dir", (dir_ / "work").string(), "--cwd",
                                     dir_.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return Exec(argv, timeout_s);
  }
  fs::path dir_;
};

// torchrun --standalone --nproc-per-node 2 --nnodes 1:2 runs 2 workers on its
// one machine, LOCAL_WORLD_SIZE=2: a script calling cuda.set_device(LOCAL_RANK)
// on a 2-GPU machine works. aryl-run with the same flags gives the same world.
TEST_F(Standalone, TorchrunFlagsGiveTorchrunsWorld) {
  RunResult r = Run({"--nproc-per-node", "2", "--nnodes", "1:2", "--", "sh", "-c",
                     "echo \"RANK=$RANK WS=$WORLD_SIZE LR=$LOCAL_RANK LWS=$LOCAL_WORLD_SIZE GWS=$GROUP_WORLD_SIZE\""});
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<std::string> outs;
  for (const auto& e : fs::directory_iterator(dir_ / "work" / "logs" / "job-1"))
    if (e.path().extension() == ".out") outs.push_back(ReadFile(e.path()));
  ASSERT_EQ(outs.size(), 2u) << r.out;
  std::set<std::string> local_ranks;
  for (const auto& o : outs) {
    EXPECT_NE(o.find(" WS=2 "), std::string::npos) << o;
    EXPECT_NE(o.find(" LWS=2 "), std::string::npos) << o;
    EXPECT_NE(o.find(" GWS=1"), std::string::npos) << o;
    std::smatch m;
    if (std::regex_search(o, m, std::regex("LR=([0-9]+)"))) local_ranks.insert(m[1]);
  }
  EXPECT_EQ(local_ranks, (std::set<std::string>{"0", "1"}));
  // "(2 workers)", and never "(1 workers)".
  EXPECT_NE(r.out.find("(2 workers)"), std::string::npos) << r.out;
}

// Job ids restart at 1 with each run's fresh state: the second run in the
// same directory moves the first run's logs to logs.1 and says so.
TEST_F(Standalone, SecondRunKeepsTheFirstRunsLogs) {
  RunResult first = Run({"--slots", "1", "--", "sh", "-c", "echo first-run"});
  ASSERT_EQ(first.code, 0) << first.out;
  RunResult second = Run({"--slots", "1", "--", "sh", "-c", "echo second-run"});
  ASSERT_EQ(second.code, 0) << second.out;
  EXPECT_NE(ReadFile(dir_ / "work" / "logs" / "job-1" / "worker-0.out").find("second-run"), std::string::npos);
  EXPECT_NE(ReadFile(dir_ / "work" / "logs.1" / "job-1" / "worker-0.out").find("first-run"), std::string::npos)
      << second.out;
  EXPECT_NE(second.out.find("the previous run's logs are in " + (dir_ / "work" / "logs.1").string()),
            std::string::npos)
      << second.out;
  EXPECT_NE(second.out.find("(1 worker)"), std::string::npos) << second.out;
  RunResult third = Run({"--slots", "1", "--quiet", "--", "true"});
  ASSERT_EQ(third.code, 0) << third.out;
  EXPECT_TRUE(fs::exists(dir_ / "work" / "logs.2" / "job-1" / "worker-0.out"));
}

// A job that runs past aryl-run's re-watch (every 3 s): its state line is
// printed once, not again when the re-watch answers with the bare reason.
TEST_F(Standalone, StateLinePrintedOnce) {
  RunResult r = Run({"--slots", "1", "--", "sh", "-c", "sleep 4"});
  ASSERT_EQ(r.code, 0) << r.out;
  size_t running = 0;
  for (size_t at = r.out.find("job 1 running"); at != std::string::npos; at = r.out.find("job 1 running", at + 1))
    ++running;
  EXPECT_EQ(running, 1u) << r.out;
  EXPECT_NE(r.out.find("job 1 queued\n"), std::string::npos) << r.out;      // no "(0 workers)"
  EXPECT_NE(r.out.find("job 1 completed\n"), std::string::npos) << r.out;   // nor "completed: completed"
}

// A program that is not there: exit 127 and the reason, once; no stderr to
// read (the worker never started) and no pointer to a file that does not exist.
TEST_F(Standalone, MissingProgramIsReportedOnce) {
  RunResult r = Run({"--slots", "1", "--", "/nonexistent/trainer", "--lr", "0.1"});
  EXPECT_EQ(r.code, 127) << r.out;
  EXPECT_NE(r.out.find("could not start"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/trainer"), std::string::npos) << r.out;
  const std::size_t first = r.out.find("is not an executable file");
  EXPECT_EQ(r.out.find("is not an executable file", first + 1), std::string::npos) << r.out;  // not the agent's line too
  EXPECT_EQ(r.out.find("could not be read"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("all of it"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(".err"), std::string::npos) << r.out;
}

// A restart-kind elastic job without --checkpoint-dir: aryl-run says at submit
// that a resize starts it again from step 0, and says it again at the restart
// (the loanable agent is lent 3 s in, and the job grows onto it).
TEST_F(Standalone, RestartKindJobWithoutCheckpointIsWarned) {
  const fs::path demand = dir_ / "demand.csv";
  std::ofstream(demand) << "time_s,servers\n0,1\n3,0\n";
  RunResult r = Run({"--slots", "1", "--loan-slots", "1", "--inference-demand", demand.string(), "--elastic",
                     "restart", "--min", "1", "--max", "2", "--", "sh", "-c",
                     "i=0; while [ $i -lt 60 ]; do echo step=$i; i=$((i+1)); sleep 0.1; done"},
                    90);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("note: job 1 resizes by restarting all its workers (--elastic restart) and has no "
                       "--checkpoint-dir"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("restarting all workers"), std::string::npos) << "no restart happened:\n" << r.out;
  EXPECT_NE(r.out.find("note: job 1 has no --checkpoint-dir: its workers start again from step 0"),
            std::string::npos)
      << r.out;
  // With a checkpoint directory there is nothing to warn of.
  RunResult ck = Run({"--slots", "1", "--elastic", "restart", "--min", "1", "--max", "2", "--checkpoint-dir",
                      (dir_ / "ckpt").string(), "--", "true"});
  ASSERT_EQ(ck.code, 0) << ck.out;
  EXPECT_EQ(ck.out.find("note:"), std::string::npos) << ck.out;
}

// A fixed-size job on a loaned server is preempted when inference takes the
// server back (4 s in) and starts again once it is lent again (9 s in): the
// preemption is said once ("preempted: reclaim...", not "preempted:
// preempted: ..."), with the note that a job without --checkpoint-dir starts
// again from step 0, given once for the one stop.
TEST_F(Standalone, PreemptionSaidOnceWithTheStepZeroNote) {
  const fs::path demand = dir_ / "demand.csv";
  std::ofstream(demand) << "time_s,servers\n0,0\n4,1\n9,0\n";
  RunResult r = Run({"--slots", "1", "--loan-slots", "1", "--inference-demand", demand.string(),
                     "--workers", "2", "--", "sh", "-c", "sleep 7"},
                    90);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("job 1 preempted: "), std::string::npos) << "no preemption happened:\n"
                                                                << r.out;
  EXPECT_EQ(r.out.find("preempted: preempted"), std::string::npos) << r.out;
  const std::string note =
      "note: job 1 has no --checkpoint-dir: its workers start again from step 0";
  const size_t first = r.out.find(note);
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(note, first + 1), std::string::npos) << "the note twice for one stop:\n"
                                                            << r.out;
}

}  // namespace
