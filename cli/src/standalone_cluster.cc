#include "standalone_cluster.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <utility>

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "aryl/agent/agent.h"
#include "aryl/daemon/daemon.h"
#include "aryl/flags.h"
#include "aryl/protocol/messages.h"
#include "aryl/protocol/scheduler_client.h"

namespace aryl::cli {

namespace fs = std::filesystem;
namespace p = aryl::protocol;

namespace {
// How long the submission waits for the embedded agents to connect.
constexpr std::chrono::seconds kAgentWait{10};
}  // namespace

StandaloneCluster::StandaloneCluster(std::string program, StandaloneOptions options)
    : program_(std::move(program)), options_(std::move(options)) {}

StandaloneCluster::~StandaloneCluster() { Stop(); }

const std::string& StandaloneCluster::endpoint() const { return daemon_->endpoint(); }

Status StandaloneCluster::Start() {
  // The embedded scheduler and agents log at info as the daemons do; here
  // their lines would bury the job's: warnings and errors only, unless
  // --log-level or $ARYL_LOG asks for more.
  if (!options_.log_level_chosen) spdlog::set_level(spdlog::level::warn);
  fs::path work = options_.work_dir;
  std::error_code ec;
  fs::create_directories(work, ec);
  if (ec) aryl::UsageError(program_, "--work-dir " + work.string() + ": " + ec.message());
  daemon::DaemonOptions d;
  // A socket in a fresh 0700 directory: only this account reaches the
  // standalone scheduler (a tcp:// port would let any local account submit).
  std::string sock_dir = (fs::temp_directory_path() / "aryl-run-XXXXXX").string();
  if (!::mkdtemp(sock_dir.data())) aryl::UsageError(program_, "mkdtemp " + sock_dir + ": " + std::strerror(errno));
  socket_dir_ = sock_dir;
  d.endpoint = "ipc://" + sock_dir + "/scheduler.sock";
  d.state_path = options_.state_path;
  if (d.state_path.empty()) {
    d.state_path = (work / "state.db").string();
    fs::remove(d.state_path, ec);
    fs::remove(d.state_path + "-wal", ec);
    fs::remove(d.state_path + "-shm", ec);
    // Job ids restart at 1 with a fresh state: the previous run's logs move
    // to logs.N rather than being overwritten.
    if (fs::is_directory(work / "logs", ec) && !fs::is_empty(work / "logs", ec)) {
      int n = 1;
      while (fs::exists(work / ("logs." + std::to_string(n)), ec)) ++n;
      fs::path kept = work / ("logs." + std::to_string(n));
      fs::rename(work / "logs", kept, ec);
      if (ec) aryl::UsageError(program_, "--work-dir " + work.string() + ": cannot move the previous run's logs to " +
                                             kept.string() + ": " + ec.message());
      if (!options_.quiet) std::cerr << program_ << ": the previous run's logs are in " << kept.string() << "\n";
    }
  }
  d.http_port = options_.http_port;
  d.inference_demand = options_.inference_demand;
  d.demand_time_scale = options_.demand_time_scale;
  d.heartbeat_interval = 0.2;
  d.agent_timeout = 2;
  d.restart_grace = 1;
  d.rescale_pause = 1;
  ARYL_ASSIGN_OR_RETURN(daemon_, daemon::Daemon::Start(d));
  log_dir_ = (work / "logs").string();
  ARYL_RETURN_IF_ERROR(AddAgent("local", "training", options_.slots));
  if (options_.loan_slots > 0) ARYL_RETURN_IF_ERROR(AddAgent("loan", "inference", options_.loan_slots));
  for (auto& a : agents_) agent_threads_.emplace_back([agent = a.get()] { (void)agent->Run(); });
  if (!options_.quiet)
    std::cerr << program_ << ": standalone scheduler on " << endpoint() << ", logs in " << log_dir_ << "\n";
  return Status::Ok();
}

Status StandaloneCluster::AddAgent(const std::string& id, const std::string& pool, int slots) {
  agent::AgentOptions a;
  a.scheduler = endpoint();
  a.id = id;
  a.host = "127.0.0.1";
  a.pool = pool;
  a.slots = slots;
  a.gpu_type = options_.gpu_type.empty() ? "cpu" : options_.gpu_type;
  a.log_dir = log_dir_;
  // Only this account reaches the standalone scheduler (its socket is in a
  // 0700 directory), so the agent's warning about running as root without
  // --run-as, which is about other accounts' jobs, does not apply.
  const auto level = spdlog::get_level();
  if (!options_.log_level_chosen && ::geteuid() == 0) spdlog::set_level(spdlog::level::err);
  auto created = agent::Agent::Create(a);
  spdlog::set_level(level);
  ARYL_ASSIGN_OR_RETURN(auto created_agent, std::move(created));
  agents_.push_back(std::move(created_agent));
  return Status::Ok();
}

void StandaloneCluster::WaitForAgents(p::SchedulerClient& client, std::chrono::milliseconds per_try,
                                      const std::atomic<int>& interrupts) const {
  for (auto until = std::chrono::steady_clock::now() + kAgentWait;
       interrupts == 0 && std::chrono::steady_clock::now() < until;) {
    auto nodes = client.Call<p::NodesReply>(p::ListNodes{}, per_try);
    std::size_t connected = 0;
    if (nodes.ok())
      for (const auto& n : nodes->nodes) connected += n.connected;
    if (connected >= agents_.size()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void StandaloneCluster::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& a : agents_) a->Stop();
  for (auto& t : agent_threads_) t.join();
  if (daemon_) daemon_->Stop();
  if (!socket_dir_.empty()) {
    std::error_code rm;
    fs::remove_all(socket_dir_, rm);
  }
}

}  // namespace aryl::cli
