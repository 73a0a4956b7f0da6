// FreeIndex (scheduler/core/src/round.h): the round's index of free GPUs per
// server. Its queries must name the same server as a scan of every server.
#include <gtest/gtest.h>

#include <random>

#include "round.h"
#include "test_util.h"

namespace aryl::sched::internal {
namespace {

using testing::Catalog;
using testing::Servers;

// Best fit by scanning: the server with the smallest free count >= n (lowest
// index on ties), else the one with the largest free count; -1 when none is free.
int ScanPick(const std::vector<int>& avail, int n) {
  int fit = -1, largest = -1;
  for (int i = 0; i < static_cast<int>(avail.size()); ++i) {
    if (avail[i] <= 0) continue;
    if (avail[i] >= n && (fit < 0 || avail[i] < avail[fit])) fit = i;
    if (largest < 0 || avail[i] > avail[largest]) largest = i;
  }
  return fit >= 0 ? fit : largest;
}

// A cluster of 200 servers (four bitset words per bucket) that fills from the
// front, then frees servers here and there: every query agrees with the scan,
// also after a server below the ones a query last found frees up.
TEST(FreeIndexTest, PickAgreesWithAScanAsServersFillAndFree) {
  auto st = ClusterState::Create(Servers(200, 0), Catalog(), SchedulerConfig{});
  ASSERT_TRUE(st.ok()) << st.status();
  std::vector<int> avail(200, 8);
  FreeIndex index(*st, avail, std::vector<bool>(200, true));
  std::mt19937 rng(7);
  for (int step = 0; step < 4000; ++step) {
    // Mostly fill the lowest server that has room; sometimes free one.
    if (rng() % 4 == 0) {
      const int s = static_cast<int>(rng() % 200);
      avail[s] = static_cast<int>(rng() % 9);
      index.Set(s, avail[s]);
    } else {
      const int s = ScanPick(avail, 1 + static_cast<int>(rng() % 8));
      if (s < 0) continue;
      const int n = 1 + static_cast<int>(rng() % avail[s]);
      avail[s] -= n;
      index.Take(s, n);
    }
    for (int n = 1; n <= 8; ++n) {
      ASSERT_EQ(index.Pick(0, true, false, n, false), ScanPick(avail, n))
          << "step " << step << ", n " << n;
    }
  }
  // A server freed below every one a query has found is found again.
  for (int s = 0; s < 200; ++s) index.Set(s, 0);
  EXPECT_EQ(index.Pick(0, true, false, 1, false), -1);
  index.Set(199, 8);
  EXPECT_EQ(index.Pick(0, true, false, 8, false), 199);
  index.Set(3, 8);
  EXPECT_EQ(index.Pick(0, true, false, 8, false), 3);
}

}  // namespace
}  // namespace aryl::sched::internal
