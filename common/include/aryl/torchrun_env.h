// The environment torchrun gives each worker, so that a script written for
// torchrun (torch.distributed.init_process_group with env://) runs unchanged
// under aryl-rt-launch and the agent. Values are as of the worker's start: a
// job that changes size in place learns its rank from the runtime instead.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "aryl/hash.h"

namespace aryl {

struct TorchrunPlacement {
  int rank = 0;              // RANK: position in the generation
  int world_size = 1;        // WORLD_SIZE
  int local_rank = 0;        // LOCAL_RANK: position among this machine's workers of the job
  int local_world_size = 1;  // LOCAL_WORLD_SIZE
  int group_rank = 0;        // GROUP_RANK: this machine's index among the job's machines
  int group_world_size = 1;  // GROUP_WORLD_SIZE: the job's machines
  std::string master_addr;   // MASTER_ADDR: where rank 0 serves torch's TCPStore
  int master_port = 0;       // MASTER_PORT
  int64_t restart_count = 0; // TORCHELASTIC_RESTART_COUNT
  std::string run_id;        // TORCHELASTIC_RUN_ID
  std::string max_restarts = "0";  // TORCHELASTIC_MAX_RESTARTS
};

inline void SetTorchrunEnv(std::map<std::string, std::string>& env, const TorchrunPlacement& p) {
  env["RANK"] = std::to_string(p.rank);
  env["WORLD_SIZE"] = std::to_string(p.world_size);
  env["LOCAL_RANK"] = std::to_string(p.local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(p.local_world_size);
  env["GROUP_RANK"] = std::to_string(p.group_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(p.group_world_size);
  // One role ("default"), as torchrun's: its ranks are the job's.
  env["ROLE_NAME"] = "default";
  env["ROLE_RANK"] = std::to_string(p.rank);
  env["ROLE_WORLD_SIZE"] = std::to_string(p.world_size);
  env["MASTER_ADDR"] = p.master_addr;
  env["MASTER_PORT"] = std::to_string(p.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(p.restart_count);
  env["TORCHELASTIC_RUN_ID"] = p.run_id;
  env["TORCHELASTIC_MAX_RESTARTS"] = p.max_restarts;
}

// A port every agent of a job derives alike from (job, generation) and the
// cluster's rendezvous store endpoint, in [29500, 49500): no message has to
// carry it, and job 1 of two clusters on one machine (aryl-run --standalone
// twice) does not get the same port.
inline int TorchrunMasterPort(uint64_t job, int64_t generation, std::string_view cluster = {}) {
  uint64_t salt = Fnv1a64(cluster);
  uint64_t h = (job * 0x9E3779B97F4A7C15ull) ^ (uint64_t(generation) * 0xC2B2AE3D27D4EB4Full) ^ salt;
  return 29500 + int((h >> 17) % 20000);
}

}  // namespace aryl
