// aryl-scheduler: the live scheduler daemon (see daemon.h and docs/operations.md).
#include <csignal>
#include <atomic>
#include <iostream>

#include <spdlog/spdlog.h>

#include "aryl/daemon/daemon.h"
#include "aryl/daemon/demand_control.h"
#include "aryl/daemon/ha.h"
#include "aryl/flags.h"
#include "aryl/port_range.h"
#include "aryl/sched/policy.h"
#include "aryl/sched/scheduler.h"

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }
}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("aryl-scheduler", "Aryl's scheduler daemon: one per cluster, on the head node.");
  aryl::daemon::DaemonOptions d;
  options.add_options()
      ("endpoint", "ZeroMQ endpoint for agents and clients", cxxopts::value<std::string>()->default_value(d.endpoint))
      ("state", "Where the state lives: a SQLite file (WAL), or etcd://H1:2379,H2:2379,H3:2379/PREFIX shared with "
                "standby schedulers, one of which leads (docs/operations.md, \"High availability\")",
       cxxopts::value<std::string>()->default_value(d.state_path))
      ("advertise", "With etcd state: the endpoint clients and agents reach this scheduler at, which standbys "
                    "tell them (default: --endpoint)", cxxopts::value<std::string>()->default_value(""))
      ("lease-ttl", "With etcd state: seconds of the leader's etcd lease; a dead leader is replaced after about "
                    "this long", cxxopts::value<int>()->default_value("3"))
      ("etcd-timeout", "With etcd state: seconds per etcd request", cxxopts::value<double>()->default_value("2"))
      ("etcd-ca", "With etcd state over https://: the CA file that signed etcd's certificates",
       cxxopts::value<std::string>()->default_value(""))
      ("etcd-cert", "With etcd state: this scheduler's TLS client certificate", cxxopts::value<std::string>()->default_value(""))
      ("etcd-key", "With etcd state: the key of --etcd-cert", cxxopts::value<std::string>()->default_value(""))
      ("http-port", "Port for Prometheus /metrics and JSON /status (-1: off, 0: any)",
       cxxopts::value<int>()->default_value("9117"))
      ("http-address", "Address the HTTP endpoint binds", cxxopts::value<std::string>()->default_value(d.http_address))
      ("policy", "Scheduling policy (aryl, baseline, loan-only, elastic-only, optimus, afs, tiresias)",
       cxxopts::value<std::string>()->default_value(d.policy))
      ("heartbeat", "Agent heartbeat interval (s)", cxxopts::value<double>()->default_value("0.5"))
      ("agent-timeout", "An agent silent this long has failed (s)", cxxopts::value<double>()->default_value("3"))
      ("agent-lease", "Agents stop their workers after this long without word from the scheduler; a lost agent's "
                      "jobs start elsewhere only once its lease has run out (s)",
       cxxopts::value<double>()->default_value("60"))
      ("rescale-pause", "Cost model: pause of one in-place rescale (s)", cxxopts::value<double>()->default_value("2"))
      ("restart-pause", "Cost model: pause of a restart after preemption, and of a restart job's rescale (s)", cxxopts::value<double>()->default_value("5"))
      ("checkpoint-interval", "Cost model: jobs checkpoint this often (s)", cxxopts::value<double>()->default_value("60"))
      ("resize-horizon", "Resize rule: a grow is made only when its gain over this many seconds (at most the job's "
                         "remaining time) beats its measured pause plus --resize-margin (s)",
       cxxopts::value<double>()->default_value(fmt::format("{}", d.resize_horizon)))
      ("resize-dwell", "Resize rule: a job keeps its size this long after a resize unless a reclaim, failure or "
                       "queued job forces a change (s)",
       cxxopts::value<double>()->default_value(fmt::format("{}", d.resize_dwell)))
      ("resize-margin", "Resize rule: seconds of progress a grow must gain on top of its pause (s)",
       cxxopts::value<double>()->default_value(fmt::format("{}", d.resize_margin)))
      ("stop-grace", "SIGTERM to SIGKILL grace when stopping workers (s); a job may ask for its own", cxxopts::value<double>()->default_value("10"))
      ("queues", "Teams: a CSV of queues with GPU quotas (queue,quota_gpus,weight,gpu_type[,users,cohort,"
                 "borrow_limit,lend_limit]); jobs name theirs with --queue",
       cxxopts::value<std::string>()->default_value(""))
      ("quota-min-runtime", "Teams: a job is not preempted to give quota back within this long of its start (s)",
       cxxopts::value<double>()->default_value(fmt::format("{}", d.quota_min_runtime)))
      ("quota-reclaim-deadline", "Teams: a queue under its quota gets its GPUs back within this long of its job's "
                                 "queueing, the minimum runtime notwithstanding (s)",
       cxxopts::value<double>()->default_value(fmt::format("{}", d.quota_reclaim_deadline)))
      ("serving-warmup", "Warm-up assumed for an inference server's serving side before one is measured (s)",
       cxxopts::value<double>()->default_value("30"))
      ("serving-hook", "Command (sh -c, 10 s at most) run on each loan start, serving side ready after a reclaim "
                       "and serving-side failure, with ARYL_EVENT, ARYL_NODE, ARYL_DETAIL",
       cxxopts::value<std::string>()->default_value(""))
      ("max-stop-grace", "The most grace a job may ask for (aryl submit --stop-grace) (s)", cxxopts::value<double>()->default_value("600"))
      ("throughput-dir", "Measured throughput tables (<dir>/<TYPE>/<model>.csv)", cxxopts::value<std::string>()->default_value(""))
      ("speed", "Jobs' speed: learned (fitted from the step times they report; docs/scheduler.md) or linear "
       "(throughput = workers on every GPU type, for comparison)", cxxopts::value<std::string>()->default_value("learned"))
      ("port-range", "Ports jobs listen on (LO-HI): each start's MASTER_PORT, for torchrun's TCPStore and the "
                     "runtime's job store; keep it out of net.ipv4.ip_local_port_range",
       cxxopts::value<std::string>()->default_value(d.port_range))
      ("status-max-jobs", "/status lists at most this many live jobs (with jobs_total and jobs_truncated; 0: all)",
       cxxopts::value<int>()->default_value(std::to_string(d.status_max_jobs)))
      ("max-jobs-per-user", "A user's queued and running jobs at most (operators: no limit; 0: none)",
       cxxopts::value<int>()->default_value(std::to_string(d.max_jobs_per_user)))
      ("submit-rate-per-user", "A user's submissions a second, sustained (operators: no limit; 0: none)",
       cxxopts::value<double>()->default_value(fmt::format("{}", d.submit_rate_per_user)))
      ("submit-burst-per-user", "A user's submissions at once, beyond the rate",
       cxxopts::value<int>()->default_value(std::to_string(d.submit_burst_per_user)))
      ("inference-demand", "Inference demand: a curve to replay, FILE (time_s,servers) or daily:peak=..,trough=.., "
                           "or prometheus:http://HOST:PORT?query=PROMQL (docs/operations.md)",
       cxxopts::value<std::string>()->default_value(""))
      ("demand-time-scale", "Demand-curve seconds per wall second (1440: a day per minute)",
       cxxopts::value<double>()->default_value("1"))
      ("demand-reclaim-deadline", "Seconds a reclaim decided by the demand source allows",
       cxxopts::value<double>()->default_value("10"))
      ("reclaim-lets-jobs-finish", "Leave a job that finishes before a reclaim's deadline to finish on the "
       "reclaimed server (it returns when it empties); false: empty every reclaimed server at once",
       cxxopts::value<bool>()->default_value("true"))
      ("demand-step", "prometheus source: seconds between queries", cxxopts::value<double>()->default_value("5"))
      ("demand-per-server", "prometheus source: load one inference server carries (servers = ceil(load / this))",
       cxxopts::value<double>()->default_value("1"))
      ("demand-headroom", "prometheus source: servers kept beyond the load", cxxopts::value<int>()->default_value("0"))
      ("demand-hysteresis", "prometheus source: servers are offered only when the load fits the rest with this "
                            "fraction of them to spare, in [0, 1)",
       cxxopts::value<double>()->default_value("0.2"))
      ("demand-hold", "prometheus source: seconds a lower demand must last before servers are offered",
       cxxopts::value<double>()->default_value("30"))
      ("curve-key", "The scheduler's CURVE secret key file (aryl keygen); enables CURVE",
       cxxopts::value<std::string>()->default_value(""))
      ("curve-allow", "Older single allow-list giving every key every role, agent ids not bound; refused without --insecure: "
                      "a directory of .pub files or a file of keys",
       cxxopts::value<std::string>()->default_value(""))
      ("curve-agents", "Agent keys: a directory of NAME.pub (NAME = the agent id) or a file of 'NAME KEY' lines",
       cxxopts::value<std::string>()->default_value(""))
      ("curve-users", "User keys (submit and manage their own jobs), as --curve-agents",
       cxxopts::value<std::string>()->default_value(""))
      ("curve-operators", "Operator keys (every job, pool offer/reclaim), as --curve-agents",
       cxxopts::value<std::string>()->default_value(""))
      ("insecure", "Allow a non-loopback --endpoint without CURVE (anyone who reaches it can run commands on agents)")
      ("journal-snapshot-rows", "Snapshot the core and truncate its journal every N rows (0: never)",
       cxxopts::value<int>()->default_value(fmt::format("{}", d.journal_snapshot_rows)))
      ("cluster-id", "Cluster id agents must register with", cxxopts::value<std::string>()->default_value(d.cluster_id))
      ("env-deny", "Job env variables refused at submit: comma list of NAME or PREFIX* (default: LD_*, PYTHONPATH, ...; "
                   "'none': refuse nothing). Agents apply their own --env-deny too.",
       cxxopts::value<std::string>()->default_value(""))
      ("env-allow", "Exceptions to --env-deny (comma list)", cxxopts::value<std::string>()->default_value(""));
  aryl::AddCommonFlags(options);
  auto r = aryl::ParseFlagsOrExit(options, argc, argv);
  d.endpoint = r["endpoint"].as<std::string>();
  d.state_path = r["state"].as<std::string>();
  d.http_port = r["http-port"].as<int>();
  d.http_address = r["http-address"].as<std::string>();
  d.policy = r["policy"].as<std::string>();
  d.heartbeat_interval = r["heartbeat"].as<double>();
  d.agent_timeout = r["agent-timeout"].as<double>();
  d.agent_lease = r["agent-lease"].as<double>();
  d.rescale_pause = r["rescale-pause"].as<double>();
  d.restart_pause = r["restart-pause"].as<double>();
  d.checkpoint_interval = r["checkpoint-interval"].as<double>();
  d.resize_horizon = r["resize-horizon"].as<double>();
  d.resize_dwell = r["resize-dwell"].as<double>();
  d.resize_margin = r["resize-margin"].as<double>();
  d.stop_grace = r["stop-grace"].as<double>();
  d.queues_file = r["queues"].as<std::string>();
  d.quota_min_runtime = r["quota-min-runtime"].as<double>();
  d.quota_reclaim_deadline = r["quota-reclaim-deadline"].as<double>();
  d.max_stop_grace = r["max-stop-grace"].as<double>();
  d.serving_warmup = r["serving-warmup"].as<double>();
  d.serving_hook = r["serving-hook"].as<std::string>();
  d.throughput_dir = r["throughput-dir"].as<std::string>();
  d.speed = r["speed"].as<std::string>();
  d.port_range = r["port-range"].as<std::string>();
  d.max_jobs_per_user = r["max-jobs-per-user"].as<int>();
  d.status_max_jobs = r["status-max-jobs"].as<int>();
  d.submit_rate_per_user = r["submit-rate-per-user"].as<double>();
  d.submit_burst_per_user = r["submit-burst-per-user"].as<int>();
  d.inference_demand = r["inference-demand"].as<std::string>();
  d.demand_time_scale = r["demand-time-scale"].as<double>();
  d.demand_reclaim_deadline = r["demand-reclaim-deadline"].as<double>();
  d.reclaim_lets_jobs_finish = r["reclaim-lets-jobs-finish"].as<bool>();
  d.demand_step = r["demand-step"].as<double>();
  d.demand_per_server = r["demand-per-server"].as<double>();
  d.demand_headroom = r["demand-headroom"].as<int>();
  d.demand_hysteresis = r["demand-hysteresis"].as<double>();
  d.demand_hold = r["demand-hold"].as<double>();
  d.curve_secret_key = r["curve-key"].as<std::string>();
  d.curve_allow = r["curve-allow"].as<std::string>();
  d.curve_agents = r["curve-agents"].as<std::string>();
  d.curve_users = r["curve-users"].as<std::string>();
  d.curve_operators = r["curve-operators"].as<std::string>();
  d.insecure = r.count("insecure") > 0;
  d.cluster_id = r["cluster-id"].as<std::string>();
  d.journal_snapshot_rows = r["journal-snapshot-rows"].as<int>();
  d.env_deny = r["env-deny"].as<std::string>();
  d.env_allow = r["env-allow"].as<std::string>();
  // Every flag is checked here, before the daemon starts (one line, exit 2).
  const std::string prog = "aryl-scheduler";
  if (auto policy = aryl::sched::MakePolicy(d.policy, aryl::sched::SchedulerConfig{}); !policy.ok())
    aryl::FlagError(prog, "--policy", d.policy, policy.status().message());
  aryl::RequireAbove(prog, "--heartbeat", d.heartbeat_interval, 0);
  if (d.speed != "learned" && d.speed != "linear") aryl::FlagError(prog, "--speed", d.speed, "expected learned or linear");
  if (auto pr = aryl::ParsePortRange(d.port_range); !pr.ok())
    aryl::FlagError(prog, "--port-range", d.port_range, pr.status().message());
  aryl::RequireAtLeast(prog, "--max-jobs-per-user", d.max_jobs_per_user, 0);
  aryl::RequireAtLeast(prog, "--status-max-jobs", d.status_max_jobs, 0);
  aryl::RequireAtLeast(prog, "--submit-rate-per-user", d.submit_rate_per_user, 0);
  aryl::RequireAtLeast(prog, "--submit-burst-per-user", d.submit_burst_per_user, 1);
  aryl::RequireAbove(prog, "--agent-timeout", d.agent_timeout, 0);
  if (d.agent_timeout <= d.heartbeat_interval)
    aryl::FlagError(prog, "--agent-timeout", fmt::format("{}", d.agent_timeout),
                    fmt::format("must exceed --heartbeat ({})", d.heartbeat_interval));
  if (d.agent_lease <= d.heartbeat_interval || d.agent_lease > 86400)
    aryl::FlagError(prog, "--agent-lease", fmt::format("{}", d.agent_lease),
                    fmt::format("must exceed --heartbeat ({}) and be at most 86400", d.heartbeat_interval));
  if (d.http_port < -1 || d.http_port > 65535)
    aryl::FlagError(prog, "--http-port", std::to_string(d.http_port), "must be in [-1, 65535]");
  aryl::RequireAbove(prog, "--demand-time-scale", d.demand_time_scale, 0);
  if (aryl::daemon::IsPrometheusDemand(d.inference_demand)) {
    if (auto spec = aryl::daemon::ParsePrometheusDemandSpec(d.inference_demand); !spec.ok())
      aryl::FlagError(prog, "--inference-demand", d.inference_demand, spec.status().message());
  }
  aryl::RequireAbove(prog, "--demand-reclaim-deadline", d.demand_reclaim_deadline, 0);
  aryl::RequireAbove(prog, "--demand-step", d.demand_step, 0);
  aryl::RequireAbove(prog, "--demand-per-server", d.demand_per_server, 0);
  aryl::RequireAtLeast(prog, "--demand-headroom", d.demand_headroom, 0);
  aryl::RequireAtLeast(prog, "--demand-hysteresis", d.demand_hysteresis, 0);
  if (d.demand_hysteresis >= 1)
    aryl::FlagError(prog, "--demand-hysteresis", fmt::format("{}", d.demand_hysteresis), "must be below 1");
  aryl::RequireAtLeast(prog, "--demand-hold", d.demand_hold, 0);
  aryl::RequireAtLeast(prog, "--rescale-pause", d.rescale_pause, 0);
  aryl::RequireAtLeast(prog, "--restart-pause", d.restart_pause, 0);
  aryl::RequireAbove(prog, "--checkpoint-interval", d.checkpoint_interval, 0);
  aryl::RequireAbove(prog, "--resize-horizon", d.resize_horizon, 0);
  aryl::RequireAtLeast(prog, "--resize-dwell", d.resize_dwell, 0);
  aryl::RequireAtLeast(prog, "--resize-margin", d.resize_margin, 0);
  aryl::RequireAtLeast(prog, "--stop-grace", d.stop_grace, 0);
  aryl::RequireAtLeast(prog, "--quota-min-runtime", d.quota_min_runtime, 0);
  aryl::RequireAtLeast(prog, "--quota-reclaim-deadline", d.quota_reclaim_deadline, 0);
  aryl::RequireAtLeast(prog, "--max-stop-grace", d.max_stop_grace, 0);
  aryl::RequireAtLeast(prog, "--serving-warmup", d.serving_warmup, 0);
  aryl::RequireAtLeast(prog, "--journal-snapshot-rows", d.journal_snapshot_rows, 0);

  aryl::daemon::HaOptions ha;
  ha.lease_ttl = r["lease-ttl"].as<int>();
  ha.advertise = r["advertise"].as<std::string>();
  ha.etcd_timeout = r["etcd-timeout"].as<double>();
  ha.etcd_ca = r["etcd-ca"].as<std::string>();
  ha.etcd_cert = r["etcd-cert"].as<std::string>();
  ha.etcd_key = r["etcd-key"].as<std::string>();
  if (ha.lease_ttl < 1 || ha.lease_ttl > 300)
    aryl::FlagError(prog, "--lease-ttl", std::to_string(ha.lease_ttl), "must be in [1, 300] s");
  aryl::RequireAbove(prog, "--etcd-timeout", ha.etcd_timeout, 0);

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  if (aryl::daemon::IsEtcdStateUrl(d.state_path)) {
    ha.state_url = d.state_path;
    aryl::Status st = aryl::daemon::RunHighlyAvailable(d, ha, g_stop);
    if (!st.ok()) {
      std::cerr << "aryl-scheduler: error: " << st.ToString() << "\n";
      return aryl::StartupExitCode(st);
    }
    return 0;
  }
  auto daemon = aryl::daemon::Daemon::Start(d);
  if (!daemon.ok()) {
    std::cerr << "aryl-scheduler: error: " << daemon.status().ToString() << "\n";
    // A configuration the operator must change exits 2, which the unit does
    // not restart on (RestartPreventExitStatus=2); anything else may pass.
    return aryl::StartupExitCode(daemon.status());
  }
  (*daemon)->Run(g_stop);
  spdlog::info("aryl-scheduler: stopping");
  (*daemon)->Stop();
  return 0;
}
