// aryl-agent: one per server; see agent.h and docs/operations.md.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "aryl/agent/agent.h"
#include "aryl/agent/gpu.h"
#include "aryl/flags.h"

namespace {
aryl::agent::Agent* g_agent = nullptr;
void OnSignal(int) {
  if (g_agent) g_agent->Stop();
}
}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("aryl-agent", "Aryl's agent: runs training workers on one server.");
  aryl::agent::AgentOptions a;
  options.add_options()
      ("scheduler", "Scheduler endpoint, or every scheduler of a highly available install as a comma list "
                    "(tcp://a:7117,tcp://b:7117; default: $ARYL_SCHEDULER or ipc:///run/aryl/scheduler.sock)",
       cxxopts::value<std::string>()->default_value(std::getenv("ARYL_SCHEDULER") ? std::getenv("ARYL_SCHEDULER") : a.scheduler))
      ("id", "Agent id (unique per server; default: host name)", cxxopts::value<std::string>()->default_value(""))
      ("host", "Address other servers reach this one at: its workers' Gloo pairs, its store, MASTER_ADDR (default: the address of the interface that routes to the scheduler)", cxxopts::value<std::string>()->default_value(""))
      ("store-port", "Port of this server's rendezvous store, the one port other servers' workers reach it on "
                     "(0: any free port; set it where a firewall lists ports)",
       cxxopts::value<int>()->default_value("0"))
      ("pool", "training or inference", cxxopts::value<std::string>()->default_value(a.pool))
      ("slots", "Worker slots; 0: one per GPU found via NVML/CUDA", cxxopts::value<int>()->default_value("0"))
      ("gpu-type", "GPU type for --slots (default: cpu)", cxxopts::value<std::string>()->default_value(""))
      ("log-dir", "Per-worker stdout/stderr files go here", cxxopts::value<std::string>()->default_value(a.log_dir))
      ("leave-timeout", "Stop a leaving worker still running after this many seconds",
       cxxopts::value<double>()->default_value("30"))
      ("curve-key", "This agent's CURVE secret key file", cxxopts::value<std::string>()->default_value(""))
      ("curve-server-key", "The scheduler's CURVE public key file", cxxopts::value<std::string>()->default_value(""))
      ("cluster-id", "Cluster id; must equal the scheduler's --cluster-id",
       cxxopts::value<std::string>()->default_value(a.cluster_id))
      ("env-deny", "Job env variables refused: comma list of NAME or PREFIX* (default: LD_*, PYTHONPATH, ...; "
                   "'none': refuse nothing)", cxxopts::value<std::string>()->default_value(""))
      ("env-allow", "Exceptions to --env-deny (comma list)", cxxopts::value<std::string>()->default_value(""))
      ("worker-env", "The agent's own variables workers inherit: comma list of NAME or PREFIX* (default: PATH, "
                     "locale, TMPDIR, LD_LIBRARY_PATH, PYTHONPATH, CUDA_*, NCCL_*, GLOO_*, ...; 'all': every one)",
       cxxopts::value<std::string>()->default_value(""))
      ("run-as", "As root: file of '<owner> <account>' lines; each job's workers run as its owner's account "
                 "('*' maps the rest; an unmapped owner's workers are refused)",
       cxxopts::value<std::string>()->default_value(""))
      ("serving-start", "Inference agents: the serving side's start command (sh -c). Without --serving-stop it is "
                        "the serving process itself, kept by the agent; with it, a command that returns "
                        "(systemctl start ...). Run when the server is not lent (docs/operations.md)",
       cxxopts::value<std::string>()->default_value(""))
      ("serving-stop", "The serving side's stop command, run before the server is lent (must exit 0)",
       cxxopts::value<std::string>()->default_value(""))
      ("serving-drain", "Run before the stop: out of the load balancer, finish in-flight requests (must exit 0)",
       cxxopts::value<std::string>()->default_value(""))
      ("serving-ready", "http://host:port/path that answers 2xx once the serving side takes traffic",
       cxxopts::value<std::string>()->default_value(""))
      ("serving-start-timeout", "Start plus readiness, seconds", cxxopts::value<double>()->default_value("600"))
      ("serving-drain-timeout", "Seconds", cxxopts::value<double>()->default_value("120"))
      ("serving-stop-timeout", "Seconds (a kept serving process: SIGTERM to SIGKILL)",
       cxxopts::value<double>()->default_value("60"))
      ("print-gpus", "Print the GPUs found and exit");
  aryl::AddCommonFlags(options);
  auto r = aryl::ParseFlagsOrExit(options, argc, argv);
  if (r.count("print-gpus")) {
    auto inv = aryl::agent::DiscoverGpus();
    if (!inv.ok()) {
      std::cout << inv.status().message() << "\n";
      return 1;
    }
    std::cout << inv->count << " x " << inv->type << " (" << inv->source << ")\n";
    for (const auto& n : inv->names) std::cout << "  " << n << "\n";
    return 0;
  }
  a.scheduler = r["scheduler"].as<std::string>();
  a.id = r["id"].as<std::string>();
  a.host = r["host"].as<std::string>();
  a.store_port = r["store-port"].as<int>();
  a.pool = r["pool"].as<std::string>();
  a.slots = r["slots"].as<int>();
  a.gpu_type = r["gpu-type"].as<std::string>();
  a.log_dir = r["log-dir"].as<std::string>();
  a.leave_timeout = r["leave-timeout"].as<double>();
  a.curve_key = r["curve-key"].as<std::string>();
  a.curve_server_key = r["curve-server-key"].as<std::string>();
  a.cluster_id = r["cluster-id"].as<std::string>();
  a.env_deny = r["env-deny"].as<std::string>();
  a.env_allow = r["env-allow"].as<std::string>();
  a.worker_env = r["worker-env"].as<std::string>();
  a.run_as = r["run-as"].as<std::string>();
  a.serving.start = r["serving-start"].as<std::string>();
  a.serving.stop = r["serving-stop"].as<std::string>();
  a.serving.drain = r["serving-drain"].as<std::string>();
  a.serving.ready_url = r["serving-ready"].as<std::string>();
  a.serving.start_timeout = r["serving-start-timeout"].as<double>();
  a.serving.drain_timeout = r["serving-drain-timeout"].as<double>();
  a.serving.stop_timeout = r["serving-stop-timeout"].as<double>();
  for (auto [flag, v] : {std::pair{"--serving-start-timeout", a.serving.start_timeout},
                         std::pair{"--serving-drain-timeout", a.serving.drain_timeout},
                         std::pair{"--serving-stop-timeout", a.serving.stop_timeout}})
    if (!(v > 0)) aryl::UsageError("aryl-agent", std::string(flag) + " must be > 0");
  if (a.slots < 0) aryl::UsageError("aryl-agent", "--slots must be >= 0");
  if (a.store_port < 0 || a.store_port > 65535) aryl::UsageError("aryl-agent", "--store-port must be in [0, 65535]");
  auto agent = aryl::agent::Agent::Create(a);
  if (!agent.ok()) {
    std::cerr << "aryl-agent: error: " << agent.status().ToString() << "\n";
    return aryl::StartupExitCode(agent.status());  // 2: fix the configuration (the unit does not restart)
  }
  g_agent = agent->get();
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  aryl::Status st = (*agent)->Run();
  return st.ok() ? 0 : 1;
}
