// The agent's options resolved against this machine before it starts: the id
// (the host name by default), the scheduler list, the address peers reach this
// server at (host_address.h), the pool, the slots and GPU type (GPU discovery,
// gpu.h) and the log directory (created). Each default chosen is logged.
//
// Thread safety: a free function; it reads the machine (host name, routes,
// GPUs) and creates the log directory.
#pragma once

#include <string>
#include <vector>

#include "aryl/agent/agent.h"
#include "aryl/protocol/messages.h"
#include "aryl/result.h"

namespace aryl::agent {

struct ResolvedOptions {
  AgentOptions options;                 // with every default filled in
  std::vector<std::string> schedulers;  // --scheduler, parsed
  protocol::Pool pool = protocol::Pool::kTraining;
  bool gpus = false;  // the slots are GPUs (CUDA_VISIBLE_DEVICES per worker)
};

// InvalidArgument names the flag at fault; discovery and I/O errors pass through.
Result<ResolvedOptions> ResolveAgentOptions(AgentOptions options);

}  // namespace aryl::agent
