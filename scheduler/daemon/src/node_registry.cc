#include "node_registry.h"

#include <algorithm>

namespace aryl::daemon {

const LiveNode* NodeRegistry::Find(const std::string& id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

void NodeRegistry::AssignServer(Node& n) {
  n.server_id = node_by_server_.empty() ? 0 : node_by_server_.rbegin()->first + 1;
  node_by_server_[n.server_id] = n.id;
}

void NodeRegistry::Replace(std::map<std::string, Node> nodes,
                           std::map<s::ServerId, std::string> by_server) {
  nodes_ = std::move(nodes);
  node_by_server_ = std::move(by_server);
}

const std::set<std::pair<p::JobId, p::WorkerId>>& NodeRegistry::WorkersOn(
    const std::string& node) const {
  static const std::set<std::pair<p::JobId, p::WorkerId>> kNone;
  auto on = workers_on_.find(node);
  return on == workers_on_.end() ? kNone : on->second;
}

void NodeRegistry::Index(const std::string& node, p::JobId job, p::WorkerId worker) {
  workers_on_[node].insert({job, worker});
}

void NodeRegistry::Unindex(const std::string& node, p::JobId job, p::WorkerId worker) {
  auto on = workers_on_.find(node);
  if (on == workers_on_.end()) return;
  on->second.erase({job, worker});
  if (on->second.empty()) workers_on_.erase(on);
}

void NodeRegistry::Heard(Node& n, double wall_now) {
  n.last_heartbeat = wall_now;
  n.heard_at = watch_now_;
  n.heard_here = true;
}

void NodeRegistry::Watch(double wall_now, bool drained) {
  double step = std::clamp(wall_now - watch_wall_, 0.0, kMaxWatchStep);
  watch_wall_ = wall_now;
  if (drained) watch_now_ += step;
}

std::vector<NodeRegistry::Lost> NodeRegistry::LostNodes(
    double timeout, const std::function<bool(const Node&)>& never_came_back) const {
  std::vector<Lost> lost;
  for (const auto& [id, n] : nodes_) {
    bool timed_out = n.connected && watch_now_ - n.heard_at > timeout;
    if (timed_out || (!n.connected && never_came_back(n))) lost.push_back({id, timed_out});
  }
  return lost;
}

double NodeRegistry::LeaseExpiry(double heard, double lease) {
  return heard + lease + p::kLeaseStopGraceSeconds + 1.0 + 0.01 * lease;
}

}  // namespace aryl::daemon
