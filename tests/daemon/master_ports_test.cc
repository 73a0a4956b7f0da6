// MasterPorts (scheduler/daemon/src/master_ports.h): a port is taken on the
// host of the rank 0 that holds it only, and a start asks about the ports it
// tries, not about every job.
#include "master_ports.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

namespace aryl::daemon {
namespace {

struct Held {
  std::string host;
  int port = 0;
  bool workers = true;
};

class MasterPortsTest : public ::testing::Test {
 protected:
  std::map<protocol::JobId, Held> jobs;
  int asked = 0;  // holds() calls: the work a pick did
  MasterPorts ports;
  MasterPorts::Holds holds = [this](protocol::JobId job, const std::string& host, int port) {
    ++asked;
    auto it = jobs.find(job);
    return it != jobs.end() && it->second.host == host && it->second.port == port && it->second.workers;
  };
  std::optional<int> Pick(const PortRange& range, protocol::JobId job, const std::string& host,
                          std::uint64_t salt = 7) {
    auto port = ports.Pick(range, salt, job, host, holds, nullptr);
    if (port) jobs[job] = {host, *port};
    return port;
  }
};

TEST_F(MasterPortsTest, APortIsTakenOnItsOwnHostOnly) {
  const PortRange one{30000, 30000};
  ASSERT_EQ(Pick(one, 1, "t1"), 30000);
  EXPECT_EQ(Pick(one, 2, "t1"), std::nullopt) << "two jobs' rank 0 on t1 would both listen on 30000";
  EXPECT_EQ(Pick(one, 3, "t2"), 30000) << "t2's 30000 is free";
  // Job 1 ends (or is given another port): its entry is dropped when met.
  jobs.erase(1);
  EXPECT_EQ(Pick(one, 2, "t1"), 30000);
  // A holder without live workers (it starts afresh, with a new pick) does not take it.
  jobs[2].workers = false;
  EXPECT_EQ(Pick(one, 4, "t1"), 30000);
}

TEST_F(MasterPortsTest, ThePickersOwnEntryIsNotAConflict) {
  const PortRange one{30000, 30000};
  ASSERT_EQ(Pick(one, 1, "t1"), 30000);
  EXPECT_EQ(Pick(one, 1, "t1"), 30000) << "a job's next start may keep its own port";
}

TEST_F(MasterPortsTest, BusyPortsOfTheMachineAreSkipped) {
  const PortRange two{30000, 30001};
  auto p = ports.Pick(two, 7, 1, "127.0.0.1", holds, [](int port) { return port == 30000; });
  EXPECT_EQ(p, 30001);
}

// More running jobs than ports, spread over many hosts (100,000 jobs, 12,768
// ports, 10,000 hosts): a start on a host asks about a few holders, where a
// port index shared by every host had every port taken and tried them all.
TEST_F(MasterPortsTest, AStartsCostDoesNotGrowWithTheClustersJobs) {
  const PortRange range;  // 20000-32767
  for (protocol::JobId j = 1; j <= 100'000; ++j)
    ASSERT_TRUE(Pick(range, j, "h" + std::to_string(j % 10'000), j * 0x9E3779B97F4A7C15ull)) << j;
  EXPECT_EQ(ports.entries(), 100'000u);
  asked = 0;
  for (protocol::JobId j = 100'001; j <= 100'100; ++j)
    ASSERT_TRUE(Pick(range, j, "h" + std::to_string(j % 10'000), j * 0xC2B2AE3D27D4EB4Full));
  EXPECT_LE(asked, 100) << "100 starts asked about " << asked << " holders";
}

}  // namespace
}  // namespace aryl::daemon
