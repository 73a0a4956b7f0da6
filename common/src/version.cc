#include "aryl/version.h"

namespace aryl {

std::string VersionText(std::string_view program) {
  const BuildInfo& b = GetBuildInfo();
  auto on = [](bool v) { return v ? "on" : "off"; };
  std::string out(program);
  out += " " + std::string(b.version) + " (commit " + std::string(b.git_commit) + ")\n";
  out += std::string("build: torch ") + on(b.torch) + ", cuda " + on(b.cuda) + ", nccl " + on(b.nccl) + "\n";
  return out;
}

}  // namespace aryl
