// The agent's lease from the scheduler (lease.h) and the store probe that
// keeps store queries off the agent's loop (store_probe.h).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "lease.h"
#include "store_probe.h"

namespace aryl::agent {
namespace {

// The lease counts from the send time of the acknowledged heartbeat, not from
// when the acknowledgement arrived: the scheduler, which counts from receipt,
// always sees it expire later than the agent does.
TEST(SchedulerLease, RunsFromTheSendTimeOfTheAcknowledgedHeartbeat) {
  SchedulerLease lease;
  EXPECT_FALSE(lease.held());
  EXPECT_FALSE(lease.Expired(1e9));  // never granted: nothing to expire
  lease.Renew(/*sent=*/100, /*lease=*/10);
  lease.Sent(1, 104);
  lease.Sent(2, 105);
  lease.Acked(2, 10);  // arrives at, say, 109
  EXPECT_DOUBLE_EQ(lease.until(), 115);
  EXPECT_FALSE(lease.Expired(114.9));
  EXPECT_TRUE(lease.Expired(115));
}

// An acknowledgement of an older heartbeat (reordered, or for a seq this agent
// never sent) never shortens or invents a lease.
TEST(SchedulerLease, OlderAndUnknownAcknowledgementsChangeNothing) {
  SchedulerLease lease;
  lease.Sent(1, 10);
  lease.Sent(2, 20);
  lease.Acked(7, 10);
  EXPECT_FALSE(lease.held());
  lease.Acked(2, 10);
  lease.Acked(1, 10);  // already superseded (dropped with 2)
  EXPECT_DOUBLE_EQ(lease.until(), 30);
}

// After the workers were stopped (Drop), only a new grant holds a lease again.
TEST(SchedulerLease, DropNeedsANewGrant) {
  SchedulerLease lease;
  lease.Renew(0, 5);
  ASSERT_TRUE(lease.Expired(6));
  lease.Drop();
  EXPECT_FALSE(lease.held());
  EXPECT_FALSE(lease.Expired(7));
  lease.Renew(7, 5);
  EXPECT_TRUE(lease.held());
  EXPECT_FALSE(lease.Expired(11));
}

// A relay whose Ready blocks until released: a store that stopped answering.
class BlockingRelay : public StoreRelay {
 public:
  Result<std::string> Serve(const std::string&, int) override { return std::string("tcp://127.0.0.1:1"); }
  Result<bool> Ready(const std::string&, const std::string&, const std::vector<std::string>&) override {
    calls++;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return true;
  }
  Result<std::optional<std::string>> Report(const std::string&, const std::string&, std::int64_t) override {
    return std::optional<std::string>("r");
  }
  Status RequestCheckpoint(const std::string&, const std::string&) override { return Status::Ok(); }
  void Forget(const std::string&) override {}
  std::atomic<bool> release{false};
  std::atomic<int> calls{0};
};

// A query that hangs does not hang the caller: Ask returns at once, Take has
// no answer until the query finishes, and asking again under the same key
// while it runs does not queue a second copy.
TEST(StoreProbe, AHangingQueryNeverBlocksTheCaller) {
  auto relay = std::make_shared<BlockingRelay>();
  StoreProbe probe(relay);
  auto ask = [&] {
    probe.Ask("job/ready/2000", [](StoreRelay& r) { return r.Ready("e", "job", {"1"}); });
  };
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    ask();
    EXPECT_FALSE(probe.Take("job/ready/2000").has_value());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  relay->release = true;
  std::optional<Result<bool>> answer;
  for (int i = 0; i < 400 && !answer; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    answer = probe.Take("job/ready/2000");
  }
  ASSERT_TRUE(answer.has_value());
  ASSERT_TRUE(answer->ok());
  EXPECT_TRUE(**answer);
  EXPECT_EQ(relay->calls.load(), 1);
}

// A cancelled key's late answer is dropped, and the key can be asked afresh.
TEST(StoreProbe, CancelDropsALateAnswer) {
  auto relay = std::make_shared<BlockingRelay>();
  StoreProbe probe(relay);
  probe.Ask("k", [](StoreRelay& r) { return r.Ready("e", "job", {"1"}); });
  while (relay->calls == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  probe.Cancel("k");
  relay->release = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(probe.Take("k").has_value());
  probe.Ask("k", [](StoreRelay&) -> Result<bool> { return false; });
  std::optional<Result<bool>> answer;
  for (int i = 0; i < 400 && !answer; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    answer = probe.Take("k");
  }
  ASSERT_TRUE(answer.has_value());
  EXPECT_FALSE(**answer);
}

}  // namespace
}  // namespace aryl::agent
