// The aryl command line against a real scheduler and agent: exit codes,
// tables, --json, and clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <tuple>

#include "aryl/agent/process.h"

namespace aryl {
namespace {

namespace fs = std::filesystem;

struct Out {
  int code = -1;
  std::string text;  // stdout and stderr together
};

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("aryl-cli-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    launcher_ = new agent::ProcessLauncher();
    agent::LaunchSpec s;
    s.argv = {ARYL_SCHEDULER_BIN, "--endpoint", "tcp://127.0.0.1:*", "--insecure", "--state", (dir_ / "state.db").string(),
              "--http-port", "-1", "--heartbeat", "0.2", "--agent-timeout", "2"};
    s.stdout_path = (dir_ / "scheduler.log").string();
    ASSERT_TRUE(launcher_->Launch(s).ok());
    // The scheduler logs the port it bound. Only its own line counts: the
    // --insecure warning before it names the unbound "tcp://127.0.0.1:*".
    const std::string marker = "aryl-scheduler listening on ";
    for (int i = 0; i < 100 && endpoint_.empty(); ++i) {
      std::ifstream in(dir_ / "scheduler.log");
      std::string line;
      while (std::getline(in, line)) {
        auto at = line.find(marker);
        if (at == std::string::npos) continue;
        at += marker.size();
        endpoint_ = line.substr(at, line.find_first_of(", ", at) - at);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_FALSE(endpoint_.empty());
    agent::LaunchSpec a;
    a.argv = {ARYL_AGENT_BIN, "--scheduler", endpoint_, "--id", "node-1", "--host", "127.0.0.1", "--slots", "2",
              "--gpu-type", "cpu", "--log-dir", (dir_ / "logs").string()};
    a.stdout_path = (dir_ / "agent.log").string();
    ASSERT_TRUE(launcher_->Launch(a).ok());
  }
  static void TearDownTestSuite() {
    launcher_->StopAll(2);
    delete launcher_;
    fs::remove_all(dir_);
  }

  static Out Aryl(std::vector<std::string> args, bool with_endpoint = true,
                  std::map<std::string, std::string> env = {}) {
    static int n = 0;
    agent::LaunchSpec s;
    // Hermetic: no config file of the machine or the user unless a test names one.
    s.env = {{"ARYL_CONFIG", "/dev/null"}, {"ARYL_SCHEDULER", ""}};
    for (auto& [k, v] : env) s.env[k] = v;
    s.argv = {ARYL_BIN};
    // --scheduler goes before "--" (what follows is the job's command).
    auto dashes = std::find(args.begin(), args.end(), std::string("--"));
    if (with_endpoint) dashes = args.insert(dashes, {"--scheduler", endpoint_}) + 2;
    s.argv.insert(s.argv.end(), args.begin(), args.end());
    fs::path out = dir_ / ("out-" + std::to_string(n++));
    s.stdout_path = out.string();
    agent::ProcessLauncher l;
    auto pid = l.Launch(s);
    Out o;
    if (!pid.ok()) return o;
    for (int i = 0; i < 300 && l.size() > 0; ++i) {
      for (const auto& e : l.Poll()) o.code = e.exit_code;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    o.text = ss.str();
    return o;
  }

  // Until the agent has registered (each test runs in its own process).
  static void WaitForAgent() {
    for (int i = 0; i < 200; ++i) {
      Out nodes = Aryl({"nodes", "--json"});
      if (nodes.code == 0 && nodes.text.find("\"connected\": true") != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  static fs::path dir_;
  static std::string endpoint_;
  static agent::ProcessLauncher* launcher_;
};
fs::path CliTest::dir_;
std::string CliTest::endpoint_;
agent::ProcessLauncher* CliTest::launcher_ = nullptr;

// Usage errors exit 2 with one line naming the problem; --help exits 0.
TEST_F(CliTest, UsageErrors) {
  EXPECT_EQ(Aryl({}, false).code, 2);
  Out unknown = Aryl({"frobnicate"}, false);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.text.find("unknown command 'frobnicate'"), std::string::npos) << unknown.text;
  EXPECT_EQ(Aryl({"--help"}, false).code, 0);
  EXPECT_EQ(Aryl({"jobs", "--help"}, false).code, 0);
  Out bad_flag = Aryl({"jobs", "--no-such-flag"}, false);
  EXPECT_EQ(bad_flag.code, 2);
  EXPECT_NE(bad_flag.text.find("aryl jobs: error:"), std::string::npos) << bad_flag.text;
  Out no_cmd = Aryl({"submit", "--workers", "1"});
  EXPECT_EQ(no_cmd.code, 2);
  EXPECT_NE(no_cmd.text.find("missing the command"), std::string::npos) << no_cmd.text;
  Out both = Aryl({"submit", "--workers", "1", "--min", "1", "--max", "2", "--", "true"});
  EXPECT_EQ(both.code, 2) << both.text;
  Out bad_id = Aryl({"status", "abc"});
  EXPECT_EQ(bad_id.code, 2);
  EXPECT_NE(bad_id.text.find("JOB 'abc': not a job id"), std::string::npos) << bad_id.text;
  for (const auto& cmd : std::vector<std::vector<std::string>>{{"status", "-1"}, {"cancel", "3", "-7"}}) {
    Out negative = Aryl(cmd);
    EXPECT_EQ(negative.code, 2) << negative.text;
    EXPECT_NE(negative.text.find("JOB '" + cmd.back() + "': not a job id"), std::string::npos) << negative.text;
  }
  Out bad_deadline = Aryl({"pool", "reclaim", "1", "--deadline", "soon"});
  EXPECT_EQ(bad_deadline.code, 2);
}

// A restart-kind elastic job without --checkpoint-dir: aryl submit says on
// stderr that every resize starts it again from step 0 (its stdout stays the
// job id); with a checkpoint directory, or an in-place job, nothing is said.
TEST_F(CliTest, SubmitWarnsOfARestartJobWithoutCheckpoint) {
  WaitForAgent();
  Out restart =
      Aryl({"submit", "--elastic", "restart", "--min", "1", "--max", "2", "--", "sleep", "30"});
  ASSERT_EQ(restart.code, 0) << restart.text;
  EXPECT_NE(restart.text.find("aryl submit: note: job 1 resizes by restarting all its workers "
                              "(--elastic restart) and has no --checkpoint-dir"),
            std::string::npos)
      << restart.text;
  Out with_dir = Aryl({"submit", "--elastic", "restart", "--min", "1", "--max", "2",
                       "--checkpoint-dir", "/tmp", "--", "sleep", "30"});
  ASSERT_EQ(with_dir.code, 0) << with_dir.text;
  EXPECT_EQ(with_dir.text, "2\n");
  Out inplace = Aryl({"submit", "--min", "1", "--max", "2", "--", "sleep", "30"});
  ASSERT_EQ(inplace.code, 0) << inplace.text;
  EXPECT_EQ(inplace.text, "3\n");
  Aryl({"cancel", "1", "2", "3"});
}

// Submit, list, status, cancel and nodes, as tables and as JSON.
TEST_F(CliTest, JobCommands) {
  WaitForAgent();
  Out nodes = Aryl({"nodes"});
  ASSERT_EQ(nodes.code, 0) << nodes.text;
  EXPECT_NE(nodes.text.find("AGENT"), std::string::npos);
  EXPECT_NE(nodes.text.find("node-1"), std::string::npos) << nodes.text;

  Out sub = Aryl({"submit", "--name", "sleeper", "--min", "1", "--max", "2", "--", "sleep", "30"});
  ASSERT_EQ(sub.code, 0) << sub.text;
  std::string id = sub.text.substr(0, sub.text.find('\n'));
  Out jobs = Aryl({"jobs"});
  ASSERT_EQ(jobs.code, 0);
  EXPECT_NE(jobs.text.find("sleeper"), std::string::npos) << jobs.text;
  Out js = Aryl({"jobs", "--json"});
  ASSERT_EQ(js.code, 0);
  auto parsed = nlohmann::json::parse(js.text);
  ASSERT_EQ(parsed["jobs"].size(), 1u) << js.text;
  EXPECT_EQ(parsed["jobs"][0]["name"], "sleeper");
  Out st = Aryl({"status", id});
  ASSERT_EQ(st.code, 0);
  EXPECT_NE(st.text.find("sleep 30"), std::string::npos) << st.text;
  // `sleep` prints no step= lines: its progress is unknown, not step 0.
  EXPECT_NE(st.text.find("progress   unknown"), std::string::npos) << st.text;
  EXPECT_NE(jobs.text.find("unknown"), std::string::npos) << jobs.text;
  // Filters, as squeue's: by state, owner and name.
  Out running = Aryl({"jobs", "--state", "running", "--name", "sleeper"});
  EXPECT_NE(running.text.find("sleeper"), std::string::npos) << running.text;
  Out none = Aryl({"jobs", "--owner", "nobody-else"});
  EXPECT_EQ(none.text.find("sleeper"), std::string::npos) << none.text;
  Out bad_state = Aryl({"jobs", "--state", "sleeping"});
  EXPECT_EQ(bad_state.code, 2);
  EXPECT_NE(bad_state.text.find("known: queued"), std::string::npos) << bad_state.text;
  Out cancel = Aryl({"cancel", id});
  EXPECT_EQ(cancel.code, 0) << cancel.text;
  Out cancelled = Aryl({"jobs", "--state", "cancelled"});
  EXPECT_NE(cancelled.text.find("sleeper"), std::string::npos) << "an ended state lists ended jobs\n" << cancelled.text;
  // Several ids at once; one that fails makes the exit 1, the others are still cancelled.
  Out two = Aryl({"submit", "--workers", "1", "--", "sleep", "30"});
  ASSERT_EQ(two.code, 0) << two.text;
  std::string id2 = two.text.substr(0, two.text.find('\n'));
  Out many = Aryl({"cancel", id2, "999"});
  EXPECT_EQ(many.code, 1) << many.text;
  EXPECT_NE(many.text.find("999"), std::string::npos) << many.text;
  Out st2 = Aryl({"status", id2});
  EXPECT_NE(st2.text.find("cancelled"), std::string::npos) << st2.text;
  Out again = Aryl({"cancel", id});
  EXPECT_EQ(again.code, 1);
  EXPECT_NE(again.text.find("already cancelled"), std::string::npos) << again.text;
  Out missing = Aryl({"status", "999"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.text.find("999"), std::string::npos) << missing.text;
  // Offering a training server is refused with the reason.
  Out offer = Aryl({"pool", "offer", "node-1"});
  EXPECT_EQ(offer.code, 1);
  EXPECT_NE(offer.text.find("training server"), std::string::npos) << offer.text;
  Out top = Aryl({"top", "--once"});
  EXPECT_EQ(top.code, 0);
  EXPECT_NE(top.text.find("POOL"), std::string::npos) << top.text;
}

// A queued job says why it waits, as squeue's REASON, in `aryl jobs` and `aryl
// status N`: capacity while slots are taken; its minimum size once more
// workers than the slots in service; its GPU type once no node of that type
// is in service. A job that could never fit is refused at submit instead.
TEST_F(CliTest, PendingReasons) {
  WaitForAgent();
  // node-1 (cpu, 2 slots) is the suite's; node-2 (cpu, 2) and node-3 (t4, 1) join.
  for (auto [id, slots, type] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"node-2", "2", "cpu"}, {"node-3", "1", "t4"}}) {
    agent::LaunchSpec a;
    a.argv = {ARYL_AGENT_BIN, "--scheduler", endpoint_, "--id", id, "--host", "127.0.0.1", "--slots", slots,
              "--gpu-type", type, "--log-dir", (dir_ / ("logs-" + id)).string()};
    a.stdout_path = (dir_ / ("agent-" + id + ".log")).string();
    ASSERT_TRUE(launcher_->Launch(a).ok());
  }
  auto until = [](const std::function<bool()>& done) {
    for (int i = 0; i < 150; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  ASSERT_TRUE(until([] {
    Out nodes = Aryl({"nodes", "--json"});
    auto n = nlohmann::json::parse(nodes.text, nullptr, false);
    int connected = 0;
    if (n.is_object())
      for (const auto& row : n["nodes"]) connected += row.value("connected", false);
    return connected == 3;
  })) << Aryl({"nodes"}).text;
  auto submit = [](std::vector<std::string> args) {
    args.insert(args.begin(), "submit");
    for (const char* a : {"--", "sleep", "60"}) args.push_back(a);
    Out o = Aryl(args);
    EXPECT_EQ(o.code, 0) << o.text;
    return o.text.substr(0, o.text.find('\n'));
  };
  auto reason = [](const std::string& id) {
    Out js = Aryl({"jobs", "--json"});
    auto doc = nlohmann::json::parse(js.text, nullptr, false);
    if (!doc.is_object()) return std::string();
    for (const auto& row : doc["jobs"])
      if (std::to_string(row.value("job", 0)) == id) return row.value("pending_reason", std::string());
    return std::string();
  };
  auto state = [](const std::string& id) {
    auto doc = nlohmann::json::parse(Aryl({"status", id, "--json"}).text, nullptr, false);
    return doc.is_object() ? doc["row"].value("state", std::string()) : std::string();
  };

  // Never placeable with the nodes connected: refused, naming what is there.
  Out too_big = Aryl({"submit", "--workers", "9", "--", "sleep", "60"});
  EXPECT_EQ(too_big.code, 1) << too_big.text;
  EXPECT_NE(too_big.text.find("needs at least 9 workers"), std::string::npos) << too_big.text;
  Out no_type = Aryl({"submit", "--workers", "1", "--gpu-type", "a100", "--", "sleep", "60"});
  EXPECT_EQ(no_type.code, 1) << no_type.text;
  EXPECT_NE(no_type.text.find("of type a100"), std::string::npos) << no_type.text;

  // Two blockers take one cpu node and the t4 node; the jobs behind them wait for capacity.
  const std::string cpu_blocker = submit({"--name", "hold-cpu", "--workers", "2", "--gpu-type", "cpu"});
  const std::string t4_blocker = submit({"--name", "hold-t4", "--workers", "1", "--gpu-type", "t4"});
  ASSERT_TRUE(until([&] { return state(cpu_blocker) == "running" && state(t4_blocker) == "running"; }))
      << Aryl({"jobs"}).text;
  const std::string big = submit({"--name", "big", "--workers", "4", "--gpu-type", "cpu"});
  const std::string t4 = submit({"--name", "on-t4", "--workers", "1", "--gpu-type", "t4"});
  ASSERT_TRUE(until([&] { return reason(big).rfind("Capacity: needs 4 workers at once; cpu 2 of 4 slots free", 0) == 0; }))
      << reason(big);
  EXPECT_EQ(reason(t4).rfind("Capacity: needs 1 worker at once; t4 0 of 1 slot free", 0), 0u) << reason(t4);

  // The cpu node without the blocker and the t4 node are drained (their jobs run on).
  auto placement = nlohmann::json::parse(Aryl({"status", cpu_blocker, "--json"}).text)["placement"];
  ASSERT_EQ(placement.size(), 1u) << placement.dump();
  const std::string other_cpu = placement[0]["agent_id"] == "node-1" ? "node-2" : "node-1";
  for (const auto& node : {other_cpu, std::string("node-3")}) {
    Out drain = Aryl({"nodes", "drain", node});
    ASSERT_EQ(drain.code, 0) << drain.text;
  }
  const std::string min_size =
      "MinSize: needs 4 workers at once, more than are in service: cpu 2 of 4 slots (" + other_cpu + " drained)";
  const std::string gpu_type = "GpuType: no node of GPU type t4 is in service (node-3 drained)";
  ASSERT_TRUE(until([&] { return reason(big) == min_size && reason(t4) == gpu_type; }))
      << reason(big) << "\n" << reason(t4);
  Out table = Aryl({"jobs"});
  ASSERT_EQ(table.code, 0) << table.text;
  EXPECT_NE(table.text.find("  REASON\n"), std::string::npos) << table.text;
  EXPECT_NE(table.text.find(min_size + "\n"), std::string::npos) << table.text;
  EXPECT_NE(table.text.find(gpu_type + "\n"), std::string::npos) << table.text;
  Out csv = Aryl({"jobs", "-o", "csv"});
  EXPECT_NE(csv.text.find(",REASON\n"), std::string::npos) << csv.text;
  EXPECT_NE(csv.text.find(",\"" + min_size + "\"\n"), std::string::npos) << csv.text;
  Out st_big = Aryl({"status", big});
  EXPECT_NE(st_big.text.find("\npending    " + min_size + "\n"), std::string::npos) << st_big.text;
  Out st_t4 = Aryl({"status", t4});
  EXPECT_NE(st_t4.text.find("\npending    " + gpu_type + "\n"), std::string::npos) << st_t4.text;
  Out described = Aryl({"describe", "job", t4});
  EXPECT_NE(described.text.find("\nPending:         " + gpu_type + "\n"), std::string::npos) << described.text;
  // A running job has no reason.
  EXPECT_EQ(reason(cpu_blocker), "");
  Out cancel = Aryl({"cancel", cpu_blocker, t4_blocker, big, t4});
  EXPECT_EQ(cancel.code, 0) << cancel.text;
}

// What a submitter chose (argv, env names) reaches the terminal escaped: no
// ESC, no C1, no bidirectional control; a name with one is refused at submit.
TEST_F(CliTest, StatusEscapesWhatTheSubmitterChose) {
  WaitForAgent();
  Out bidi = Aryl({"submit", "--name", "evil\xe2\x80\xaetxt.exe", "--workers", "1", "--", "true"});
  EXPECT_NE(bidi.code, 0) << bidi.text;
  EXPECT_NE(bidi.text.find("U+202E"), std::string::npos) << bidi.text;
  Out sub = Aryl({"submit", "--workers", "1", "--env", "X\x1b]0;pwned\x07=1", "--", "sh", "-c", "sleep 30",
                  "\x1b[2J\xc2\x9b" "31m", "a\xe2\x80\xae" "b"});
  ASSERT_EQ(sub.code, 0) << sub.text;
  std::string id = sub.text.substr(0, sub.text.find('\n'));
  Out st = Aryl({"status", id});
  ASSERT_EQ(st.code, 0) << st.text;
  EXPECT_EQ(st.text.find('\x1b'), std::string::npos) << st.text;
  EXPECT_EQ(st.text.find("\xc2\x9b"), std::string::npos) << st.text;
  EXPECT_EQ(st.text.find("\xe2\x80\xae"), std::string::npos) << st.text;
  EXPECT_NE(st.text.find("\\x1b[2J\\u009b31m a\\u202eb"), std::string::npos) << st.text;
  EXPECT_NE(st.text.find("X\\x1b]0;pwned\\x07"), std::string::npos) << st.text;
  Out cancel = Aryl({"cancel", id});
  EXPECT_EQ(cancel.code, 0) << cancel.text;
}

// Without a scheduler the error says so and the exit code is 1, within the timeout.
TEST_F(CliTest, NoScheduler) {
  auto t0 = std::chrono::steady_clock::now();
  Out o = Aryl({"jobs", "--scheduler", "tcp://127.0.0.1:1", "--timeout", "0.5"}, false);
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("is aryl-scheduler running"), std::string::npos) << o.text;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 4.0);
}

// The client's flags may come before the command, as kubectl takes them.
TEST_F(CliTest, ClientFlagsBeforeTheCommand) {
  Out o = Aryl({"--scheduler", endpoint_, "--timeout=3", "jobs", "--all"}, false);
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_NE(o.text.find("JOB  NAME"), std::string::npos) << o.text;
  Out two = Aryl({"--scheduler=" + endpoint_, "nodes"}, false);
  EXPECT_EQ(two.code, 0) << two.text;
  Out nowhere = Aryl({"--scheduler", "tcp://127.0.0.1:1", "--timeout", "0.5", "jobs"}, false);
  EXPECT_EQ(nowhere.code, 1) << nowhere.text;
  EXPECT_NE(nowhere.text.find("tcp://127.0.0.1:1"), std::string::npos) << nowhere.text;
}

// keygen writes a 0600 secret key and refuses to overwrite it.
TEST_F(CliTest, Keygen) {
  fs::path keys = dir_ / "keys";
  Out o = Aryl({"keygen", keys.string(), "me"}, false);
  ASSERT_EQ(o.code, 0) << o.text;
  auto perms = fs::status(keys / "me.key").permissions();
  EXPECT_EQ(perms & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_TRUE(fs::exists(keys / "me.pub"));
  EXPECT_EQ(Aryl({"keygen", keys.string(), "me"}, false).code, 1);
}

// -o table|wide|json, --no-headers and --utc on a real job; a bad -o is a usage error.
TEST_F(CliTest, OutputFormats) {
  WaitForAgent();
  Out sub = Aryl({"submit", "--name", "fmt", "--workers", "1", "--", "sleep", "30"});
  ASSERT_EQ(sub.code, 0) << sub.text;
  std::string id = sub.text.substr(0, sub.text.find('\n'));
  Out table = Aryl({"jobs"});
  ASSERT_EQ(table.code, 0) << table.text;
  EXPECT_EQ(table.text.rfind("JOB  ", 0), 0u) << table.text;
  EXPECT_EQ(table.text.find("SUBMITTED"), std::string::npos) << table.text;
  Out wide = Aryl({"jobs", "-o", "wide"});
  ASSERT_EQ(wide.code, 0) << wide.text;
  EXPECT_NE(wide.text.find("GPU-TYPE"), std::string::npos) << wide.text;
  EXPECT_NE(wide.text.find("SUBMITTED"), std::string::npos) << wide.text;
  Out bare = Aryl({"jobs", "--no-headers"});
  ASSERT_EQ(bare.code, 0);
  EXPECT_EQ(bare.text.find("JOB"), std::string::npos) << bare.text;
  EXPECT_EQ(bare.text.rfind(id + " ", 0), 0u) << bare.text;
  Out js = Aryl({"jobs", "-o", "json"});
  ASSERT_EQ(js.code, 0);
  EXPECT_EQ(nlohmann::json::parse(js.text)["jobs"][0]["name"], "fmt");
  Out utc = Aryl({"status", id, "--utc"});
  ASSERT_EQ(utc.code, 0) << utc.text;
  EXPECT_NE(utc.text.find("Z ("), std::string::npos) << utc.text;
  Out local = Aryl({"status", id}, true, {{"TZ", "UTC+5"}});
  ASSERT_EQ(local.code, 0);
  EXPECT_EQ(local.text.find("Z ("), std::string::npos) << local.text;
  // csv: every column, the header first; name: the first column only.
  Out csv = Aryl({"jobs", "-o", "csv"});
  ASSERT_EQ(csv.code, 0) << csv.text;
  EXPECT_EQ(csv.text.rfind("JOB,NAME,OWNER,STATE,SIZE,GPU-TYPE,", 0), 0u) << csv.text;
  EXPECT_NE(csv.text.find("\n" + id + ",fmt,"), std::string::npos) << csv.text;
  Out names = Aryl({"jobs", "-o", "name"});
  ASSERT_EQ(names.code, 0) << names.text;
  EXPECT_EQ(names.text, id + "\n");
  // yaml: the same document as json, read back by a YAML parser.
  Out ys = Aryl({"status", id, "-o", "yaml"}), js1 = Aryl({"status", id, "-o", "json"});
  ASSERT_EQ(ys.code, 0) << ys.text;
  ASSERT_EQ(js1.code, 0) << js1.text;
  std::ofstream(dir_ / "status.yaml") << ys.text;
  std::ofstream(dir_ / "status.json") << js1.text;
  const std::string same = "/usr/bin/python3 -c \"import json, sys, yaml; "
                           "a = yaml.safe_load(open(sys.argv[1])); b = json.load(open(sys.argv[2])); "
                           "a['row'].pop('submit_time'); b['row'].pop('submit_time'); "
                           "sys.exit(0 if a == b else 1)\" " +
                           (dir_ / "status.yaml").string() + " " + (dir_ / "status.json").string();
  EXPECT_EQ(std::system(same.c_str()), 0) << ys.text << js1.text;
  Out bad = Aryl({"jobs", "-o", "xml"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.text.find("-o 'xml'"), std::string::npos) << bad.text;
  Out cancel = Aryl({"cancel", id});
  EXPECT_EQ(cancel.code, 0) << cancel.text;
}

// `aryl top` into a pipe or a file prints plain frames: no escape codes, no screen clearing.
TEST_F(CliTest, TopWithoutTtyIsPlainText) {
  agent::LaunchSpec s;
  s.env = {{"ARYL_CONFIG", "/dev/null"}};
  s.argv = {"timeout", "-s", "INT", "3", ARYL_BIN, "top", "--interval", "0.2", "--scheduler", endpoint_};
  s.stdout_path = (dir_ / "top.out").string();
  agent::ProcessLauncher l;
  ASSERT_TRUE(l.Launch(s).ok());
  for (int i = 0; i < 1000 && l.size() > 0; ++i) {
    l.Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream in(dir_ / "top.out");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  size_t frames = 0;
  for (size_t at = text.find("aryl top - "); at != std::string::npos; at = text.find("aryl top - ", at + 1)) ++frames;
  EXPECT_GE(frames, 2u) << text;
  EXPECT_EQ(text.find('\033'), std::string::npos) << text;
}

// The config file sets the endpoint; the environment beats it and a flag beats both.
TEST_F(CliTest, ConfigFileEnvAndFlagPrecedence) {
  fs::path cfg = dir_ / "client.toml";
  std::ofstream(cfg) << "# test config\nscheduler = \"" << endpoint_ << "\"\ntimeout = 2\n";
  Out from_file = Aryl({"nodes"}, false, {{"ARYL_CONFIG", cfg.string()}});
  EXPECT_EQ(from_file.code, 0) << from_file.text;
  Out env_wins = Aryl({"nodes", "--timeout", "0.3"}, false,
                      {{"ARYL_CONFIG", cfg.string()}, {"ARYL_SCHEDULER", "tcp://127.0.0.1:1"}});
  EXPECT_EQ(env_wins.code, 1) << env_wins.text;
  EXPECT_NE(env_wins.text.find("tcp://127.0.0.1:1"), std::string::npos) << env_wins.text;
  Out flag_wins = Aryl({"nodes", "--scheduler", endpoint_}, false,
                       {{"ARYL_CONFIG", cfg.string()}, {"ARYL_SCHEDULER", "tcp://127.0.0.1:1"}});
  EXPECT_EQ(flag_wins.code, 0) << flag_wins.text;
  // ~/.config/aryl/config is read when $ARYL_CONFIG is not set.
  fs::path home = dir_ / "home";
  fs::create_directories(home / ".config" / "aryl");
  fs::copy_file(cfg, home / ".config" / "aryl" / "config", fs::copy_options::overwrite_existing);
  Out from_home = Aryl({"nodes"}, false, {{"ARYL_CONFIG", ""}, {"HOME", home.string()}, {"XDG_CONFIG_HOME", ""}});
  EXPECT_EQ(from_home.code, 0) << from_home.text;
  // A bad line is a usage error naming file:line.
  std::ofstream(cfg) << "scheduler = \"" << endpoint_ << "\"\nendpoint: nowhere\n";
  Out bad = Aryl({"nodes"}, false, {{"ARYL_CONFIG", cfg.string()}});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.text.find(cfg.string() + ":2: "), std::string::npos) << bad.text;
}

}  // namespace
}  // namespace aryl
