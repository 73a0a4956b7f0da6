#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <chrono>
#include <thread>

#include "aryl/protocol/generation.h"
#include "comm/fake/fake_communicator.h"
#include "comm/gloo/gloo_communicator.h"
#include "rendezvous.h"

namespace aryl {
namespace {

using std::chrono::milliseconds;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Builds `size` communicators of `backend` with ranks as threads and runs `body` on each.
template <typename Body>
void RunRanks(const std::string& backend, int size, milliseconds timeout, Body body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  static int world_counter = 0;
  std::string key = backend + std::to_string(world_counter++);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm;
      if (backend == "fake") {
        comm = CreateFakeCommunicator(key, r, size, timeout);
      } else {
        auto c = CreateGlooCommunicator(c10::make_intrusive<c10d::PrefixStore>(key, store), r, size, "127.0.0.1",
                                        timeout);
        ASSERT_TRUE(c.ok()) << c.status();
        comm = std::move(*c);
      }
      body(*comm);
    });
  }
  for (auto& t : threads) t.join();
}

class CommunicatorTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Sums two buckets and broadcasts from the last rank.
TEST_P(CommunicatorTest, AllReduceAndBroadcast) {
  auto [backend, size] = GetParam();
  RunRanks(backend, size, milliseconds(5000), [size = size](Communicator& c) {
    std::vector<float> a(1000, float(c.Rank() + 1));
    std::vector<double> b(3, 0.5);
    BufferView views[] = {{a.data(), a.size(), DataType::kFloat32}, {b.data(), b.size(), DataType::kFloat64}};
    ASSERT_TRUE(c.AllReduceSum(views).ok());
    EXPECT_EQ(a[999], float(size * (size + 1) / 2));
    EXPECT_EQ(b[0], 0.5 * size);
    std::vector<uint8_t> bytes(17, uint8_t(c.Rank()));
    ASSERT_TRUE(c.Broadcast({bytes.data(), bytes.size(), DataType::kUInt8}, size - 1).ok());
    EXPECT_EQ(bytes[16], uint8_t(size - 1));
  });
}

// A rank alone in a collective gets a Timeout within the configured time.
// Needs a peer that stays away, so it runs at world sizes 2 and 3 only.
class CommunicatorTimeoutTest : public CommunicatorTest {};

TEST_P(CommunicatorTimeoutTest, RankAloneTimesOut) {
  auto [backend, size] = GetParam();
  RunRanks(backend, size, milliseconds(800), [](Communicator& c) {
    if (c.Rank() != 0) {
      std::this_thread::sleep_for(milliseconds(4000));  // never joins the collective
      return;
    }
    std::vector<float> a(10, 1.f);
    BufferView v{a.data(), a.size(), DataType::kFloat32};
    auto t0 = std::chrono::steady_clock::now();
    Status s = c.AllReduceSum({&v, 1});
    double took = Seconds(t0);
    EXPECT_TRUE(s.IsTimeout()) << s;
    EXPECT_TRUE(s.IsRetryable());
    EXPECT_GE(took, 0.7);
    EXPECT_LT(took, 3.5) << s;  // its own 0.8 s limit, not the peer's return at 4 s
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorTest,
                         ::testing::Combine(::testing::Values("fake", "gloo"), ::testing::Values(1, 2, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_world" + std::to_string(std::get<1>(info.param));
                         });
INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorTimeoutTest,
                         ::testing::Combine(::testing::Values("fake", "gloo"), ::testing::Values(2, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_world" + std::to_string(std::get<1>(info.param));
                         });

// Building a group whose peers never come up fails with Timeout, bounded.
TEST(GlooCommunicator, ConnectTimesOut) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto t0 = std::chrono::steady_clock::now();
  auto c = CreateGlooCommunicator(store, 0, 2, "127.0.0.1", milliseconds(700));
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(c.status().IsRetryable()) << c.status();
  EXPECT_LT(Seconds(t0), 3.0);
}

TEST(GlooCommunicator, BadRootIsInvalidArgument) {
  RunRanks("gloo", 1, milliseconds(1000), [](Communicator& c) {
    uint8_t b = 0;
    EXPECT_TRUE(c.Broadcast({&b, 1, DataType::kUInt8}, 3).IsInvalidArgument());
  });
}

// The communicator sets its store's timeout (to the collective timeout); on
// the handle JobStore::Prefixed gives it, the job store's own timeout (the
// rendezvous timeout every later store wait relies on) stays as it was.
// c10d's PrefixStore alone would pass setTimeout down to the job store.
TEST(GlooCommunicator, CommunicatorStoreTimeoutLeavesTheJobStoreAlone) {
  auto protocol_js = JobStore::ServeProtocol("tcp://127.0.0.1:*", "t", milliseconds(3000));
  ASSERT_TRUE(protocol_js.ok()) << protocol_js.status();
  auto tcp_js = JobStore::Serve(0, "t", milliseconds(3000));
  ASSERT_TRUE(tcp_js.ok()) << tcp_js.status();
  for (JobStore* js : {&*protocol_js, &*tcp_js}) {
    auto pg_store = js->Prefixed("g1/pg", milliseconds(700));
    ASSERT_TRUE(pg_store.ok()) << pg_store.status();
    auto c = CreateGlooCommunicator(*pg_store, 0, 1, "127.0.0.1", milliseconds(700));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*pg_store)->getTimeout(), milliseconds(700));
    EXPECT_EQ(js->raw()->getTimeout(), milliseconds(3000)) << js->endpoint();
    ASSERT_TRUE(js->Set("k", "v").ok());  // the job store still works
    auto poll = js->WithTimeout(milliseconds(200));
    ASSERT_TRUE(poll.ok()) << poll.status();
    EXPECT_EQ(*poll->TryGet("k"), std::optional<std::string>("v"));
    EXPECT_EQ(js->raw()->getTimeout(), milliseconds(3000));
  }
  // The cause, kept in view: a plain PrefixStore passes setTimeout down.
  auto shared = c10::make_intrusive<c10d::PrefixStore>("g1/pg", protocol_js->raw());
  shared->setTimeout(milliseconds(700));
  EXPECT_EQ(protocol_js->raw()->getTimeout(), milliseconds(700));
}

// Plans outrank the fault generations of earlier plans; fault numbers stay
// below the next plan.
TEST(Generations, PlansOutrankFaultGenerations) {
  using protocol::FaultSuccessor;
  using protocol::PlanGeneration;
  EXPECT_EQ(PlanGeneration(1), protocol::kFaultsPerPlan);
  auto f = FaultSuccessor(PlanGeneration(1));
  ASSERT_TRUE(f.ok());
  EXPECT_LT(*f, PlanGeneration(2));
  EXPECT_EQ(protocol::PlanOf(*f), 1);
  EXPECT_FALSE(FaultSuccessor(PlanGeneration(2) - 1).ok());
}

}  // namespace
}  // namespace aryl
