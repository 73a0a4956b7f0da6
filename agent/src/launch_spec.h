// How the agent starts one worker of a StartWorkers (agent.h, step 3), as
// data: the LaunchSpec it hands ProcessLauncher, with the ARYL_* contract of
// docs/runtime.md, torchrun's variables (aryl/torchrun_env.h), the store's
// token, the account's HOME/USER/LOGNAME and the worker channel's identity.
//
// Pure: no process, file, clock or random calls. What the agent learns from
// the world (the account, whether its home exists, the store key, the channel
// nonce) comes in as values, so tests build every case from plain messages.
//
// Thread safety: free functions of their arguments.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "aryl/agent/process.h"
#include "aryl/protocol/messages.h"
#include "aryl/torchrun_env.h"
#include "run_as.h"

namespace aryl::agent {

// What the agent adds to a StartWorkers for the workers it starts.
struct WorkerLaunchContext {
  std::string agent_id;         // ARYL_AGENT_ID
  std::string host;             // --host: ARYL_GLOO_HOST unless the job sets its own
  std::string worker_endpoint;  // ARYL_AGENT_ENDPOINT (the worker channel)
  std::function<bool(const std::string&)> inherit;  // --worker-env (null: all)
  bool gpus = false;            // GPU agent: CUDA_VISIBLE_DEVICES is the worker's slot
  bool use_store = false;       // the job meets in the rendezvous store (ARYL_STORE_ENDPOINT)
  std::string store_key;        // the cluster's store key (ARYL_STORE_TOKEN); empty: none yet
  std::filesystem::path job_dir;  // <log dir>/job-<job>: worker-<id>.out and .err
  std::optional<Account> account;  // whom the workers run as; nullopt: the agent's own account
  bool account_home_exists = false;  // the account's home is a directory (the default cwd)
};

// A worker's launch and the identity it connects to the worker channel with.
struct WorkerLaunch {
  LaunchSpec spec;
  std::string channel_id;  // "worker-<ARYL_JOB_ID>-<worker>[-<nonce>]"
};

// The store generation the workers of `m` start in (ARYL_GENERATION): the
// plan's (protocol/generation.h) with a store, else the scheduler's, at least 1.
std::int64_t StartGeneration(const protocol::StartWorkers& m, bool use_store);

// torchrun's variables for worker `wp` of `m`. Local ranks count the workers
// this message starts here; MASTER_ADDR is the store's host, so env://
// rendezvous of a multi-machine job needs rank 0 on that host; MASTER_PORT is
// the job's ARYL_MASTER_PORT when valid, else derived (TorchrunMasterPort).
TorchrunPlacement TorchrunPlacementOf(const protocol::StartWorkers& m, const protocol::WorkerPlacement& wp);

// The launch of worker `wp` of `m`. `channel_nonce` is the random part of its
// channel identity, which then goes to ARYL_CHANNEL_ID; nullopt: none could be
// drawn (no ARYL_CHANNEL_ID; the caller fails the start).
WorkerLaunch BuildWorkerLaunch(const protocol::StartWorkers& m, const protocol::WorkerPlacement& wp,
                               const WorkerLaunchContext& ctx, const std::optional<std::string>& channel_nonce);

}  // namespace aryl::agent
