#include "node_registry.h"

#include <algorithm>
#include <iterator>

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
  silence_.clear();
  in_silence_.clear();
  down_.clear();
  std::vector<Node*> by_heard;
  for (auto& [id, n] : nodes_) by_heard.push_back(&n);
  std::stable_sort(by_heard.begin(), by_heard.end(), [](const Node* a, const Node* b) { return a->heard_at < b->heard_at; });
  for (Node* n : by_heard) List(*n);
}

void NodeRegistry::List(Node& n) {
  if (!n.connected) {
    down_[n.id] = &n;
    return;
  }
  // In heard_at order: at the end, but for a node connected again that was
  // heard before others (Heard moves it to the end next).
  auto at = silence_.end();
  while (at != silence_.begin() && (*std::prev(at))->heard_at > n.heard_at) --at;
  in_silence_[n.id] = silence_.insert(at, &n);
}

void NodeRegistry::Unlist(const Node& n) {
  if (auto it = in_silence_.find(n.id); it != in_silence_.end()) {
    silence_.erase(it->second);
    in_silence_.erase(it);
  }
  down_.erase(n.id);
}

void NodeRegistry::SetConnected(Node& n, bool connected) {
  Unlist(n);
  n.connected = connected;
  List(n);
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
  if (auto it = in_silence_.find(n.id); it != in_silence_.end())  // connected: now the newest heard
    silence_.splice(silence_.end(), silence_, it->second);
}

void NodeRegistry::Watch(double wall_now, bool drained) {
  double step = std::clamp(wall_now - watch_wall_, 0.0, kMaxWatchStep);
  watch_wall_ = wall_now;
  if (drained) watch_now_ += step;
}

std::vector<NodeRegistry::Lost> NodeRegistry::LostNodes(
    double timeout, const std::function<bool(const Node&)>& never_came_back) const {
  std::vector<Lost> lost;
  // The silent first: the walk stops at the first node heard recently enough.
  for (auto it = silence_.begin(); it != silence_.end() && watch_now_ - (*it)->heard_at > timeout; ++it)
    lost.push_back({(*it)->id, true});
  for (const auto& [id, n] : down_)
    if (never_came_back(*n)) lost.push_back({id, false});
  std::sort(lost.begin(), lost.end(), [](const Lost& a, const Lost& b) { return a.node < b.node; });
  return lost;
}

double NodeRegistry::LeaseExpiry(double heard, double lease) {
  return heard + lease + p::kLeaseStopGraceSeconds + 1.0 + 0.01 * lease;
}

}  // namespace aryl::daemon
