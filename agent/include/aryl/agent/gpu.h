// GPU discovery for aryl-agent.
//
// Asks NVML (libnvidia-ml.so.1), then the CUDA driver (libcuda.so.1), both
// loaded with dlopen so that the agent needs neither at build or run time.
// Machines without GPUs are declared with --slots N --gpu-type cpu.
#pragma once

#include <string>
#include <vector>

#include "aryl/result.h"

namespace aryl::agent {

struct GpuInventory {
  int count = 0;
  std::string type;                 // short name, e.g. "A100", "H200", "T4"; "cpu" for slots
  std::vector<std::string> names;   // full device names, one per GPU
  std::string source;               // "nvml", "cuda", "slots"
};

// NotFound when neither library is present or they report no device.
Result<GpuInventory> DiscoverGpus();

// "NVIDIA H200" -> "H200", "Tesla T4" -> "T4", "NVIDIA A100-SXM4-80GB" -> "A100".
std::string ShortGpuType(const std::string& device_name);

}  // namespace aryl::agent
