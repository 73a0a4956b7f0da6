// aryl: the operator's command line.
//   aryl submit [--name N] (--workers N | --min A --max B) [--gpu-type T] -- CMD ARGS...
//   aryl jobs [--all] | status JOB | cancel JOB | nodes
//   aryl pool offer SERVER... | pool reclaim (K | --servers S,...) [--deadline 120s]
//   aryl keygen DIR NAME | top [--interval 1] [--once]
// Human tables by default; --json prints the reply as JSON for scripts.
#include <csignal>
#include <ctime>
#include <iostream>
#include <thread>

#include "aryl/flags.h"
#include "client_util.h"

namespace p = aryl::protocol;
using aryl::cli::Fixed;
using aryl::cli::Table;
using std::chrono::milliseconds;

namespace {

std::atomic<bool> g_stop{false};

void Usage() {
  std::cout << "usage: aryl COMMAND [flags]\n"
               "  submit [--name N] (--workers N | --min A --max B) [--gpu-type T] [--checkpoint-dir D] -- CMD ARGS...\n"
               "  jobs [--all]            list jobs (--all: finished ones too)\n"
               "  status JOB              one job: state, size, placement, exit code\n"
               "  cancel JOB              cancel a job\n"
               "  nodes                   agents: pool, loan state, slots in use\n"
               "  nodes drain|resume|remove NAME  take a node out of service, back, or forget it\n"
               "  pool offer SERVER...    lend idle inference servers to training\n"
               "  pool reclaim K [--deadline 120s] | pool reclaim --servers A,B\n"
               "  keygen DIR NAME         write a CURVE key pair DIR/NAME.key (0600) and DIR/NAME.pub\n"
               "  top [--interval S]      live view of pools, loans, jobs, sizes and step rates\n"
               "common flags: --scheduler EP ($ARYL_SCHEDULER), --json, --timeout S,\n"
               "  --curve-key FILE ($ARYL_CURVE_KEY), --curve-server-key FILE ($ARYL_CURVE_SERVER_KEY)\n"
               "run 'aryl COMMAND --help' for a command's flags\n";
}

// Parses "120", "120s", "2m", "1h" into seconds; -1 on error.
double ParseDuration(const std::string& s) {
  if (s.empty()) return -1;
  double mult = 1;
  std::string num = s;
  char last = s.back();
  if (last == 's' || last == 'm' || last == 'h') {
    mult = last == 'm' ? 60 : last == 'h' ? 3600 : 1;
    num = s.substr(0, s.size() - 1);
  }
  try {
    size_t pos = 0;
    double v = std::stod(num, &pos);
    if (pos != num.size() || v < 0) return -1;
    return v * mult;
  } catch (const std::exception&) {
    return -1;
  }
}

std::string Age(double since) {
  double d = std::max(0.0, static_cast<double>(std::time(nullptr)) - since);
  if (d < 120) return Fixed(d, 0) + "s";
  if (d < 7200) return Fixed(d / 60, 0) + "m";
  return Fixed(d / 3600, 1) + "h";
}

struct Common {
  std::string scheduler;
  bool json = false;
  double timeout = 3;
  std::string curve_key, curve_server_key;
};

void AddCommon(cxxopts::Options& o) {
  o.add_options("common")
      ("scheduler", "Scheduler endpoint", cxxopts::value<std::string>()->default_value(aryl::cli::DefaultScheduler()))
      ("json", "Print JSON instead of a table")
      ("timeout", "Seconds to wait for the scheduler", cxxopts::value<double>()->default_value("3"))
      ("curve-key", "Client CURVE secret key file", cxxopts::value<std::string>()->default_value(aryl::cli::EnvOr("ARYL_CURVE_KEY", "")))
      ("curve-server-key", "Scheduler CURVE public key file",
       cxxopts::value<std::string>()->default_value(aryl::cli::EnvOr("ARYL_CURVE_SERVER_KEY", "")));
  aryl::AddCommonFlags(o);
}

Common ReadCommon(const cxxopts::ParseResult& r) {
  Common c;
  c.scheduler = r["scheduler"].as<std::string>();
  c.json = r.count("json") > 0;
  c.timeout = r["timeout"].as<double>();
  c.curve_key = r["curve-key"].as<std::string>();
  c.curve_server_key = r["curve-server-key"].as<std::string>();
  return c;
}

// One request/reply; prints an error and returns nullopt on failure.
template <typename T>
aryl::Result<T> Call(const std::string& prog, const Common& c, const p::Message& req) {
  auto client = aryl::cli::ConnectScheduler(c.scheduler, c.curve_key, c.curve_server_key);
  if (!client.ok()) return client.status();
  return (*client)->Call<T>(req, milliseconds(static_cast<int>(c.timeout * 1000)));
}

uint64_t ParseJobId(const std::string& prog, const std::string& s) {
  try {
    size_t pos = 0;
    unsigned long long v = std::stoull(s, &pos);
    if (pos == s.size()) return v;
  } catch (const std::exception&) {
  }
  aryl::UsageError(prog, "'" + s + "' is not a job id");
}

int CmdSubmit(int argc, char** argv) {
  const std::string prog = "aryl submit";
  cxxopts::Options o(prog, "Submit a job and print its id.");
  o.add_options()
      ("name", "Job name", cxxopts::value<std::string>()->default_value(""))
      ("workers", "Fixed size (inelastic)", cxxopts::value<int>())
      ("min", "Elastic: fewest workers", cxxopts::value<int>())
      ("max", "Elastic: most workers", cxxopts::value<int>())
      ("gpu-type", "GPU type (default: any)", cxxopts::value<std::string>()->default_value(""))
      ("checkpoint-dir", "Checkpoint directory", cxxopts::value<std::string>()->default_value(""))
      ("model", "Throughput-table model name", cxxopts::value<std::string>()->default_value(""))
      ("steps", "Total steps, for shortest-job-first (0: unknown)", cxxopts::value<double>()->default_value("0"))
      ("env", "KEY=VALUE for the workers (repeatable)", cxxopts::value<std::vector<std::string>>());
  AddCommon(o);
  o.positional_help("-- CMD ARGS...");
  auto r = aryl::ParseFlagsOrExit(o, argc, argv);
  Common c = ReadCommon(r);
  p::SubmitJob m;
  m.name = r["name"].as<std::string>();
  if (r.count("workers")) m.workers = r["workers"].as<int>();
  if (r.count("min")) m.min_workers = r["min"].as<int>();
  if (r.count("max")) m.max_workers = r["max"].as<int>();
  m.gpu_type = r["gpu-type"].as<std::string>();
  m.checkpoint_dir = r["checkpoint-dir"].as<std::string>();
  m.model = r["model"].as<std::string>();
  m.total_work = r["steps"].as<double>();
  if (r.count("env")) {
    for (const auto& kv : r["env"].as<std::vector<std::string>>()) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) aryl::UsageError(prog, "--env '" + kv + "': expected KEY=VALUE");
      m.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  for (const auto& a : r.unmatched()) m.argv.push_back(a);
  if (m.argv.empty()) aryl::UsageError(prog, "missing the command to run (after --)");
  aryl::Status v = m.Validate();
  if (!v.ok()) aryl::UsageError(prog, v.message());
  // Resent with the same token after a timeout: at most one job is created.
  m.client_token = aryl::cli::NewClientToken();
  auto reply = Call<p::SubmitReply>(prog, c, m);
  for (int retry = 0; retry < 2 && !reply.ok() && reply.status().IsTimeout(); ++retry)
    reply = Call<p::SubmitReply>(prog, c, m);
  if (!reply.ok()) return aryl::cli::Fail(prog, reply.status());
  if (c.json) std::cout << p::ToJson(*reply).dump() << "\n";
  else std::cout << reply->job << "\n";
  return 0;
}

std::string Size(const p::JobRow& r) {
  std::string range = r.min_workers == r.max_workers ? std::to_string(r.min_workers)
                                                     : std::to_string(r.min_workers) + "-" + std::to_string(r.max_workers);
  return std::to_string(r.workers) + "/" + range;
}

std::string JobsTable(const std::vector<p::JobRow>& rows) {
  Table t({"JOB", "NAME", "OWNER", "STATE", "SIZE", "GEN", "STEP", "STEPS/S", "RESCALES", "AGE"});
  for (const auto& r : rows) {
    t.Add({std::to_string(r.job), r.name, r.owner, std::string(p::ToString(r.state)), Size(r), std::to_string(r.generation),
           std::to_string(r.step), Fixed(r.steps_per_second), std::to_string(r.rescales), Age(r.submit_time)});
  }
  return t.Render();
}

int CmdJobs(int argc, char** argv) {
  const std::string prog = "aryl jobs";
  cxxopts::Options o(prog, "List jobs.");
  o.add_options()("all", "Include finished, failed and cancelled jobs");
  AddCommon(o);
  auto r = aryl::ParseFlagsOrExit(o, argc, argv);
  Common c = ReadCommon(r);
  p::ListJobs m;
  m.include_finished = r.count("all") > 0;
  // Page by page (each reply well under the frame limit), into one listing.
  p::JobsReply all;
  while (true) {
    auto reply = Call<p::JobsReply>(prog, c, m);
    if (!reply.ok()) return aryl::cli::Fail(prog, reply.status());
    all.jobs.insert(all.jobs.end(), reply->jobs.begin(), reply->jobs.end());
    if (!reply->more || reply->jobs.empty()) break;
    m.after = reply->jobs.back().job;
  }
  if (c.json) std::cout << p::ToJson(all).dump(2) << "\n";
  else std::cout << JobsTable(all.jobs);
  return 0;
}

int CmdStatus(int argc, char** argv) {
  const std::string prog = "aryl status";
  cxxopts::Options o(prog, "Show one job.");
  o.add_options()("job", "Job id", cxxopts::value<std::string>());
  o.parse_positional({"job"});
  AddCommon(o);
  auto r = aryl::ParseFlagsOrExit(o, argc, argv);
  if (!r.count("job")) aryl::UsageError(prog, "missing JOB");
  Common c = ReadCommon(r);
  p::JobStatus m;
  m.job = ParseJobId(prog, r["job"].as<std::string>());
  auto reply = Call<p::JobStatusReply>(prog, c, m);
  if (!reply.ok()) return aryl::cli::Fail(prog, reply.status());
  if (c.json) {
    std::cout << p::ToJson(*reply).dump(2) << "\n";
    return 0;
  }
  const auto& row = reply->row;
  std::cout << "job        " << row.job << " (" << row.name << ")\n"
            << "state      " << p::ToString(row.state) << "\n"
            << "size       " << Size(row) << (row.gpu_type.empty() ? "" : " on " + row.gpu_type) << "\n"
            << "generation " << row.generation << ", " << row.rescales << " rescales\n"
            << "progress   step " << row.step << ", " << Fixed(row.steps_per_second) << " steps/s\n";
  std::string placement;
  for (const auto& pr : reply->placement) placement += (placement.empty() ? "" : ", ") + pr.agent_id + ":" + std::to_string(pr.workers);
  std::cout << "placement  " << (placement.empty() ? "-" : placement) << "\n";
  std::string cmd;
  for (const auto& a : reply->argv) cmd += (cmd.empty() ? "" : " ") + a;
  std::cout << "command    " << cmd << "\n";
  std::string env;  // names only: the values may be secrets
  for (const auto& n : reply->env_names) env += (env.empty() ? "" : ", ") + n;
  std::cout << "owner      " << row.owner << "\n"
            << "env        " << (env.empty() ? "-" : env) << "\n";
  if (reply->exit_code) std::cout << "exit code  " << *reply->exit_code << "\n";
  if (!reply->message.empty()) std::cout << "message    " << reply->message << "\n";
  return 0;
}

int CmdCancel(int argc, char** argv) {
  const std::string prog = "aryl cancel";
  cxxopts::Options o(prog, "Cancel a job.");
  o.add_options()("job", "Job id", cxxopts::value<std::string>());
  o.parse_positional({"job"});
  AddCommon(o);
  auto r = aryl::ParseFlagsOrExit(o, argc, argv);
  if (!r.count("job")) aryl::UsageError(prog, "missing JOB");
  Common c = ReadCommon(r);
  p::CancelJob m;
  m.job = ParseJobId(prog, r["job"].as<std::string>());
  auto reply = Call<p::Ok>(prog, c, m);
  if (!reply.ok()) return aryl::cli::Fail(prog, reply.status());
  if (c.json) std::cout << p::ToJson(*reply).dump() << "\n";
  else std::cout << reply->message << "\n";
  return 0;
}

std::string NodesTable(const std::vector<p::NodeRow>& nodes) {
  Table t({"AGENT", "HOST", "POOL", "STATE", "GPU", "USED/SLOTS", "HEARTBEAT"});
  for (const auto& n : nodes) {
    t.Add({n.agent_id, n.host, std::string(p::ToString(n.pool)), std::string(p::ToString(n.state)), n.gpu_type,
           std::to_string(n.used_slots) + "/" + std::to_string(n.slots),
           n.connected ? Fixed(n.last_heartbeat_age, 1) + "s ago" : "-"});
  }
  return t.Render();
}

int CmdNodes(int argc, char** argv) {
  const std::string prog = "aryl nodes";
  cxxopts::Options o(prog, "List agents, or: nodes drain|resume|remove NAME.");
  o.add_options()("action", "drain | resume | remove", cxxopts::value<std::string>())(
      "node", "agent id", cxxopts::value<std::string>());
  o.parse_positional({"action", "node"});
  AddCommon(o);
  auto r = aryl::ParseFlagsOrExit(o, argc, argv);
  Common c = ReadCommon(r);
  if (r.count("action")) {
    p::NodeCommand cmd;
    cmd.action = r["action"].as<std::string>();
    if (!r.count("node")) aryl::UsageError(prog, "missing NAME after '" + cmd.action + "'");
    cmd.node = r["node"].as<std::string>();
    aryl::Status v = cmd.Validate();
    if (!v.ok()) aryl::UsageError(prog, v.message());
    auto ok = Call<p::Ok>(prog, c, cmd);
    if (!ok.ok()) return aryl::cli::Fail(prog, ok.status());
    std::cout << ok->message << "\n";
    return 0;
  }
  auto reply = Call<p::NodesReply>(prog, c, p::ListNodes{});
  if (!reply.ok()) return aryl::cli::Fail(prog, reply.status());
  if (c.json) std::cout << p::ToJson(*reply).dump(2) << "\n";
  else std::cout << NodesTable(reply->nodes);
  return 0;
}

int CmdPool(int argc, char** argv) {
  const std::string prog = "aryl pool";
  if (argc < 2 || (std::string(argv[1]) != "offer" && std::string(argv[1]) != "reclaim")) {
    if (argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
      std::cout << "usage: aryl pool offer SERVER... | aryl pool reclaim K [--deadline 120s] | --servers A,B\n";
      return 0;
    }
    aryl::UsageError(prog, "expected 'offer' or 'reclaim'");
  }
  std::string sub = argv[1];
  cxxopts::Options o(prog + " " + sub, sub == "offer" ? "Lend inference servers to training." :
                                                        "Take K loaned servers (or the named ones) back by a deadline.");
  o.add_options()("args", "Servers (offer) or K (reclaim)", cxxopts::value<std::vector<std::string>>());
  if (sub == "reclaim") {
    o.add_options()
        ("deadline", "Deadline: 120, 120s, 2m", cxxopts::value<std::string>()->default_value("120s"))
        ("servers", "Exactly these servers (comma-separated)", cxxopts::value<std::vector<std::string>>());
  }
  o.parse_positional({"args"});
  AddCommon(o);
  auto r = aryl::ParseFlagsOrExit(o, argc - 1, argv + 1);
  Common c = ReadCommon(r);
  std::vector<std::string> args = r.count("args") ? r["args"].as<std::vector<std::string>>() : std::vector<std::string>{};
  aryl::Result<p::Ok> reply = aryl::Status::Internal("unset");
  if (sub == "offer") {
    if (args.empty()) aryl::UsageError(prog + " offer", "name at least one server");
    p::PoolOffer m;
    m.servers = args;
    reply = Call<p::Ok>(prog, c, m);
  } else {
    p::PoolReclaim m;
    double d = ParseDuration(r["deadline"].as<std::string>());
    if (d < 0) aryl::UsageError(prog + " reclaim", "--deadline '" + r["deadline"].as<std::string>() + "' is not a duration");
    m.deadline_seconds = d;
    if (r.count("servers")) m.servers = r["servers"].as<std::vector<std::string>>();
    if (!args.empty()) {
      if (args.size() != 1) aryl::UsageError(prog + " reclaim", "expected one count K");
      try {
        m.count = std::stoll(args[0]);
      } catch (const std::exception&) {
        aryl::UsageError(prog + " reclaim", "'" + args[0] + "' is not a count");
      }
    }
    aryl::Status v = m.Validate();
    if (!v.ok()) aryl::UsageError(prog + " reclaim", v.message());
    reply = Call<p::Ok>(prog, c, m);
  }
  if (!reply.ok()) return aryl::cli::Fail(prog, reply.status());
  if (c.json) std::cout << p::ToJson(*reply).dump() << "\n";
  else std::cout << reply->message << "\n";
  return 0;
}

int CmdKeygen(int argc, char** argv) {
  const std::string prog = "aryl keygen";
  cxxopts::Options o(prog, "Write a CURVE key pair: DIR/NAME.key (secret, 0600) and DIR/NAME.pub.");
  o.add_options()("args", "DIR NAME", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"args"});
  aryl::AddCommonFlags(o);
  auto r = aryl::ParseFlagsOrExit(o, argc, argv);
  auto args = r.count("args") ? r["args"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (args.size() != 2) aryl::UsageError(prog, "expected DIR NAME");
  aryl::Status st = p::GenerateKeyPair(args[0], args[1]);
  if (!st.ok()) return aryl::cli::Fail(prog, st);
  std::cout << args[0] << "/" << args[1] << ".key\n" << args[0] << "/" << args[1] << ".pub\n";
  return 0;
}

int CmdTop(int argc, char** argv) {
  const std::string prog = "aryl top";
  cxxopts::Options o(prog, "Live view of pools, loans, jobs, sizes and step rates (Ctrl-C to quit).");
  o.add_options()
      ("interval", "Refresh every S seconds", cxxopts::value<double>()->default_value("1"))
      ("once", "Print one frame and exit");
  AddCommon(o);
  auto r = aryl::ParseFlagsOrExit(o, argc, argv);
  Common c = ReadCommon(r);
  double interval = std::max(0.1, r["interval"].as<double>());
  bool once = r.count("once") > 0;
  auto client = aryl::cli::ConnectScheduler(c.scheduler, c.curve_key, c.curve_server_key);
  if (!client.ok()) return aryl::cli::Fail(prog, client.status());
  std::signal(SIGINT, [](int) { g_stop = true; });
  auto timeout = milliseconds(static_cast<int>(c.timeout * 1000));
  while (!g_stop) {
    auto status = (*client)->Call<p::StatusReply>(p::StatusRequest{}, timeout);
    auto nodes = (*client)->Call<p::NodesReply>(p::ListNodes{}, timeout);
    auto jobs = (*client)->Call<p::JobsReply>(p::ListJobs{}, timeout);
    std::ostringstream os;
    if (!once && !c.json) os << "\033[H\033[2J";
    if (!status.ok() || !nodes.ok() || !jobs.ok()) {
      os << "aryl top: scheduler " << c.scheduler << " not answering ("
         << (!status.ok() ? status.status() : !nodes.ok() ? nodes.status() : jobs.status()).ToString() << ")\n";
    } else if (c.json) {
      os << status->summary.dump() << "\n";
    } else {
      const auto& s = status->summary;
      os << "aryl top — " << c.scheduler << "  policy " << s.value("policy", "?") << "  rescales "
         << s.value("rescales", 0.0) << "  preemptions " << s.value("preemptions", 0.0) << "  reclaims "
         << s.value("reclaims", 0.0) << " (late " << s.value("reclaims_late", 0.0) << ")\n\n";
      Table pools({"POOL", "SERVERS", "LOANED", "USED/SLOTS"});
      const nlohmann::json pool_map = s.value("pools", nlohmann::json::object());
      for (auto& [name, pj] : pool_map.items()) {
        pools.Add({name, std::to_string(pj.value("servers", 0)), std::to_string(pj.value("loaned_servers", 0)),
                   std::to_string(pj.value("used_slots", 0)) + "/" + std::to_string(pj.value("slots", 0))});
      }
      os << pools.Render() << "\n" << NodesTable(nodes->nodes) << "\n" << JobsTable(jobs->jobs);
      auto rounds = s.value("rounds", nlohmann::json::object());
      os << "\nscheduling rounds: " << rounds.value("count", 0) << ", max "
         << Fixed(rounds.value("max_seconds", 0.0) * 1000, 2) << " ms\n";
    }
    std::cout << os.str() << std::flush;
    if (once) return status.ok() ? 0 : 1;
    for (double t = 0; t < interval && !g_stop; t += 0.1) std::this_thread::sleep_for(milliseconds(100));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  if (argc < 2) {
    Usage();
    return 2;
  }
  std::string cmd = argv[1];
  int sub_argc = argc - 1;
  char** sub_argv = argv + 1;
  if (cmd == "submit") return CmdSubmit(sub_argc, sub_argv);
  if (cmd == "jobs") return CmdJobs(sub_argc, sub_argv);
  if (cmd == "status") return CmdStatus(sub_argc, sub_argv);
  if (cmd == "cancel") return CmdCancel(sub_argc, sub_argv);
  if (cmd == "nodes") return CmdNodes(sub_argc, sub_argv);
  if (cmd == "pool") return CmdPool(sub_argc, sub_argv);
  if (cmd == "keygen") return CmdKeygen(sub_argc, sub_argv);
  if (cmd == "top") return CmdTop(sub_argc, sub_argv);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    Usage();
    return 0;
  }
  std::cerr << "aryl: error: unknown command '" << cmd << "' (try aryl --help)\n";
  return 2;
}
