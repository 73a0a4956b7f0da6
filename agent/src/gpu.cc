#include "aryl/agent/gpu.h"

#include <dlfcn.h>

#include <cctype>
#include <sstream>

namespace aryl::agent {
namespace {

// A dlopen handle that closes itself.
struct Lib {
  explicit Lib(const char* name) : h(dlopen(name, RTLD_NOW | RTLD_LOCAL)) {}
  ~Lib() { if (h) dlclose(h); }
  template <typename F>
  F Sym(const char* name) const { return h ? reinterpret_cast<F>(dlsym(h, name)) : nullptr; }
  void* h;
};

Result<GpuInventory> FromNvml() {
  Lib lib("libnvidia-ml.so.1");
  if (!lib.h) return Status::NotFound("libnvidia-ml.so.1 not present");
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned int*);
  using HandleFn = int (*)(unsigned int, void**);
  using NameFn = int (*)(void*, char*, unsigned int);
  auto init = lib.Sym<InitFn>("nvmlInit_v2");
  auto shutdown = lib.Sym<InitFn>("nvmlShutdown");
  auto count_fn = lib.Sym<CountFn>("nvmlDeviceGetCount_v2");
  auto handle_fn = lib.Sym<HandleFn>("nvmlDeviceGetHandleByIndex_v2");
  auto name_fn = lib.Sym<NameFn>("nvmlDeviceGetName");
  if (!init || !count_fn || !handle_fn || !name_fn) return Status::NotFound("NVML symbols missing");
  if (init() != 0) return Status::Unavailable("nvmlInit failed");
  GpuInventory inv;
  inv.source = "nvml";
  unsigned int n = 0;
  if (count_fn(&n) == 0) {
    for (unsigned int i = 0; i < n; ++i) {
      void* dev = nullptr;
      char name[96] = {0};
      if (handle_fn(i, &dev) == 0 && name_fn(dev, name, sizeof(name)) == 0) inv.names.push_back(name);
      else inv.names.push_back("unknown");
    }
  }
  if (shutdown) shutdown();
  inv.count = static_cast<int>(inv.names.size());
  if (inv.count == 0) return Status::NotFound("NVML reports no GPU");
  inv.type = ShortGpuType(inv.names[0]);
  return inv;
}

Result<GpuInventory> FromCudaDriver() {
  Lib lib("libcuda.so.1");
  if (!lib.h) return Status::NotFound("libcuda.so.1 not present");
  using InitFn = int (*)(unsigned int);
  using CountFn = int (*)(int*);
  using GetFn = int (*)(int*, int);
  using NameFn = int (*)(char*, int, int);
  auto init = lib.Sym<InitFn>("cuInit");
  auto count_fn = lib.Sym<CountFn>("cuDeviceGetCount");
  auto get_fn = lib.Sym<GetFn>("cuDeviceGet");
  auto name_fn = lib.Sym<NameFn>("cuDeviceGetName");
  if (!init || !count_fn || !get_fn || !name_fn) return Status::NotFound("CUDA driver symbols missing");
  if (init(0) != 0) return Status::Unavailable("cuInit failed (no device or driver mismatch)");
  int n = 0;
  if (count_fn(&n) != 0 || n <= 0) return Status::NotFound("the CUDA driver reports no GPU");
  GpuInventory inv;
  inv.source = "cuda";
  for (int i = 0; i < n; ++i) {
    int dev = 0;
    char name[96] = {0};
    if (get_fn(&dev, i) == 0 && name_fn(name, sizeof(name), dev) == 0) inv.names.push_back(name);
    else inv.names.push_back("unknown");
  }
  inv.count = n;
  inv.type = ShortGpuType(inv.names[0]);
  return inv;
}

}  // namespace

std::string ShortGpuType(const std::string& device_name) {
  std::istringstream is(device_name);
  std::string word, best;
  while (is >> word) {
    if (word == "NVIDIA" || word == "Tesla" || word == "GeForce" || word == "Quadro") continue;
    best = word;
    break;
  }
  if (best.empty()) best = device_name.empty() ? "unknown" : device_name;
  auto dash = best.find('-');
  if (dash != std::string::npos && dash > 0) best = best.substr(0, dash);
  return best;
}

Result<GpuInventory> DiscoverGpus() {
  auto nvml = FromNvml();
  if (nvml.ok()) return nvml;
  auto cuda = FromCudaDriver();
  if (cuda.ok()) return cuda;
  return Status::NotFound("no GPU found (" + nvml.status().message() + "; " + cuda.status().message() +
                          "); use --slots N --gpu-type cpu on machines without GPUs");
}

}  // namespace aryl::agent
