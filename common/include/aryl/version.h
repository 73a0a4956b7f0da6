// Version and build options of this build, shared by every binary's --version
// and by the scheduler's aryl_build_info metric.
#pragma once

#include <string>
#include <string_view>

namespace aryl {

struct BuildInfo {
  std::string_view version;     // project version, e.g. "0.1.0"
  std::string_view git_commit;  // short commit hash, "+dirty" when the tree had changes; "unknown" outside git
  bool torch = false;           // libtorch runtime built
  bool cuda = false;            // CUDA toolkit used
  bool nccl = false;            // NCCL communicator built
};

const BuildInfo& GetBuildInfo();

// "<program> 0.1.0 (commit 1a2b3c4)\nbuild: torch on, cuda off, nccl off\n"
std::string VersionText(std::string_view program);

}  // namespace aryl
