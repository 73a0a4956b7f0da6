#include "aryl/port_range.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <set>

namespace aryl {
namespace {

TEST(PortRangeTest, ParsesAndNamesBadText) {
  auto r = ParsePortRange("21000-21009");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lo, 21000);
  EXPECT_EQ(r->hi, 21009);
  EXPECT_EQ(r->size(), 10);
  EXPECT_EQ(r->ToString(), "21000-21009");
  for (const char* bad : {"", "21000", "21000-", "-21009", "x-21009", "21009-21000", "80-90", "60000-70000", "1 - 2"}) {
    auto b = ParsePortRange(bad);
    EXPECT_FALSE(b.ok()) << bad;
    EXPECT_TRUE(b.status().IsInvalidArgument()) << bad;
    EXPECT_NE(b.status().message().find("LO"), std::string::npos) << b.status().message();
  }
}

TEST(PortRangeTest, DefaultIsBelowLinuxsDefaultEphemeralRange) {
  EXPECT_FALSE(PortRange{}.Overlaps(PortRange{32768, 60999}));
  EXPECT_TRUE(PortRange{}.Overlaps(PortRange{32000, 60999}));
}

TEST(PortRangeTest, ReadsTheEphemeralRangeFile) {
  const std::string path = ::testing::TempDir() + "/ip_local_port_range";
  std::ofstream(path) << "32768\t60999\n";
  auto r = EphemeralPortRange(path);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, (PortRange{32768, 60999}));
  std::ofstream(path) << "garbage\n";
  EXPECT_FALSE(EphemeralPortRange(path).has_value());
  EXPECT_FALSE(EphemeralPortRange(path + ".missing").has_value());
}

TEST(PortRangeTest, PickSkipsTakenPortsWrapsAndSpreadsSalts) {
  const PortRange range{21000, 21009};
  std::set<int> firsts;
  for (std::uint64_t salt = 0; salt < 50; ++salt) {
    auto p = PickPort(range, salt, [](int) { return false; });
    ASSERT_TRUE(p.has_value());
    EXPECT_TRUE(range.Contains(*p));
    EXPECT_EQ(PickPort(range, salt, [](int) { return false; }), p) << "deterministic";
    firsts.insert(*p);
  }
  EXPECT_GE(firsts.size(), 8u) << "salts start all over the range";
  // Everything but the lowest port taken: the pick wraps around to it.
  EXPECT_EQ(PickPort(range, 7, [&](int port) { return port != range.lo; }), range.lo);
  EXPECT_FALSE(PickPort(range, 7, [](int) { return true; }).has_value());
}

TEST(PortRangeTest, ABoundListenerMakesItsPortUnbindable) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  EXPECT_FALSE(PortBindable(port)) << port;
  ::close(fd);
  EXPECT_TRUE(PortBindable(port)) << port;
}

}  // namespace
}  // namespace aryl
