// SecurityTest: LiveCluster with real CURVE keys for the scheduler, agents a and
// b, users alice and bob and operator ops (the roles of docs/security.md).
#pragma once

#include <sys/stat.h>

#include <sstream>

#include "../system/live_cluster.h"
#include "aryl/daemon/http_server.h"
#include "aryl/protocol/security.h"

namespace aryl::securitytest {

using namespace aryl::livetest;

inline unsigned Mode(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 07777;
  return st.st_mode & 07777;
}

class SecurityTest : public LiveCluster {
 protected:
  // Keys: the scheduler, agents a and b, users alice and bob, operator ops.
  void MakeKeys() {
    keys_ = dir_ / "keys";
    for (const char* n : {"scheduler", "a", "b", "alice", "bob", "ops"})
      ASSERT_TRUE(p::GenerateKeyPair(keys_.string(), n).ok());
    for (auto [list, names] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"agents", {"a", "b"}}, {"users", {"alice", "bob"}}, {"operators", {"ops"}}}) {
      fs::create_directories(dir_ / list);
      for (const auto& n : names) fs::copy_file(keys_ / (n + ".pub"), dir_ / list / (n + ".pub"));
    }
  }
  std::vector<std::string> CurveFlags() {
    return {"--curve-key", (keys_ / "scheduler.key").string(), "--curve-agents", (dir_ / "agents").string(),
            "--curve-users", (dir_ / "users").string(), "--curve-operators", (dir_ / "operators").string()};
  }
  std::vector<std::string> AgentCurve(const std::string& key) {
    return {"--curve-key", (keys_ / (key + ".key")).string(), "--curve-server-key", (keys_ / "scheduler.pub").string()};
  }
  std::unique_ptr<p::Client> As(const std::string& key, const std::string& identity = "") {
    auto kp = p::LoadKeyPair((keys_ / (key + ".key")).string());
    auto server = p::LoadPublicKey((keys_ / "scheduler.pub").string());
    EXPECT_TRUE(kp.ok() && server.ok());
    endpoint_given_ = true;
    p::Client::Options o;
    o.endpoint = endpoint_;
    o.identity = identity;
    o.curve = p::CurveClientKeys{kp->public_key, kp->secret_key, *server};
    auto c = p::Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  double Metric(const std::string& name) {
    auto r = daemon::HttpGet("127.0.0.1", http_port_, "/metrics");
    if (!r.ok()) return -1;
    double sum = 0;
    std::istringstream in(r->second);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind(name, 0) == 0 && (line[name.size()] == ' ' || line[name.size()] == '{'))
        sum += std::stod(line.substr(line.rfind(' ') + 1));
    return sum;
  }
  // A CURVE cluster with agent "a" (2 slots) connected, seen by operator `ops`.
  std::unique_ptr<p::Client> CurveCluster() {
    MakeKeys();
    StartScheduler(CurveFlags());
    StartAgent("a", 2, "training", AgentCurve("a"));
    auto ops = As("ops");
    EXPECT_TRUE(WaitAgents(*ops, 1)) << Logs();
    return ops;
  }
  fs::path keys_;
};

}  // namespace aryl::securitytest
