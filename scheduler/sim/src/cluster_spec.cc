#include "aryl/sim/cluster_spec.h"

#include <cstdio>

#include "csv_util.h"

namespace aryl::sim {

int PoolSpec::Servers() const {
  int n = 0;
  for (const auto& g : groups) n += g.servers;
  return n;
}

int PoolSpec::Gpus() const {
  int n = 0;
  for (const auto& g : groups) n += g.servers * g.gpus_per_server;
  return n;
}

std::string PoolSpec::ToString() const {
  if (groups.empty()) return "none";
  std::string s;
  for (const auto& g : groups) {
    if (!s.empty()) s += "+";
    s += std::to_string(g.servers) + "x" + std::to_string(g.gpus_per_server) + "x" + g.gpu_type;
  }
  return s;
}

Result<PoolSpec> ParsePoolSpec(std::string_view text, std::string_view flag) {
  PoolSpec spec;
  text = internal::Trim(text);
  if (text.empty() || text == "none" || text == "0") return spec;
  for (std::string_view part : internal::Split(text, '+')) {
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument(std::string(flag) + ": '" + std::string(part) + "': " + why +
                                     " (expected SERVERSxGPUSxTYPE, e.g. 64x8xA100)");
    };
    auto x1 = part.find('x');
    auto x2 = x1 == std::string_view::npos ? x1 : part.find('x', x1 + 1);
    if (x2 == std::string_view::npos) return bad("missing 'x'");
    auto servers = internal::ParseInt(part.substr(0, x1));
    auto gpus = internal::ParseInt(part.substr(x1 + 1, x2 - x1 - 1));
    std::string type(internal::Trim(part.substr(x2 + 1)));
    if (!servers || *servers < 0 || *servers > 1'000'000) return bad("bad server count");
    if (!gpus || *gpus < 1 || *gpus > 1024) return bad("bad GPUs per server");
    if (type.empty()) return bad("missing GPU type");
    if (*servers == 0) continue;
    spec.groups.push_back({static_cast<int>(*servers), static_cast<int>(*gpus), type});
  }
  return spec;
}

std::vector<sched::ServerSpec> BuildServers(const PoolSpec& training, const PoolSpec& inference) {
  std::vector<sched::ServerSpec> out;
  auto add = [&](const PoolSpec& pool, sched::Pool kind, const char* prefix) {
    int index = 0;
    for (const auto& g : pool.groups) {
      for (int i = 0; i < g.servers; ++i) {
        sched::ServerSpec s;
        s.id = static_cast<sched::ServerId>(out.size());
        char name[32];
        std::snprintf(name, sizeof(name), "%s-%03d", prefix, index++);
        s.name = name;
        s.pool = kind;
        s.gpu_type = g.gpu_type;
        s.gpus = g.gpus_per_server;
        out.push_back(std::move(s));
      }
    }
  };
  add(training, sched::Pool::kTraining, "train");
  add(inference, sched::Pool::kInference, "infer");
  return out;
}

}  // namespace aryl::sim
