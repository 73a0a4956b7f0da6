// The agent's --host (host_address.h): always a numeric IPv4 address of this
// server, since ZeroMQ does not resolve names when it binds; a value that is
// not one is a usage error naming --host.
#include "host_address.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace aryl::agent {
namespace {

bool IsDottedIpv4(const std::string& s) {
  in_addr a{};
  return ::inet_pton(AF_INET, s.c_str(), &a) == 1;
}

std::string HostName() {
  char buf[256] = {0};
  return ::gethostname(buf, sizeof(buf) - 1) == 0 ? std::string(buf) : std::string("localhost");
}

// Without --host and with an ipc:// scheduler (the README's agent): an address,
// never the host name, whatever the host name resolves to.
TEST(ChooseHost, WithoutHostAndIpcSchedulerIsANumericAddress) {
  auto c = ChooseHost("", "ipc:///tmp/aryl/scheduler.sock");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(IsDottedIpv4(c->address)) << c->address;
  EXPECT_NE(c->address, HostName());
  EXPECT_FALSE(c->why.empty());
  EXPECT_TRUE(c->warning.empty()) << c->warning;
}

// A tcp:// scheduler on loopback: the address of the route to it.
TEST(ChooseHost, WithoutHostAndTcpSchedulerIsTheRoutesAddress) {
  auto c = ChooseHost("", "tcp://127.0.0.1:7117");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->address, "127.0.0.1");
  EXPECT_NE(c->why.find("routes to the scheduler"), std::string::npos) << c->why;
}

// A name (this server's own) is resolved to one of its addresses.
TEST(ChooseHost, AGivenNameIsResolved) {
  for (const std::string name : {HostName(), std::string("localhost")}) {
    auto c = ChooseHost(name, "ipc:///tmp/s.sock");
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_TRUE(IsDottedIpv4(c->address)) << name << " -> " << c->address;
  }
  auto lo = ChooseHost("127.0.0.1", "ipc:///tmp/s.sock");
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(lo->address, "127.0.0.1");
}

// What the agent cannot bind, or peers cannot reach, is refused naming --host.
TEST(ChooseHost, AnUnusableHostIsAUsageErrorNamingTheFlag) {
  for (const std::string bad : {"no-such-host.invalid", "203.0.113.7", "0.0.0.0", "*", "fe80::1", "256.1.1.1x"}) {
    auto c = ChooseHost(bad, "ipc:///tmp/s.sock");
    ASSERT_FALSE(c.ok()) << bad << " -> " << c->address;
    EXPECT_TRUE(c.status().IsInvalidArgument()) << c.status();
    EXPECT_EQ(c.status().message().rfind("--host '" + bad + "': ", 0), 0u) << c.status();
  }
}

// Loopback with a scheduler on another server: chosen as asked, with a warning.
TEST(ChooseHost, LoopbackWithARemoteSchedulerWarns) {
  // 192.0.2.1 (TEST-NET-1) stands for a remote scheduler: only a route is looked
  // up, nothing is sent. Without a default route there is nothing to compare.
  auto c = ChooseHost("127.0.0.1", "tcp://192.0.2.1:7117");
  ASSERT_TRUE(c.ok()) << c.status();
  auto routed = ChooseHost("", "tcp://192.0.2.1:7117");
  ASSERT_TRUE(routed.ok());
  if (IsLoopbackAddress(routed->address)) GTEST_SKIP() << "no route off this machine";
  EXPECT_NE(c->warning.find("loopback"), std::string::npos) << c->warning;
  EXPECT_NE(c->warning.find("--host " + routed->address), std::string::npos) << c->warning;
}

}  // namespace
}  // namespace aryl::agent
