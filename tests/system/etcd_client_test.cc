// aryl::etcd::Client against real etcd members on loopback (EtcdCluster): KV,
// paging, transactions, leases, watches, failover and quorum loss.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "etcd_cluster.h"
#include "state/etcd/etcd_client.h"

namespace aryl::etcd {
namespace {

using livetest::EtcdCluster;
using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

ClientOptions Options(std::vector<std::string> endpoints, double request_timeout = 2.0) {
  ClientOptions o;
  o.endpoints = std::move(endpoints);
  o.request_timeout = request_timeout;
  return o;
}

RangeOptions Limit(std::int64_t limit) {
  RangeOptions o;
  o.limit = limit;
  return o;
}

RangeOptions AtRevision(std::int64_t revision) {
  RangeOptions o;
  o.revision = revision;
  return o;
}

Compare Cmp(std::string key, Compare::Target target, std::int64_t number,
            Compare::Result result = Compare::Result::kEqual) {
  Compare c;
  c.key = std::move(key);
  c.target = target;
  c.result = result;
  c.number = number;
  return c;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (std::size_t c; (c = s.find(',', pos)) != std::string::npos; pos = c + 1)
    out.push_back(s.substr(pos, c - pos));
  out.push_back(s.substr(pos));
  return out;
}

// --- URL parsing and options (no etcd) ----------------------------------------------

TEST(EtcdUrlTest, ParsesEndpointsAndPrefix) {
  // Hosts become http:// endpoints (https:// with tls), the path the key prefix.
  auto u = ParseEtcdUrl("etcd://h1:2379,10.0.0.2:23790/aryl");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->endpoints, (std::vector<std::string>{"http://h1:2379", "http://10.0.0.2:23790"}));
  EXPECT_EQ(u->prefix, "/aryl/");
  auto t = ParseEtcdUrl("etcd://[::1]:2379/a/b/", /*tls=*/true);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->endpoints, (std::vector<std::string>{"https://[::1]:2379"}));
  EXPECT_EQ(t->prefix, "/a/b/");
}

TEST(EtcdUrlTest, ErrorsNameTheBadPart) {
  // Each malformed part is refused with InvalidArgument naming it.
  struct Case {
    const char* url;
    const char* names;
  } cases[] = {
      {"http://h1:2379/p", "scheme 'http'"},
      {"etcd://h1:2379", "empty prefix"},
      {"etcd://h1:2379/", "empty prefix"},
      {"etcd://h1/p", "'h1' has no port"},
      {"etcd://h1:2379,h2:x/p", "bad port 'x'"},
      {"etcd://h1:2379,,h2:1/p", "is empty"},
      {"etcd:///p", "names no host"},
      {"etcd://h1:70000/p", "bad port '70000'"},
  };
  for (const Case& c : cases) {
    auto u = ParseEtcdUrl(c.url);
    ASSERT_FALSE(u.ok()) << c.url;
    EXPECT_TRUE(u.status().IsInvalidArgument()) << u.status();
    EXPECT_NE(u.status().message().find(c.names), std::string::npos) << c.url << ": " << u.status();
  }
}

TEST(EtcdUrlTest, PrefixEnd) {
  // The range end of a prefix is the prefix with its last byte below 0xff incremented.
  EXPECT_EQ(PrefixEnd("/aryl/"), "/aryl0");
  EXPECT_EQ(PrefixEnd("a\xff"), "b");
  EXPECT_EQ(PrefixEnd("\xff\xff"), std::string(1, '\0'));
  EXPECT_EQ(PrefixEnd(""), std::string(1, '\0'));
}

TEST(EtcdClientOptionsTest, ConnectValidatesWithoutIo) {
  // Bad endpoints, timeouts and TLS files are refused before any request.
  EXPECT_TRUE(Client::Connect({}).status().IsInvalidArgument());
  EXPECT_TRUE(Client::Connect(Options({"127.0.0.1:1"})).status().IsInvalidArgument());
  EXPECT_TRUE(Client::Connect(Options({"http://127.0.0.1"})).status().IsInvalidArgument());
  EXPECT_TRUE(Client::Connect(Options({"http://127.0.0.1:1"}, 0)).status().IsInvalidArgument());
  ClientOptions with_cert = Options({"https://127.0.0.1:1"});
  with_cert.cert_file = "/nonexistent.pem";
  with_cert.key_file = "/nonexistent.key";
  auto tls = Client::Connect(with_cert);
  EXPECT_TRUE(tls.status().IsInvalidArgument()) << tls.status();
  auto c = Client::Connect(Options({"http://127.0.0.1:1/"}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->current_endpoint(), "http://127.0.0.1:1");
}

TEST(EtcdClientOptionsTest, NoServerIsUnavailableNamingTheEndpoints) {
  // Nothing listens: every endpoint is tried and named.
  int p1 = livetest::FreePort(), p2 = livetest::FreePort();
  auto c = Client::Connect(Options(
      {"http://127.0.0.1:" + std::to_string(p1), "http://127.0.0.1:" + std::to_string(p2)}, 0.5));
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Put("k", "v");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsUnavailable()) << r.status();
  EXPECT_NE(r.status().message().find(std::to_string(p1)), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find(std::to_string(p2)), std::string::npos) << r.status();
}

// --- against real etcd --------------------------------------------------------------

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Available()) GTEST_SKIP() << EtcdCluster::kMissing;
  }
  void StartCluster(int n) {
    auto t0 = SteadyClock::now();
    Status s = etcd_.Start(n);
    ASSERT_TRUE(s.ok()) << s;
    std::cerr << "[ etcd ] " << n << " member(s) healthy in " << SecondsSince(t0) << " s\n";
  }
  std::unique_ptr<Client> NewClient(double request_timeout = 2.0) {
    auto c = Client::Connect(Options(Split(etcd_.ClientUrls()), request_timeout));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  EtcdCluster etcd_;
};

TEST_F(EtcdClientTest, PutRangeAndPagedPrefixRange) {
  // 25 keys under a prefix, read whole, by pages of 10 (limit + more), keys-only,
  // count-only, at an older revision, then deleted as a range.
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  auto c = NewClient();
  EXPECT_EQ(ParseEtcdUrl(etcd_.EtcdUrl("aryl")).value().endpoints, Split(etcd_.ClientUrls()));
  const std::string prefix = "/aryl/jobs/";
  std::int64_t first_rev = 0;
  for (int i = 0; i < 25; ++i) {
    char key[64];
    std::snprintf(key, sizeof key, "%sj%02d", prefix.c_str(), i);
    auto rev = c->Put(key, "value-" + std::to_string(i) + std::string("\0\xff", 2));
    ASSERT_TRUE(rev.ok()) << rev.status();
    if (i == 0) first_rev = *rev;
  }
  ASSERT_TRUE(c->Put("/aryl/jobt", "outside").ok());  // sorts right after the prefix

  auto all = c->Range(prefix, PrefixEnd(prefix));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->kvs.size(), 25u);
  EXPECT_FALSE(all->more);
  EXPECT_EQ(all->count, 25);
  EXPECT_EQ(all->kvs[3].key, prefix + "j03");
  EXPECT_EQ(all->kvs[3].value, "value-3" + std::string("\0\xff", 2));
  EXPECT_EQ(all->kvs[0].create_revision, first_rev);
  EXPECT_EQ(all->kvs[0].version, 1);
  EXPECT_GT(c->last_round_trip_ms(), 0);

  std::vector<std::string> paged;
  std::string from = prefix;
  for (int page = 0;; ++page) {
    ASSERT_LT(page, 5);
    auto r = c->Range(from, PrefixEnd(prefix), Limit(10));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->count, 25 - std::int64_t(paged.size()));
    for (auto& kv : r->kvs) paged.push_back(kv.key);
    if (!r->more) break;
    EXPECT_EQ(r->kvs.size(), 10u);
    from = r->kvs.back().key + std::string(1, '\0');
  }
  ASSERT_EQ(paged.size(), 25u);
  EXPECT_EQ(paged.back(), prefix + "j24");

  RangeOptions keys_only = Limit(2);
  keys_only.keys_only = true;
  auto keys = c->Range(prefix, PrefixEnd(prefix), keys_only);
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->kvs.size(), 2u);
  EXPECT_TRUE(keys->more);
  EXPECT_EQ(keys->kvs[1].key, prefix + "j01");
  EXPECT_EQ(keys->kvs[1].value, "");
  RangeOptions count_only;
  count_only.count_only = true;
  auto count = c->Range(prefix, PrefixEnd(prefix), count_only);
  ASSERT_TRUE(count.ok());
  EXPECT_TRUE(count->kvs.empty());
  EXPECT_EQ(count->count, 25);

  ASSERT_TRUE(c->Put(prefix + "j00", "changed").ok());
  auto old = c->Range(prefix + "j00", {}, AtRevision(first_rev));
  ASSERT_TRUE(old.ok());
  ASSERT_EQ(old->kvs.size(), 1u);
  EXPECT_EQ(old->kvs[0].value, "value-0" + std::string("\0\xff", 2));
  RangeOptions recent_only;
  recent_only.min_mod_revision = first_rev + 1;
  auto recent = c->Range(prefix, PrefixEnd(prefix), recent_only);
  ASSERT_TRUE(recent.ok());
  EXPECT_EQ(recent->kvs.size(), 25u);  // j00 changed after first_rev, j01..j24 were put after it
  auto missing = c->Range("/aryl/none");
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->kvs.empty());
  EXPECT_EQ(missing->count, 0);
  EXPECT_GT(missing->revision, first_rev);

  auto deleted = c->Delete(prefix, PrefixEnd(prefix));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 25);
  EXPECT_EQ(c->Range("/aryl/jobt")->kvs.size(), 1u);
  EXPECT_EQ(*c->Delete("/aryl/none"), 0);

  auto bad = c->Put("", "no key");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsInvalidArgument()) << bad.status();
  EXPECT_NE(bad.status().message().find("key is not provided"), std::string::npos) << bad.status();
}

TEST_F(EtcdClientTest, TxnComparesCreateRevision) {
  // Create-if-absent: the first txn creates the key, the second takes the failure
  // branch and reads the winner's value; compares on mod revision and value too.
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  auto c = NewClient();
  auto create = [&](const std::string& value) {
    TxnRequest t;
    t.compare.push_back(Cmp("/lock", Compare::Target::kCreate, 0));
    t.success = {Op::Put("/lock", value), Op::Get("/lock")};
    t.failure = {Op::Get("/lock"), Op::Get("/other"), Op::Delete("/nothing")};
    return c->Txn(t);
  };
  auto first = create("alice");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->succeeded);
  ASSERT_EQ(first->ranges.size(), 1u);
  ASSERT_EQ(first->ranges[0].kvs.size(), 1u);
  EXPECT_EQ(first->ranges[0].kvs[0].value, "alice");
  const std::int64_t created = first->ranges[0].kvs[0].create_revision;
  EXPECT_EQ(created, first->revision);

  auto second = create("bob");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->succeeded);
  ASSERT_EQ(second->ranges.size(), 2u);
  ASSERT_EQ(second->ranges[0].kvs.size(), 1u);
  EXPECT_EQ(second->ranges[0].kvs[0].value, "alice");
  EXPECT_TRUE(second->ranges[1].kvs.empty());
  EXPECT_EQ(second->revision, first->revision);  // nothing written

  TxnRequest cas;  // compare-and-swap on mod revision and value
  cas.compare.push_back(Cmp("/lock", Compare::Target::kMod, created));
  Compare value = Cmp("/lock", Compare::Target::kValue, 0);
  value.value = "alice";
  cas.compare.push_back(value);
  cas.compare.push_back(Cmp("/lock", Compare::Target::kVersion, 2, Compare::Result::kLess));
  cas.success = {Op::Put("/lock", "carol")};
  auto swapped = c->Txn(cas);
  ASSERT_TRUE(swapped.ok()) << swapped.status();
  EXPECT_TRUE(swapped->succeeded);
  EXPECT_TRUE(swapped->ranges.empty());
  auto again = c->Txn(cas);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->succeeded);
  EXPECT_EQ(c->Range("/lock")->kvs.at(0).value, "carol");

  TxnRequest big;  // more ops than etcd's default --max-txn-ops 128
  for (int i = 0; i < 300; ++i) big.success.push_back(Op::Put("/big/" + std::to_string(i), "x"));
  auto b = c->Txn(big);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->succeeded);
}

TEST_F(EtcdClientTest, LeaseKeepAliveAndExpiryDeletesTheKey) {
  // A key attached to a lease outlives the TTL while kept alive, is deleted once the
  // keep-alives stop, and the lease is then NotFound; revoke deletes at once.
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  auto c = NewClient();
  EXPECT_TRUE(c->LeaseGrant(0).status().IsInvalidArgument());
  auto lease = c->LeaseGrant(1);  // etcd raises it to its minimum TTL (2 s here)
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(c->Put("/lease/k", "v", *lease).ok());
  EXPECT_EQ(c->Range("/lease/k")->kvs.at(0).lease, *lease);
  auto t0 = SteadyClock::now();
  while (SecondsSince(t0) < 3.0) {
    auto ttl = c->LeaseKeepAlive(*lease);
    ASSERT_TRUE(ttl.ok()) << ttl.status();
    EXPECT_GE(*ttl, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  ASSERT_EQ(c->Range("/lease/k")->kvs.size(), 1u) << "the key outlived its TTL while kept alive";

  t0 = SteadyClock::now();
  while (!c->Range("/lease/k")->kvs.empty() && SecondsSince(t0) < 8.0)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(c->Range("/lease/k")->kvs.empty()) << "the key outlived its lease";
  std::cerr << "[ etcd ] lease expired " << SecondsSince(t0) << " s after the last keep-alive\n";
  auto gone = c->LeaseKeepAlive(*lease);
  EXPECT_TRUE(gone.status().IsNotFound()) << gone.status();

  auto second = c->LeaseGrant(30);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(c->Put("/lease/r", "v", *second).ok());
  EXPECT_TRUE(c->LeaseRevoke(*second).ok());
  EXPECT_TRUE(c->Range("/lease/r")->kvs.empty());
  Status again = c->LeaseRevoke(*second);
  EXPECT_TRUE(again.IsNotFound()) << again;
  EXPECT_NE(again.message().find("lease not found"), std::string::npos) << again;
}

TEST_F(EtcdClientTest, ConcurrentCallsFromManyThreads) {
  // Four threads write and read at once through one client while a watch runs on
  // it; every write is seen once, in revision order.
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  auto c = NewClient();
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::int64_t> seen;
  std::thread watcher([&] {
    Status s = c->Watch(
        "/t/", PrefixEnd("/t/"), 1,
        [&](const std::vector<WatchEvent>& batch, std::int64_t) {
          std::lock_guard<std::mutex> lock(mu);
          for (auto& e : batch) seen.push_back(e.kv.mod_revision);
          return true;
        },
        stop, 30);
    EXPECT_TRUE(s.ok()) << s;
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::string key = "/t/" + std::to_string(t) + "/" + std::to_string(i);
        EXPECT_TRUE(c->Put(key, "v").ok());
        auto r = c->Range(key);
        EXPECT_TRUE(r.ok() && r->kvs.size() == 1) << key;
      }
    });
  }
  for (auto& t : writers) t.join();
  auto t0 = SteadyClock::now();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (seen.size() >= 200 || SecondsSince(t0) > 5) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  watcher.join();
  ASSERT_EQ(seen.size(), 200u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(c->Range("/t/", PrefixEnd("/t/"), {})->count, 200);
}

// Collects watch batches from a thread.
struct WatchRecorder {
  std::mutex mu;
  std::vector<WatchEvent> events;
  std::vector<std::int64_t> header_revisions;
  std::atomic<bool> stop{false};
  Status result;
  std::atomic<bool> returned{false};
  SteadyClock::time_point returned_at;
  std::thread thread;

  void Start(Client* c, const std::string& key, const std::string& end, std::int64_t from,
             double max_seconds) {
    thread = std::thread([=, this] {
      Status s = c->Watch(
          key, end, from,
          [this](const std::vector<WatchEvent>& batch, std::int64_t rev) {
            std::lock_guard<std::mutex> lock(mu);
            events.insert(events.end(), batch.begin(), batch.end());
            header_revisions.push_back(rev);
            return true;
          },
          stop, max_seconds);
      returned_at = SteadyClock::now();
      result = s;
      returned = true;
    });
  }
  std::size_t Count() {
    std::lock_guard<std::mutex> lock(mu);
    return events.size();
  }
  bool WaitCount(std::size_t n, double timeout_s) {
    auto t0 = SteadyClock::now();
    while (Count() < n && SecondsSince(t0) < timeout_s)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return Count() >= n;
  }
  ~WatchRecorder() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

TEST_F(EtcdClientTest, WatchFromRevisionDeliversPutsAndDeletesInOrder) {
  // History (put a, put b, delete a) replays from its first revision; live puts
  // follow in order after the stream has sat idle past its idle window (1 s at a
  // 0.5 s request timeout: re-opened from the next revision, nothing repeated);
  // the watch returns within 200 ms of stop.
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  auto c = NewClient(0.5);
  const std::string p = "/w/";
  auto r1 = c->Put(p + "a", "1");
  ASSERT_TRUE(r1.ok());
  ASSERT_TRUE(c->Put(p + "b", "2").ok());
  ASSERT_TRUE(c->Delete(p + "a").ok());
  ASSERT_TRUE(c->Put("/x", "outside the range").ok());

  WatchRecorder w;
  w.Start(c.get(), p, PrefixEnd(p), *r1, 30);
  ASSERT_TRUE(w.WaitCount(3, 5)) << "history not replayed";
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(w.Count(), 3u);
  EXPECT_FALSE(w.returned);
  ASSERT_TRUE(c->Put(p + "c", "3").ok());
  ASSERT_TRUE(c->Put(p + "b", "4").ok());
  ASSERT_TRUE(w.WaitCount(5, 5)) << "live events not delivered";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t_stop = SteadyClock::now();
  w.stop = true;
  w.thread.join();
  double stop_s = std::chrono::duration<double>(w.returned_at - t_stop).count();
  EXPECT_TRUE(w.result.ok()) << w.result;
  EXPECT_LT(stop_s, 0.2) << "Watch noticed stop late";
  std::cerr << "[ etcd ] watch returned " << stop_s * 1000 << " ms after stop\n";

  ASSERT_EQ(w.events.size(), 5u);
  const char* keys[] = {"a", "b", "a", "c", "b"};
  const WatchEvent::Type types[] = {WatchEvent::Type::kPut, WatchEvent::Type::kPut,
                                    WatchEvent::Type::kDelete, WatchEvent::Type::kPut,
                                    WatchEvent::Type::kPut};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(w.events[i].kv.key, p + keys[i]) << i;
    EXPECT_EQ(w.events[i].type, types[i]) << i;
    if (i > 0) {
      EXPECT_GT(w.events[i].kv.mod_revision, w.events[i - 1].kv.mod_revision);
    }
  }
  EXPECT_EQ(w.events[0].kv.mod_revision, *r1);
  EXPECT_EQ(w.events[4].kv.value, "4");
  EXPECT_EQ(w.events[4].kv.version, 2);

  // max_seconds ends an idle watch; on_batch returning false ends it at once.
  std::atomic<bool> never{false};
  auto t0 = SteadyClock::now();
  Status idle = c->Watch(
      p, PrefixEnd(p), 0, [](auto&, auto) { return true; }, never, 0.5);
  EXPECT_TRUE(idle.ok()) << idle;
  EXPECT_GE(SecondsSince(t0), 0.45);
  EXPECT_LT(SecondsSince(t0), 0.8);
  int batches = 0;
  t0 = SteadyClock::now();
  Status done = c->Watch(
      p, PrefixEnd(p), *r1, [&](auto&, auto) { return ++batches < 1; }, never, 10);
  EXPECT_TRUE(done.ok()) << done;
  EXPECT_EQ(batches, 1);
  EXPECT_LT(SecondsSince(t0), 1.0);
}

TEST_F(EtcdClientTest, WatchFromCompactedRevisionIsOutOfRange) {
  // A watch from before the compact revision is refused, naming that revision.
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  auto c = NewClient();
  std::int64_t rev = 0;
  for (int i = 0; i < 5; ++i) rev = c->Put("/c/k", std::to_string(i)).value();
  ASSERT_TRUE(etcd_.Compact(rev).ok());
  std::atomic<bool> stop{false};
  auto t0 = SteadyClock::now();
  Status s = c->Watch(
      "/c/", PrefixEnd("/c/"), rev - 2, [](auto&, auto) { return true; }, stop, 10);
  EXPECT_EQ(s.code(), Status::Code::kOutOfRange) << s;
  EXPECT_NE(s.message().find("compact revision " + std::to_string(rev)), std::string::npos) << s;
  EXPECT_LT(SecondsSince(t0), 2.0);
  auto old = c->Range("/c/k", {}, AtRevision(rev - 2));
  EXPECT_EQ(old.status().code(), Status::Code::kOutOfRange) << old.status();
}

TEST_F(EtcdClientTest, FailoverWhenTheCurrentMemberDies) {
  // 3 members, the client's endpoints ordered follower, follower, leader. Killing
  // the member in use costs one refused connect: the next call answers from the
  // next member, and a running watch moves with it without losing events. A paused
  // (SIGSTOP) member is passed over after the request timeout, by calls and by the
  // watch. When the leader dies, writes fail until the others elect a new one
  // (about a second) and then succeed.
  ASSERT_NO_FATAL_FAILURE(StartCluster(3));
  const double timeout = 1.0;
  auto probe = NewClient(timeout);
  auto members = probe->MemberList();
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 3u);
  std::vector<std::string> names;
  for (auto& m : *members) {
    names.push_back(m.name);
    EXPECT_NE(m.id, 0u);
    ASSERT_EQ(m.client_urls.size(), 1u);
    EXPECT_NE(etcd_.ClientUrls().find(m.client_urls[0]), std::string::npos);
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"m0", "m1", "m2"}));
  auto health = probe->Health();
  ASSERT_EQ(health.size(), 3u);
  for (auto& h : health) {
    EXPECT_TRUE(h.healthy) << h.endpoint << ": " << h.error;
    EXPECT_EQ(h.leader, health[0].leader);
    EXPECT_GT(h.raft_term, 0u);
    EXPECT_GT(h.round_trip_ms, 0);
  }
  std::vector<std::string> order;  // followers first, the leader last
  std::string leader_url;
  for (auto& m : *members)
    (m.id == health[0].leader ? leader_url : order.emplace_back()) = m.client_urls[0];
  ASSERT_EQ(order.size(), 2u);
  ASSERT_FALSE(leader_url.empty());
  order.push_back(leader_url);
  const auto urls = Split(etcd_.ClientUrls());
  auto index = [&](const std::string& url) {
    return int(std::find(urls.begin(), urls.end(), url) - urls.begin());
  };

  auto client = Client::Connect(Options(order, timeout));
  ASSERT_TRUE(client.ok());
  Client* c = client->get();
  auto r0 = c->Put("/f/0", "0");
  ASSERT_TRUE(r0.ok()) << r0.status();
  ASSERT_EQ(c->current_endpoint(), order[0]);

  WatchRecorder w;
  w.Start(c, "/f/", PrefixEnd("/f/"), *r0, 60);
  ASSERT_TRUE(w.WaitCount(1, 5));
  etcd_.Kill(index(order[0]));
  auto t0 = SteadyClock::now();
  auto r1 = c->Put("/f/1", "1");
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_LT(SecondsSince(t0), timeout);
  EXPECT_EQ(c->current_endpoint(), order[1]);
  std::cerr << "[ etcd ] put after killing " << order[0] << " took " << SecondsSince(t0) * 1000
            << " ms\n";
  for (int i = 2; i < 6; ++i) ASSERT_TRUE(c->Put("/f/" + std::to_string(i), "x").ok());
  ASSERT_TRUE(w.WaitCount(6, 5)) << "the watch did not move to another member: " << w.Count()
                                 << " events";

  // Bring the dead member back, then pause the one now in use.
  ASSERT_TRUE(etcd_.Restart(index(order[0])).ok());
  etcd_.Pause(index(order[1]));
  t0 = SteadyClock::now();
  auto r6 = c->Put("/f/6", "x");
  ASSERT_TRUE(r6.ok()) << r6.status();
  EXPECT_LT(SecondsSince(t0), timeout + 0.5);
  EXPECT_EQ(c->current_endpoint(), order[2]);
  std::cerr << "[ etcd ] put with " << order[1] << " paused took " << SecondsSince(t0) * 1000
            << " ms\n";
  t0 = SteadyClock::now();
  EXPECT_TRUE(w.WaitCount(7, 3 * timeout + 2)) << "the watch did not leave the paused member";
  std::cerr << "[ etcd ] the watch left the paused member after " << SecondsSince(t0) << " s\n";
  etcd_.Resume(index(order[1]));

  // The leader dies: retry until the others have elected a new one.
  etcd_.Kill(index(order[2]));
  t0 = SteadyClock::now();
  Result<std::int64_t> r7 = Status::Unavailable("not tried");
  int tries = 0;
  while (!(r7 = c->Put("/f/7", "x")).ok() && SecondsSince(t0) < 6) {
    ++tries;
    EXPECT_TRUE(r7.status().IsUnavailable()) << r7.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(r7.ok()) << r7.status();
  std::cerr << "[ etcd ] write after killing the leader succeeded after " << SecondsSince(t0)
            << " s, " << tries << " failed tries\n";
  ASSERT_TRUE(w.WaitCount(8, 3 * timeout + 2)) << "the watch did not survive the leader's death";
  w.stop = true;
  w.thread.join();
  EXPECT_TRUE(w.result.ok()) << w.result;
  // A put that failed while the leader was dying may still have been
  // committed by the new leader, and then the retry puts /f/7 again: a second
  // event at a later revision, not a repeat. The watch itself delivers each
  // revision once and skips none.
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < w.events.size(); ++i) {
    if (i > 0) EXPECT_GT(w.events[i].kv.mod_revision, w.events[i - 1].kv.mod_revision) << "a repeated event";
    if (keys.empty() || keys.back() != w.events[i].kv.key) keys.push_back(w.events[i].kv.key);
  }
  EXPECT_LE(w.events.size(), 8u + static_cast<std::size_t>(tries)) << "more /f/7 puts than tries";
  ASSERT_EQ(keys.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(keys[i], "/f/" + std::to_string(i)) << "no gap";
}

TEST_F(EtcdClientTest, QuorumLossIsUnavailableUntilTheMembersReturn) {
  // Kill 2 of 3: a write fails within the request timeout as Unavailable with
  // etcd's reason, reads too, MemberList still answers; after both restart, writes
  // succeed again.
  ASSERT_NO_FATAL_FAILURE(StartCluster(3));
  auto c = NewClient(2.0);
  ASSERT_TRUE(c->Put("/q/before", "1").ok());
  etcd_.Kill(1);
  etcd_.Kill(2);
  auto t0 = SteadyClock::now();
  auto w = c->Put("/q/during", "2");
  double took = SecondsSince(t0);
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(w.status().IsUnavailable() || w.status().IsTimeout()) << w.status();
  EXPECT_LT(took, 2.0 + 0.5) << w.status();
  std::cerr << "[ etcd ] write without quorum failed in " << took << " s: " << w.status() << "\n";
  EXPECT_NE(w.status().message().find(etcd_.ClientUrl(1)), std::string::npos) << w.status();
  // Once the survivor has noticed the lost leader it refuses at once.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  t0 = SteadyClock::now();
  auto again = c->Put("/q/during", "2");
  EXPECT_TRUE(again.status().IsUnavailable()) << again.status();
  EXPECT_NE(again.status().message().find("no leader"), std::string::npos) << again.status();
  EXPECT_LT(SecondsSince(t0), 0.5);
  auto read = c->Range("/q/before");
  EXPECT_TRUE(read.status().IsUnavailable()) << read.status();
  auto members = c->MemberList();
  ASSERT_TRUE(members.ok()) << members.status();
  EXPECT_EQ(members->size(), 3u);
  auto health = c->Health();
  ASSERT_EQ(health.size(), 3u);
  for (auto& h : health) EXPECT_FALSE(h.healthy) << h.endpoint;
  EXPECT_FALSE(health[1].error.empty());

  ASSERT_TRUE(etcd_.Restart(1).ok());
  ASSERT_TRUE(etcd_.Restart(2).ok());
  t0 = SteadyClock::now();
  Result<std::int64_t> after = Status::Unavailable("not tried");
  while (!(after = c->Put("/q/after", "3")).ok() && SecondsSince(t0) < 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(c->Range("/q/before")->kvs.size(), 1u);
  for (auto& h : c->Health()) EXPECT_TRUE(h.healthy) << h.endpoint << ": " << h.error;
}


// --- TLS with client certificates (etcd --client-cert-auth) ----------------------

// Certificates for one test, made with the openssl command line: a CA, a server
// certificate for 127.0.0.1 and a client certificate it signed, and a second CA
// with a client certificate of its own (a stranger's).
class EtcdTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Available()) GTEST_SKIP() << EtcdCluster::kMissing;
    if (::access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "/usr/bin/openssl is not installed (Debian openssl)";
    // A TLS write to a member that refused the handshake raises SIGPIPE
    // (OpenSSL writes with write(2)); aryl-scheduler ignores it, as must this process.
    std::signal(SIGPIPE, SIG_IGN);
    dir_ = std::filesystem::temp_directory_path() / ("aryl-etcd-tls-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ASSERT_NO_FATAL_FAILURE(Ca("ca"));
    // clientAuth too: etcd's HTTP gateway dials the member's own gRPC port
    // with the server certificate (without it every gateway call is refused:
    // "incompatible key usage").
    ASSERT_NO_FATAL_FAILURE(
        Signed("server", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"));
    ASSERT_NO_FATAL_FAILURE(Signed("client", "ca", "extendedKeyUsage=clientAuth\n"));
    ASSERT_NO_FATAL_FAILURE(Ca("other"));
    ASSERT_NO_FATAL_FAILURE(Signed("stranger", "other", "extendedKeyUsage=clientAuth\n"));
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  std::string F(const std::string& name) const { return (dir_ / name).string(); }
  void Run(const std::string& cmd) {
    const std::string full = "cd '" + dir_.string() + "' && " + cmd + " >>openssl.log 2>&1";
    ASSERT_EQ(std::system(full.c_str()), 0) << full;
  }
  void Ca(const std::string& name) {
    Run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=aryl-test-" +
        name + " -keyout " + name + ".key -out " + name + ".pem");
  }
  void Signed(const std::string& name, const std::string& ca, const std::string& ext) {
    { std::ofstream(dir_ / (name + ".ext")) << ext; }
    Run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=" + name + " -keyout " +
        name + ".key -out " + name + ".csr");
    Run("openssl x509 -req -in " + name + ".csr -CA " + ca + ".pem -CAkey " + ca + ".key -CAcreateserial -days 2 -out " +
        name + ".pem -extfile " + name + ".ext");
  }
  ClientOptions With(const std::string& url, const std::string& ca, const std::string& cert) const {
    ClientOptions o = Options({url}, 2.0);
    o.ca_file = F(ca + ".pem");
    if (!cert.empty()) {
      o.cert_file = F(cert + ".pem");
      o.key_file = F(cert + ".key");
    }
    return o;
  }

  std::filesystem::path dir_;
};

// A client with the CA and a certificate it signed reads and writes (a fenced
// transaction, as the state store writes); without a certificate, with a
// stranger's, or not trusting the server's CA, every request fails, and the
// error names the endpoint.
TEST_F(EtcdTlsTest, ClientCertificatesAreRequiredAndChecked) {
  EtcdCluster etcd;
  etcd.UseTls({F("ca.pem"), F("server.pem"), F("server.key")});
  ASSERT_TRUE(etcd.Start(1).ok()) << etcd.Log(0);
  const std::string url = etcd.ClientUrl(0);
  ASSERT_EQ(url.rfind("https://", 0), 0u) << url;

  auto good = Client::Connect(With(url, "ca", "client"));
  ASSERT_TRUE(good.ok()) << good.status();
  TxnRequest txn;
  txn.compare.push_back(Cmp("/tls/k", Compare::Target::kCreate, 0));
  txn.success.push_back(Op::Put("/tls/k", "v"));
  auto t = (*good)->Txn(txn);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->succeeded);
  auto r = (*good)->Range("/tls/k");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->kvs.size(), 1u);
  EXPECT_EQ(r->kvs[0].value, "v");

  for (auto [ca, cert, why] : {std::tuple{"ca", "", "no client certificate"},
                               std::tuple{"ca", "stranger", "a certificate of another CA"},
                               std::tuple{"other", "client", "the server's CA not trusted"}}) {
    auto c = Client::Connect(With(url, ca, cert));
    ASSERT_TRUE(c.ok()) << c.status();
    auto bad = (*c)->Range("/tls/k");
    EXPECT_FALSE(bad.ok()) << why << ": read " << (bad.ok() ? bad->kvs.size() : 0) << " keys";
    if (!bad.ok()) EXPECT_NE(bad.status().message().find(url), std::string::npos) << why << ": " << bad.status();
  }
  auto unverified = Client::Connect(With(url, "other", "client"));
  auto bad = (*unverified)->Range("/tls/k");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("TLS server certificate not verified"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace aryl::etcd
