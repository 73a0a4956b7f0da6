#include "node_registry.h"

#include <gtest/gtest.h>

#include <string>

namespace aryl::daemon {
namespace {

// A registry with the given nodes, connected or not.
NodeRegistry WithNodes(std::initializer_list<std::pair<const char*, bool>> nodes) {
  NodeRegistry r;
  for (const auto& [id, connected] : nodes) {
    LiveNode& n = r.nodes()[id];
    n.id = id;
    r.SetConnected(n, connected);
    r.AssignServer(n);
  }
  return r;
}

std::vector<std::string> Names(const std::vector<NodeRegistry::Lost>& lost) {
  std::vector<std::string> out;
  for (const auto& l : lost) out.push_back(l.node + (l.timed_out ? ":timeout" : ":gone"));
  return out;
}

const auto kNoneGone = [](const LiveNode&) { return false; };

// New nodes get the next server id, and the id maps back to the node.
TEST(NodeRegistry, AssignsServerIdsInOrder) {
  NodeRegistry r = WithNodes({{"a", true}, {"b", true}});
  EXPECT_EQ(r.nodes().at("a").server_id, 0u);
  EXPECT_EQ(r.nodes().at("b").server_id, 1u);
  EXPECT_EQ(r.node_by_server().at(1), "b");
  // After a reload that kept only server 5, the next one is 6.
  std::map<std::string, LiveNode> nodes;
  nodes["x"].id = "x";
  nodes["x"].server_id = 5;
  r.Replace(nodes, {{5, "x"}});
  LiveNode& y = r.nodes()["y"];
  y.id = "y";
  r.AssignServer(y);
  EXPECT_EQ(y.server_id, 6u);
  EXPECT_EQ(r.Find("y"), &y);
  EXPECT_EQ(r.Find("a"), nullptr);
}

// A node heard at wall t carries t and the watch time of then.
TEST(NodeRegistry, HeardRecordsWallAndWatchTime) {
  NodeRegistry r = WithNodes({{"a", true}});
  r.Watch(100, true);  // the first tick: one capped step
  r.Watch(100.2, true);
  EXPECT_NEAR(r.watch_now(), NodeRegistry::kMaxWatchStep + 0.2, 1e-9);
  LiveNode& a = r.nodes().at("a");
  r.Heard(a, 100.2);
  EXPECT_DOUBLE_EQ(a.last_heartbeat, 100.2);
  EXPECT_DOUBLE_EQ(a.heard_at, r.watch_now());
  EXPECT_TRUE(a.heard_here);
}

// A gap between two ticks (a paused process) adds at most kMaxWatchStep, a
// clock going back adds nothing, and a full receive batch stops the clock.
TEST(NodeRegistry, WatchStepIsCapped) {
  NodeRegistry r;
  r.Watch(0, true);
  EXPECT_DOUBLE_EQ(r.watch_now(), 0);
  r.Watch(0.1, true);
  EXPECT_DOUBLE_EQ(r.watch_now(), 0.1);
  r.Watch(3600, true);  // an hour's pause
  EXPECT_DOUBLE_EQ(r.watch_now(), 0.1 + NodeRegistry::kMaxWatchStep);
  r.Watch(3599, true);  // the wall clock stepped back
  EXPECT_DOUBLE_EQ(r.watch_now(), 0.1 + NodeRegistry::kMaxWatchStep);
  r.Watch(3599.2, false);  // a backlog: the clock stands still
  EXPECT_DOUBLE_EQ(r.watch_now(), 0.1 + NodeRegistry::kMaxWatchStep);
  r.Watch(3599.3, true);  // and goes on from the newest tick
  EXPECT_NEAR(r.watch_now(), 0.2 + NodeRegistry::kMaxWatchStep, 1e-9);
}

// A connected node silent for more than the timeout of watch time is lost; a
// pause of the scheduler longer than the timeout is not silence.
TEST(NodeRegistry, TimesOutOnWatchTimeOnly) {
  NodeRegistry r = WithNodes({{"a", true}, {"b", true}});
  double wall = 1000;
  r.Watch(wall, true);
  r.Heard(r.nodes().at("a"), wall);
  r.Heard(r.nodes().at("b"), wall);
  wall += 60;  // paused for a minute: one step
  r.Watch(wall, true);
  EXPECT_TRUE(r.LostNodes(10, kNoneGone).empty());
  for (int i = 0; i < 95; ++i) {  // 9.5 s of ticks; b keeps talking
    wall += 0.1;
    r.Watch(wall, true);
    r.Heard(r.nodes().at("b"), wall);
  }
  // a: 69.5 s of wall time since it was heard, 9.75 s of watch time.
  EXPECT_TRUE(r.LostNodes(10, kNoneGone).empty());
  for (int i = 0; i < 5; ++i) r.Watch(wall += 0.1, true);  // 10.25 s
  EXPECT_EQ(Names(r.LostNodes(10, kNoneGone)), std::vector<std::string>{"a:timeout"});
}

// Disconnected nodes are lost only when the caller says they never came back;
// they are never timed out.
TEST(NodeRegistry, NeverCameBackIsTheCallersAnswer) {
  NodeRegistry r = WithNodes({{"a", false}, {"b", false}, {"c", true}});
  r.Watch(0, true);
  r.Heard(r.nodes().at("c"), 0);
  for (int i = 1; i <= 100; ++i) r.Watch(0.25 * i, true);  // 25 s
  auto lost = r.LostNodes(10, [](const LiveNode& n) { return n.id == "b"; });
  EXPECT_EQ(Names(lost), (std::vector<std::string>{"b:gone", "c:timeout"}));
}

// The liveness index follows every change of a node: heard again (the
// order of silence changes), failed, registered again, and a reload of the
// nodes (Replace) that kept connection state; the answer stays in node order
// and equals a walk over every node.
TEST(NodeRegistry, LostNodesFollowsConnectionChanges) {
  NodeRegistry r = WithNodes({{"a", true}, {"b", true}, {"c", true}, {"d", false}});
  double wall = 0;
  r.Watch(wall, true);
  for (const char* id : {"c", "b", "a"}) r.Heard(r.nodes().at(id), wall);
  auto tick = [&](int n) {
    for (int i = 0; i < n; ++i) r.Watch(wall += 0.25, true);
  };
  tick(20);  // 5 s
  r.Heard(r.nodes().at("c"), wall);  // c heard last now
  tick(24);  // a, b: 11 s; c: 6 s
  auto d_gone = [](const LiveNode& n) { return n.id == "d"; };
  EXPECT_EQ(Names(r.LostNodes(10, d_gone)), (std::vector<std::string>{"a:timeout", "b:timeout", "d:gone"}));
  EXPECT_EQ(r.connected_count(), 3);
  r.SetConnected(r.nodes().at("a"), false);  // failed: no longer timed out
  r.SetConnected(r.nodes().at("d"), true);   // registered...
  r.Heard(r.nodes().at("d"), wall);          // ...and heard
  EXPECT_EQ(Names(r.LostNodes(10, kNoneGone)), std::vector<std::string>{"b:timeout"});
  EXPECT_EQ(r.connected_count(), 3);
  // A reload keeps what memory knew of each node, the index is rebuilt.
  r.Replace(r.nodes(), r.node_by_server());
  tick(20);  // c: 11 s, d: 5 s
  EXPECT_EQ(Names(r.LostNodes(10, kNoneGone)), (std::vector<std::string>{"b:timeout", "c:timeout"}));
  EXPECT_EQ(Names(r.LostNodes(10, [](const LiveNode& n) { return n.id == "a"; })),
            (std::vector<std::string>{"a:gone", "b:timeout", "c:timeout"}));
  // A second SetConnected of the same state changes nothing.
  r.SetConnected(r.nodes().at("b"), true);
  EXPECT_EQ(r.connected_count(), 3);
  EXPECT_EQ(Names(r.LostNodes(10, kNoneGone)), (std::vector<std::string>{"b:timeout", "c:timeout"}));
}

// The lease: the agent's lease, its stop grace and a margin after it was heard.
TEST(NodeRegistry, LeaseExpiry) {
  EXPECT_DOUBLE_EQ(NodeRegistry::LeaseExpiry(100, 10),
                   100 + 10 + p::kLeaseStopGraceSeconds + 1.0 + 0.1);
  EXPECT_GT(NodeRegistry::LeaseExpiry(100, 30), NodeRegistry::LeaseExpiry(100, 10));
}

}  // namespace
}  // namespace aryl::daemon
