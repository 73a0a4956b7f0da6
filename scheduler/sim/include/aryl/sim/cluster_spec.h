// Cluster specs: "64x8xA100" = 64 servers of 8 A100 GPUs. Several groups join
// with '+' ("32x8xA100+16x4xV100"); "0" or "none" is an empty pool.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "aryl/result.h"
#include "aryl/sched/types.h"

namespace aryl::sim {

struct ServerGroup {
  int servers = 0;
  int gpus_per_server = 0;
  std::string gpu_type;
};

struct PoolSpec {
  std::vector<ServerGroup> groups;
  int Servers() const;
  int Gpus() const;
  std::string ToString() const;  // canonical form, "none" when empty
};

// `flag` names the flag in messages ("--training").
Result<PoolSpec> ParsePoolSpec(std::string_view text, std::string_view flag);

// Servers of both pools: training first (ids 0..), then inference. Names are
// "train-000", "infer-000", ...
std::vector<sched::ServerSpec> BuildServers(const PoolSpec& training, const PoolSpec& inference);

}  // namespace aryl::sim
