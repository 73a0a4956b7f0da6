// Start-up checks of every binary's flags: a bad value is one line on stderr
// naming the flag and the value, exit 2, before anything is contacted; and
// --version on every binary. No scheduler runs here: a command that got past
// its checks would try tcp://127.0.0.1:1 and fail with exit 1 instead.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

struct RunResult {
  int code = -1;
  std::string out;  // stdout and stderr
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

RunResult Exec(const std::vector<std::string>& argv) {
  std::string cmd = "ARYL_CONFIG=/dev/null ARYL_SCHEDULER= timeout 20";
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

size_t Lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// One usage error: exit 2 (aryl-run: 200), one line, naming the flag and the value.
void ExpectUsageError(const std::vector<std::string>& argv, const std::string& flag, const std::string& value,
                      int code = 2) {
  RunResult r = Exec(argv);
  std::string shown;
  for (const auto& a : argv) shown += a + " ";
  EXPECT_EQ(r.code, code) << shown << "\n" << r.out;
  EXPECT_EQ(Lines(r.out), 1u) << shown << "\n" << r.out;
  EXPECT_NE(r.out.find(": error: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(flag + " '" + value + "'"), std::string::npos) << shown << "\n" << r.out;
}

const std::string kNowhere = "tcp://127.0.0.1:1";

// The examples of the operations issue, one by one.
TEST(FlagChecks, SchedulerRefusesBadValuesAtStartUp) {
  ExpectUsageError({ARYL_SCHEDULER_BIN, "--policy", "bogus", "--http-port", "-1"}, "--policy", "bogus");
  ExpectUsageError({ARYL_SCHEDULER_BIN, "--policy", "aryl:nosuch", "--http-port", "-1"}, "--policy", "aryl:nosuch");
  ExpectUsageError({ARYL_SCHEDULER_BIN, "--heartbeat", "nan", "--http-port", "-1"}, "--heartbeat", "nan");
  ExpectUsageError({ARYL_SCHEDULER_BIN, "--http-port", "70000"}, "--http-port", "70000");
  ExpectUsageError({ARYL_SCHEDULER_BIN, "--stop-grace", "-1", "--http-port", "-1"}, "--stop-grace", "-1");
}

// The Prometheus inference-demand source and its flags.
TEST(FlagChecks, SchedulerRefusesBadDemandSource) {
  for (const char* spec : {"prometheus:https://h:9090?query=x", "prometheus:http://h:0?query=x",
                           "prometheus:http://h:9090", "prometheus:http://h:9090?query=", "prometheus:h?query=x"})
    ExpectUsageError({ARYL_SCHEDULER_BIN, "--inference-demand", spec, "--http-port", "-1"}, "--inference-demand", spec);
  for (auto [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--demand-step", "0"}, {"--demand-per-server", "-1"}, {"--demand-headroom", "-1"},
           {"--demand-hysteresis", "1"}, {"--demand-hold", "nan"}, {"--demand-reclaim-deadline", "0"}})
    ExpectUsageError({ARYL_SCHEDULER_BIN, flag, value, "--http-port", "-1"}, flag, value);
}

TEST(FlagChecks, ClientRefusesBadValuesBeforeConnecting) {
  ExpectUsageError({ARYL_BIN, "status", "--scheduler", kNowhere, "--", "-1"}, "JOB", "-1");
  ExpectUsageError({ARYL_BIN, "status", "--scheduler", kNowhere, "18446744073709551615"}, "JOB", "18446744073709551615");
  ExpectUsageError({ARYL_BIN, "cancel", "--scheduler", kNowhere, "0"}, "JOB", "0");
  ExpectUsageError({ARYL_BIN, "pool", "reclaim", "--scheduler", kNowhere, "1.5"}, "K", "1.5");
  ExpectUsageError({ARYL_BIN, "pool", "reclaim", "--scheduler", kNowhere, "2abc"}, "K", "2abc");
  ExpectUsageError({ARYL_BIN, "pool", "reclaim", "--scheduler", kNowhere, "0"}, "K", "0");
  ExpectUsageError({ARYL_BIN, "jobs", "--scheduler", kNowhere, "--timeout", "0"}, "--timeout", "0");
  ExpectUsageError({ARYL_BIN, "jobs", "--scheduler", kNowhere, "--timeout", "nan"}, "--timeout", "nan");
  ExpectUsageError({ARYL_BIN, "pool", "reclaim", "1", "--scheduler", kNowhere, "--deadline", "nan"}, "--deadline", "nan");
  ExpectUsageError({ARYL_BIN, "pool", "reclaim", "1", "--scheduler", kNowhere, "--deadline", "inf"}, "--deadline", "inf");
  ExpectUsageError({ARYL_BIN, "top", "--scheduler", kNowhere, "--interval", "0"}, "--interval", "0");
  ExpectUsageError({ARYL_BIN, "jobs", "--scheduler", kNowhere, "-o", "xml"}, "-o", "xml");
  ExpectUsageError({ARYL_BIN, "nodes", "--scheduler", kNowhere, "evict"}, "ACTION", "evict");
  // A job's size is spoken of in flags, not in the message's fields.
  for (const auto& [args, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--min", "3", "--max", "2"}, "--min 3 > --max 2"},
           {{"--min", "3"}, "--min 3 needs --max too"},
           {{"--workers", "2", "--max", "4"}, "give --workers N or --min A --max B, not both"},
           {{"--workers", "0"}, "--workers '0': must be >= 1"}}) {
    std::vector<std::string> argv = {ARYL_BIN, "submit", "--scheduler", kNowhere};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--", "true"});
    RunResult r = Exec(argv);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(Lines(r.out), 1u) << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("field"), std::string::npos) << r.out;
  }
  // A good value gets past the checks and fails on the missing scheduler instead.
  RunResult ok = Exec({ARYL_BIN, "pool", "reclaim", "2", "--scheduler", kNowhere, "--timeout", "0.3"});
  EXPECT_EQ(ok.code, 1) << ok.out;
}

#ifdef ARYL_RUN_BIN
// aryl-run passes on its job's exit code, and a Python script that is not
// there exits 2: aryl-run's own usage errors exit 200 instead, its failures
// to submit 201, and --help lists the whole table.
TEST(FlagChecks, ArylRunUsageCodesStayApartFromTheJobs) {
  ExpectUsageError({ARYL_RUN_BIN, "--scheduler", kNowhere, "--cancel-grace", "-1", "--workers", "1", "--", "true"},
                   "--cancel-grace", "-1", 200);
  ExpectUsageError({ARYL_RUN_BIN, "--scheduler", kNowhere, "--nnodes", "x", "--", "true"}, "--nnodes", "x", 200);
  ExpectUsageError({ARYL_RUN_BIN, "--scheduler", kNowhere, "--env", "NOEQUALS", "--workers", "1", "--", "true"},
                   "--env", "NOEQUALS", 200);
  // A --follow-logs directory that is not there would print nothing, silently.
  ExpectUsageError({ARYL_RUN_BIN, "--scheduler", kNowhere, "--follow-logs", "/nonexistent/logs", "--workers", "1",
                    "--", "true"},
                   "--follow-logs", "/nonexistent/logs", 200);
  RunResult missing = Exec({ARYL_RUN_BIN, "--scheduler", kNowhere, "--workers", "1"});
  EXPECT_EQ(missing.code, 200) << missing.out;
  RunResult unknown = Exec({ARYL_RUN_BIN, "--no-such-flag"});
  EXPECT_EQ(unknown.code, 200) << unknown.out;
  // Nothing listens there: said after one request's timeout (3 s), not three.
  const auto t0 = std::chrono::steady_clock::now();
  RunResult nowhere = Exec({ARYL_RUN_BIN, "--scheduler", kNowhere, "--workers", "1", "--", "true"});
  EXPECT_EQ(nowhere.code, 201) << nowhere.out;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 6) << nowhere.out;
  RunResult range = Exec({ARYL_RUN_BIN, "--scheduler", kNowhere, "--min", "3", "--max", "2", "--", "true"});
  EXPECT_EQ(range.code, 200) << range.out;
  EXPECT_NE(range.out.find("--min 3 > --max 2"), std::string::npos) << range.out;
  RunResult help = Exec({ARYL_RUN_BIN, "--help"});
  EXPECT_EQ(help.code, 0);
  for (const char* row : {"\n  0  ", "\n  1-255  ", "\n  130  ", "\n  200  ", "\n  201  ", "\n  202  ", "\n  203  "})
    EXPECT_NE(help.out.find(row), std::string::npos) << row << "\n" << help.out;
}
#endif

#ifdef ARYL_RT_LAUNCH_BIN
TEST(FlagChecks, LauncherRefusesBadWorkerCount) {
  ExpectUsageError({ARYL_RT_LAUNCH_BIN, "--workers", "-1", "--", "true"}, "--workers", "-1");
  ExpectUsageError({ARYL_RT_LAUNCH_BIN, "--workers", "0", "--", "true"}, "--workers", "0");
}
#endif

// --version: "<name> X.Y.Z (commit C)" and the build options, exit 0, on every binary.
TEST(Version, EveryBinary) {
  std::vector<std::pair<std::string, std::string>> bins = {
      {ARYL_BIN, "aryl"}, {ARYL_SCHEDULER_BIN, "aryl-scheduler"}, {ARYL_AGENT_BIN, "aryl-agent"},
#ifdef ARYL_RUN_BIN
      {ARYL_RUN_BIN, "aryl-run"},
#endif
#ifdef ARYL_SIM_BIN
      {ARYL_SIM_BIN, "aryl-sim"},
#endif
#ifdef ARYL_RT_LAUNCH_BIN
      {ARYL_RT_LAUNCH_BIN, "aryl-rt-launch"},
#endif
  };
  for (const auto& [bin, name] : bins) {
    RunResult r = Exec({bin, "--version"});
    EXPECT_EQ(r.code, 0) << bin << "\n" << r.out;
    EXPECT_EQ(r.out.rfind(name + " ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find(" (commit "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\nbuild: torch "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(", cuda "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(", nccl "), std::string::npos) << r.out;
  }
  EXPECT_EQ(Exec({ARYL_BIN, "version"}).out, Exec({ARYL_BIN, "--version"}).out);
}

// Completion scripts come from the command table: commands, sub-commands and flags.
TEST(Completion, BashCompletesCommandsAndFlags) {
  auto complete = [](const std::string& line) {
    std::string script = "source <(ARYL_CONFIG=/dev/null " + Quote(ARYL_BIN) +
                         " completion bash); COMP_WORDS=(" + line + "); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); " +
                         "_aryl; echo \"${COMPREPLY[*]}\"";
    return Exec({"bash", "-c", script}).out;
  };
  EXPECT_EQ(complete("aryl jo"), "jobs\n");
  EXPECT_EQ(complete("aryl pool re"), "reclaim\n");
  EXPECT_EQ(complete("aryl jobs --no-h"), "--no-headers\n");
  EXPECT_EQ(complete("aryl pool reclaim --dead"), "--deadline\n");
  EXPECT_EQ(complete("aryl jobs -o w"), "wide\n");
  EXPECT_EQ(complete("aryl completion z"), "zsh\n");
  EXPECT_EQ(complete("aryl nodes dr"), "drain\n");
  EXPECT_EQ(complete("aryl nodes --no-h"), "--no-headers\n");
  EXPECT_EQ(complete("aryl nodes drain --sch"), "--scheduler\n");
  RunResult syntax = Exec({"bash", "-c", "ARYL_CONFIG=/dev/null " + Quote(ARYL_BIN) + " completion bash | bash -n"});
  EXPECT_EQ(syntax.code, 0) << syntax.out;
}

TEST(Completion, ZshScriptParses) {
  RunResult z = Exec({ARYL_BIN, "completion", "zsh"});
  ASSERT_EQ(z.code, 0);
  EXPECT_EQ(z.out.rfind("#compdef aryl\n", 0), 0u);
  EXPECT_NE(z.out.find("'--no-headers["), std::string::npos);
  if (Exec({"sh", "-c", "command -v zsh"}).code != 0) GTEST_SKIP() << "zsh not installed: syntax not checked";
  RunResult syntax = Exec({"zsh", "-n", "-c", z.out});
  EXPECT_EQ(syntax.code, 0) << syntax.out;
  ExpectUsageError({ARYL_BIN, "completion", "fish"}, "SHELL", "fish");
}

}  // namespace
