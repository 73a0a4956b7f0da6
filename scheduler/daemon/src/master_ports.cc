// The MASTER_PORT index and choice (master_ports.h).
#include "master_ports.h"

namespace aryl::daemon {

std::optional<int> MasterPorts::Pick(const PortRange& range, std::uint64_t salt, JobId job, const std::string& host,
                                     const Holds& holds, const std::function<bool(int)>& busy) {
  auto taken = [&](int port) {
    auto it = holders_.find({host, port});
    if (it != holders_.end()) {
      for (auto h = it->second.begin(); h != it->second.end();) {
        if (*h == job) {
          ++h;
          continue;
        }
        if (!holds(*h, host, port)) {
          h = it->second.erase(h);  // step 3
          continue;
        }
        return true;
      }
      if (it->second.empty()) holders_.erase(it);
    }
    return busy && busy(port);
  };
  auto port = PickPort(range, salt, taken);
  if (port) Add(host, *port, job);
  return port;
}

std::size_t MasterPorts::entries() const {
  std::size_t n = 0;
  for (const auto& [key, jobs] : holders_) n += jobs.size();
  return n;
}

}  // namespace aryl::daemon
