// Run-as-user (agent/src/run_as.h): the owner map, SO_PEERCRED addresses, and
// a real child that drops to another account before chdir and exec.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "../../agent/src/run_as.h"
#include "aryl/agent/process.h"
#include "aryl/protocol/transport.h"

namespace aryl::agent {
namespace {

namespace fs = std::filesystem;

TEST(UserMap, ParsesOwnersAndFallback) {
  auto m = UserMap::Parse("# owners\nalice nobody  # a comment\n\n* daemon\n", "map");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->size(), 2u);
  auto a = m->Lookup("alice");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->name, "nobody");
  EXPECT_EQ(a->credentials.uid, 65534u);
  auto rest = m->Lookup("carol");
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->name, "daemon");
}

TEST(UserMap, ErrorsNameFileAndLine) {
  auto missing = UserMap::Parse("alice nobody\nbob no-such-account-here\n", "/etc/aryl/users");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/etc/aryl/users:2"), std::string::npos) << missing.status();
  EXPECT_NE(missing.status().message().find("no-such-account-here"), std::string::npos) << missing.status();
  auto root = UserMap::Parse("alice root\n", "m");
  ASSERT_FALSE(root.ok());
  EXPECT_NE(root.status().message().find("m:1"), std::string::npos) << root.status();
  auto twice = UserMap::Parse("alice nobody\nalice daemon\n", "m");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("mapped twice"), std::string::npos);
  auto extra = UserMap::Parse("alice nobody extra\n", "m");
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.status().message().find("m:1"), std::string::npos);
  auto none = UserMap::Parse("alice nobody\n", "m");
  ASSERT_TRUE(none.ok());
  auto bob = none->Lookup("bob");
  ASSERT_FALSE(bob.ok());
  EXPECT_TRUE(bob.status().IsPermissionDenied());
  EXPECT_NE(bob.status().message().find("'bob'"), std::string::npos);
}

TEST(PeerUid, ParsesZeroMqIpcAddress) {
  using aryl::protocol::IpcPeerUid;
  EXPECT_EQ(IpcPeerUid("localhost:65534:65534:4242"), std::optional<std::uint32_t>(65534));
  EXPECT_EQ(IpcPeerUid("host:with:colons:0:0:1"), std::optional<std::uint32_t>(0));
  EXPECT_EQ(IpcPeerUid(""), std::nullopt);
  EXPECT_EQ(IpcPeerUid("127.0.0.1"), std::nullopt);
  EXPECT_EQ(IpcPeerUid("localhost:x:0:1"), std::nullopt);
}

std::string WaitRead(const fs::path& path, ProcessLauncher& l) {
  for (int i = 0; i < 200 && l.size() > 0; ++i) {
    l.Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The child runs with the account's uid and groups, and changes directory
// with the account's rights, not the launcher's.
TEST(RunAs, ChildDropsToAccountBeforeChdirAndExec) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch accounts (euid " << ::geteuid() << ")";
  auto account = ResolveAccount("nobody");
  ASSERT_TRUE(account.ok()) << account.status();
  fs::path dir = fs::temp_directory_path() / ("aryl-runas-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ProcessLauncher l;
  LaunchSpec spec;
  spec.argv = {"/bin/sh", "-c", "id -u; id -g; id -G; pwd"};
  spec.cwd = "/tmp";
  spec.stdout_path = (dir / "out").string();
  spec.run_as = account->credentials;
  ASSERT_TRUE(l.Launch(spec).ok());
  std::string out = WaitRead(dir / "out", l);
  EXPECT_EQ(out, "65534\n65534\n65534\n/tmp\n");
  // /root is 0700 root: the account may not enter it, though the launcher may.
  ASSERT_EQ(fs::status(fs::path("/root")).permissions() & fs::perms::others_exec, fs::perms::none);
  spec.cwd = "/root";
  auto refused = l.Launch(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("chdir /root"), std::string::npos) << refused.status();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace aryl::agent
