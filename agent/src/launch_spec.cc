// Builds a worker's LaunchSpec from its StartWorkers (launch_spec.h).
#include "launch_spec.h"

#include <algorithm>
#include <charconv>

#include "aryl/protocol/generation.h"
#include "aryl/protocol/store.h"

namespace aryl::agent {

namespace p = aryl::protocol;

std::int64_t StartGeneration(const p::StartWorkers& m, bool use_store) {
  return use_store ? p::PlanGeneration(m.generation) : std::max<std::int64_t>(1, m.generation);
}

TorchrunPlacement TorchrunPlacementOf(const p::StartWorkers& m, const p::WorkerPlacement& wp) {
  TorchrunPlacement t;
  t.rank = int(wp.rank);
  t.world_size = int(m.members.size());
  t.local_world_size = int(m.workers.size());
  int lowest = t.rank;
  for (const auto& other : m.workers) {
    if (other.rank < wp.rank) ++t.local_rank;
    lowest = std::min(lowest, int(other.rank));
  }
  t.group_rank = lowest / std::max(1, t.local_world_size);
  std::string host = m.store_endpoint;
  if (auto s = host.find("://"); s != std::string::npos) host = host.substr(s + 3);
  if (auto c = host.rfind(':'); c != std::string::npos) host = host.substr(0, c);
  t.master_addr = host.empty() || host == "*" || host == "none" ? "127.0.0.1" : host;
  // The scheduler's choice for this start (--port-range); a scheduler that
  // does not send one leaves every agent to derive the same port.
  t.master_port = TorchrunMasterPort(m.job, m.generation, m.store_endpoint);
  if (auto it = m.env.find("ARYL_MASTER_PORT"); it != m.env.end()) {
    int port = 0;
    auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), port);
    if (ec == std::errc() && end == it->second.data() + it->second.size() && port > 0 && port < 65536)
      t.master_port = port;
  }
  t.group_world_size = (t.world_size + t.local_world_size - 1) / std::max(1, t.local_world_size);
  if (auto it = m.env.find("TORCHELASTIC_MAX_RESTARTS"); it != m.env.end()) t.max_restarts = it->second;
  t.run_id = std::to_string(m.job);
  t.restart_count = m.restart_count.value_or(0);
  return t;
}

WorkerLaunch BuildWorkerLaunch(const p::StartWorkers& m, const p::WorkerPlacement& wp,
                               const WorkerLaunchContext& ctx, const std::optional<std::string>& channel_nonce) {
  WorkerLaunch out;
  LaunchSpec& spec = out.spec;
  spec.argv = m.argv;
  spec.cwd = m.cwd;
  spec.inherit = ctx.inherit;
  spec.env = m.env;
  spec.env["ARYL_JOB_ID"] = std::to_string(m.job);
  spec.env["ARYL_WORKER_ID"] = std::to_string(wp.worker);
  spec.env["ARYL_GENERATION"] = std::to_string(StartGeneration(m, ctx.use_store));
  spec.env["ARYL_RANK"] = std::to_string(wp.rank);
  spec.env["ARYL_WORLD_SIZE"] = std::to_string(m.members.size());
  spec.env["ARYL_LOCAL_SLOT"] = std::to_string(wp.local_slot);
  spec.env["ARYL_AGENT_ID"] = ctx.agent_id;
  spec.env["ARYL_AGENT_ENDPOINT"] = ctx.worker_endpoint;
  // Peers on other servers reach this worker's Gloo pairs at the agent's
  // address (--host), not at the runtime's loopback default.
  if (!m.env.count("ARYL_GLOO_HOST")) spec.env["ARYL_GLOO_HOST"] = ctx.host;
  SetTorchrunEnv(spec.env, TorchrunPlacementOf(m, wp));
  if (!m.checkpoint_dir.empty()) spec.env["ARYL_CHECKPOINT_DIR"] = m.checkpoint_dir;
  if (ctx.use_store) {
    spec.env["ARYL_STORE_ENDPOINT"] = m.store_endpoint;
    // "<job>-<start>": the runtime's store keys and its channel identity;
    // the message fields carry the numeric job (its leading number).
    spec.env["ARYL_JOB_ID"] = m.store_prefix;
    if (!ctx.store_key.empty()) spec.env["ARYL_STORE_TOKEN"] = p::StoreToken(ctx.store_key, m.store_prefix);
  }
  if (ctx.gpus) spec.env["CUDA_VISIBLE_DEVICES"] = std::to_string(wp.local_slot);
  if (ctx.account) {
    spec.run_as = ctx.account->credentials;
    spec.env["USER"] = spec.env["LOGNAME"] = ctx.account->name;
    spec.env["HOME"] = ctx.account->home;
    if (spec.cwd.empty()) spec.cwd = ctx.account_home_exists ? ctx.account->home : "/";
  }
  // The runtime's AgentChannel connects under this identity (worker_channel.h).
  out.channel_id = "worker-" + spec.env["ARYL_JOB_ID"] + "-" + spec.env["ARYL_WORKER_ID"];
  if (channel_nonce) {
    out.channel_id += "-" + *channel_nonce;
    spec.env["ARYL_CHANNEL_ID"] = out.channel_id;
  }
  spec.stdout_path = (ctx.job_dir / ("worker-" + std::to_string(wp.worker) + ".out")).string();
  spec.stderr_path = (ctx.job_dir / ("worker-" + std::to_string(wp.worker) + ".err")).string();
  return out;
}

}  // namespace aryl::agent
