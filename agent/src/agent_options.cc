// The agent's options resolved against this machine (agent_options.h).
#include "agent_options.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <filesystem>
#include <system_error>

#include "aryl/agent/gpu.h"
#include "aryl/protocol/scheduler_client.h"
#include "host_address.h"

namespace aryl::agent {

namespace p = aryl::protocol;
namespace fs = std::filesystem;

namespace {

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

Result<ResolvedOptions> ResolveAgentOptions(AgentOptions options) {
  ResolvedOptions r;
  if (options.id.empty()) options.id = HostName();
  auto schedulers = p::ParseSchedulerEndpoints(options.scheduler);
  if (!schedulers.ok()) return schedulers.status().WithContext("--scheduler");
  r.schedulers = *schedulers;
  {
    ARYL_ASSIGN_OR_RETURN(HostChoice host, ChooseHost(options.host, schedulers->front()));
    if (!host.warning.empty()) spdlog::warn("{}", host.warning);
    if (options.host.empty() || options.host != host.address)
      spdlog::info("peers reach this server at {} ({})", host.address, host.why);
    options.host = host.address;
  }
  if (!p::FromString(options.pool, &r.pool)) {
    return Status::InvalidArgument("--pool '" + options.pool + "': expected training or inference");
  }
  if (options.slots < 0) return Status::InvalidArgument("--slots must be >= 0");
  if (options.slots == 0) {
    ARYL_ASSIGN_OR_RETURN(auto inv, DiscoverGpus());
    options.slots = inv.count;
    if (options.gpu_type.empty()) options.gpu_type = inv.type;
    r.gpus = true;
    spdlog::info("found {} x {} via {}", inv.count, inv.type, inv.source);
  } else {
    if (options.gpu_type.empty()) options.gpu_type = "cpu";
    r.gpus = options.gpu_type != "cpu";
  }
  std::error_code ec;
  fs::create_directories(options.log_dir, ec);
  if (ec) return Status::IoError("log dir " + options.log_dir + ": " + ec.message());
  r.options = std::move(options);
  return r;
}

}  // namespace aryl::agent
