// The names of aryl-simtest --daemon's faults and groups (daemon_sim.h).
#include <algorithm>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>

#include "aryl/simtest/daemon_sim.h"

namespace aryl::simtest {
namespace {

constexpr std::pair<DaemonFault, const char*> kNames[] = {
    {kDaemonKill, "kill"},       {kDaemonLoan, "loan"},          {kDaemonPause, "pause"},
    {kDaemonRestart, "restart"}, {kDaemonPartition, "partition"}, {kDaemonDisk, "disk"},
    {kDaemonLoss, "loss"},       {kDaemonDup, "dup"},            {kDaemonDelay, "delay"},
    {kDaemonOneWay, "oneway"},   {kDaemonAgentCrash, "agent"},   {kDaemonCheckpoint, "ckpt"},
    {kDaemonCheckpointDisk, "cdisk"}, {kDaemonLag, "lag"}};

}  // namespace

Result<unsigned> ParseDaemonFaults(const std::string& list) {
  unsigned out = 0;
  std::stringstream ss(list);
  std::string word;
  while (std::getline(ss, word, ',')) {
    if (word == "all") {
      out |= kDaemonAll;
      continue;
    }
    if (word == "process") {
      out |= kDaemonProcess;
      continue;
    }
    if (word == "network") {
      out |= kDaemonNetwork;
      continue;
    }
    if (word == "none" || word.empty()) continue;
    auto it = std::find_if(std::begin(kNames), std::end(kNames), [&](const auto& n) { return word == n.second; });
    if (it == std::end(kNames))
      return Status::InvalidArgument("--faults: unknown fault '" + word +
                                     "' for --daemon (known: kill, loan, pause, restart, partition, disk, agent, ckpt, cdisk, loss, dup, delay, oneway, lag; process, network, all, none)");
    out |= it->first;
  }
  return out;
}

std::string DaemonFaultsString(unsigned faults) {
  if (faults == kDaemonAll) return "all";
  std::string s;
  for (const auto& [bit, name] : kNames)
    if (faults & bit) s += (s.empty() ? "" : ",") + std::string(name);
  return s.empty() ? "none" : s;
}

}  // namespace aryl::simtest
