#include "aryl/protocol/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

namespace aryl::protocol {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using SteadyClock = std::chrono::steady_clock;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = StoreServer::Start({.endpoint = "tcp://127.0.0.1:*", .tick = 10ms});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  std::unique_ptr<StoreClient> NewClient() {
    auto c = StoreClient::Connect({.endpoint = server_->endpoint()});
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }
  std::unique_ptr<StoreServer> server_;
};

// Child half of WorkerProcessKilledMidWait: when spawned with
// ARYL_STORE_CHILD_ENDPOINT set, the process joins the rendezvous and blocks in
// Wait until it is killed, before any test runs. It is not a test of its own.
const bool kIsStoreChild = [] {
  const char* endpoint = std::getenv("ARYL_STORE_CHILD_ENDPOINT");
  if (!endpoint) return false;
  auto c = StoreClient::Connect({.endpoint = endpoint});
  if (!c.ok() || !(*c)->Add("gen1/arrived", 1, 2000ms).ok()) ::_exit(1);
  (void)(*c)->Wait({"never"}, 30000ms);
  ::_exit(0);
}();

// Set then Get returns the bytes as stored, binary included.
TEST_F(StoreTest, SetGet) {
  auto c = NewClient();
  std::string value("\x00\x01\xffhello", 8);
  ASSERT_TRUE(c->Set("k", value, 1000ms).ok());
  auto got = c->Get("k", 1000ms);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  EXPECT_EQ(server_->service().size(), 1u);
}

// Get of a missing key waits, then times out naming the key.
TEST_F(StoreTest, GetTimesOut) {
  auto c = NewClient();
  auto start = SteadyClock::now();
  auto got = c->Get("missing", 150ms);
  auto took = SteadyClock::now() - start;
  EXPECT_TRUE(got.status().IsTimeout()) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("'missing'"));
  EXPECT_GE(took, 140ms);
  // Bounded by the call's own timeout, not a default: a loaded 2-core machine
  // can add seconds of scheduling delay, so only a wait far past it fails.
  EXPECT_LT(took, 3000ms);
}

// Add counts from zero, accepts negative deltas, and refuses non-integer values.
TEST_F(StoreTest, Add) {
  auto c = NewClient();
  EXPECT_EQ(*c->Add("n", 1, 1000ms), 1);
  EXPECT_EQ(*c->Add("n", 5, 1000ms), 6);
  EXPECT_EQ(*c->Add("n", -2, 1000ms), 4);
  EXPECT_EQ(*c->Get("n", 1000ms), "4");
  ASSERT_TRUE(c->Set("s", "abc", 1000ms).ok());
  EXPECT_TRUE(c->Add("s", 1, 1000ms).status().IsInvalidArgument());
}

// Check, DeleteKey and CompareSet follow c10d's semantics.
TEST_F(StoreTest, CheckDeleteCompareSet) {
  auto c = NewClient();
  EXPECT_FALSE(*c->Check({"a"}, 1000ms));
  EXPECT_EQ(*c->CompareSet("a", "", "first", 1000ms), "first");  // missing + expected ""
  EXPECT_EQ(*c->CompareSet("a", "wrong", "x", 1000ms), "first");
  EXPECT_EQ(*c->CompareSet("a", "first", "second", 1000ms), "second");
  EXPECT_EQ(*c->CompareSet("b", "nope", "x", 1000ms), "nope");  // missing + expected set
  EXPECT_TRUE(*c->Check({"a"}, 1000ms));
  EXPECT_FALSE(*c->Check({"a", "b"}, 1000ms));
  EXPECT_TRUE(*c->DeleteKey("a", 1000ms));
  EXPECT_FALSE(*c->DeleteKey("a", 1000ms));
  EXPECT_FALSE(*c->Check({"a"}, 1000ms));
}

// Wait returns as soon as another client sets the last key.
TEST_F(StoreTest, WaitWakesOnSet) {
  auto waiter = NewClient();
  auto setter = NewClient();
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    EXPECT_TRUE(setter->Set("x", "1", 1000ms).ok());
    std::this_thread::sleep_for(20ms);
    EXPECT_TRUE(setter->Add("y", 1, 1000ms).ok());
  });
  auto start = SteadyClock::now();
  Status s = waiter->Wait({"x", "y"}, 2000ms);
  auto took = SteadyClock::now() - start;
  t.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_LT(took, 1900ms);  // woken by the Add, not by its 2 s timeout
  EXPECT_EQ(server_->service().parked(), 0u);
}

// Wait on keys nobody sets times out within its timeout, naming what is missing.
TEST_F(StoreTest, WaitTimesOut) {
  auto c = NewClient();
  ASSERT_TRUE(c->Set("present", "1", 1000ms).ok());
  auto start = SteadyClock::now();
  Status s = c->Wait({"present", "absent"}, 200ms);
  auto took = SteadyClock::now() - start;
  EXPECT_TRUE(s.IsTimeout()) << s;
  EXPECT_THAT(s.message(), HasSubstr("'absent'"));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("'present'")));
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 3000ms);  // bounded (generous: CI machines are busy)
  EXPECT_EQ(server_->service().parked(), 0u);
}

// Two workers rendezvous: each publishes its address and waits for the other's,
// the way a generation's members meet.
TEST_F(StoreTest, TwoClientsRendezvous) {
  auto run = [&](int rank, std::string* peer) {
    auto c = NewClient();
    int n = int(*c->Add("gen1/arrived", 1, 1000ms));
    EXPECT_GE(n, 1);
    ASSERT_TRUE(
        c->Set("gen1/addr/" + std::to_string(rank), "host" + std::to_string(rank), 1000ms).ok());
    ASSERT_TRUE(c->Wait({"gen1/addr/0", "gen1/addr/1"}, 2000ms).ok());
    auto other = c->Get("gen1/addr/" + std::to_string(1 - rank), 1000ms);
    ASSERT_TRUE(other.ok()) << other.status();
    *peer = *other;
  };
  std::string peer0, peer1;
  std::thread t0(run, 0, &peer0), t1(run, 1, &peer1);
  t0.join();
  t1.join();
  EXPECT_EQ(peer0, "host1");
  EXPECT_EQ(peer1, "host0");
}

// The store outlives its clients: a client that disappears mid-wait leaves the
// rendezvous usable for the others.
TEST_F(StoreTest, SurvivesClientDeath) {
  {
    auto doomed = NewClient();
    std::thread t([&] { (void)doomed->Wait({"never"}, 100ms); });
    t.join();
  }
  auto c = NewClient();
  ASSERT_TRUE(c->Set("k", "v", 1000ms).ok());
  EXPECT_EQ(*c->Get("k", 1000ms), "v");
}

// A real worker process is SIGKILLed while parked in a Wait: the store keeps
// serving the other members (the dead worker's parked request just waits out its
// deadline), and the next generation's rendezvous works.
TEST_F(StoreTest, WorkerProcessKilledMidWait) {
  // Everything the child needs is prepared before fork: after it, only execve.
  std::string env_endpoint = "ARYL_STORE_CHILD_ENDPOINT=" + server_->endpoint();
  char* child_argv[] = {const_cast<char*>("store_child"), nullptr};
  char* child_env[] = {env_endpoint.data(), nullptr};
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execve("/proc/self/exe", child_argv, child_env);
    ::_exit(127);
  }
  auto c = NewClient();
  auto deadline = SteadyClock::now() + 5s;
  while (SteadyClock::now() < deadline && server_->service().parked() == 0)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(server_->service().parked(), 1u) << "child never reached its Wait";
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(*c->Add("gen1/arrived", 1, 1000ms), 2);
  ASSERT_TRUE(c->Set("gen2/addr/0", "host0", 1000ms).ok());
  EXPECT_TRUE(c->Wait({"gen2/addr/0"}, 1000ms).ok());
}

// A non-store message is refused with an error naming it.
TEST_F(StoreTest, RefusesOtherMessages) {
  auto c = NewClient();
  auto r = c->client().Call<StoreReply>(ListNodes{}, 1000ms);
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_THAT(r.status().message(), HasSubstr("list_nodes"));
}

// Against a dead store every call returns Timeout within its timeout.
TEST(StoreClientTest, DeadStoreTimesOut) {
  auto c = StoreClient::Connect({.endpoint = "tcp://127.0.0.1:1"});
  ASSERT_TRUE(c.ok());
  auto start = SteadyClock::now();
  EXPECT_TRUE((*c)->Set("k", "v", 100ms).IsTimeout());
  EXPECT_LT(SteadyClock::now() - start, 400ms);
}

}  // namespace
}  // namespace aryl::protocol
