// The etcd backend of the StateStore (EtcdStateStore) and the leader election
// against a real etcd member on loopback: what one leader writes another reads
// back whole; a write under a stale term fails and changes nothing; a standby leads once the leader resigns or its
// lease runs out.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "etcd_cluster.h"
#include "etcd_store_fixture.h"
#include "state/etcd/etcd_client.h"
#include "state/etcd/etcd_state_store.h"
#include "state/etcd/leader_election.h"
#include "state/etcd/state_follower.h"

namespace aryl::daemon {
namespace {

using livetest::EtcdCluster;
TEST_F(EtcdStoreTest, WhatOneLeaderWritesTheNextReadsBack) {
  std::int64_t term = Lead();
  auto s = Open(term);
  ASSERT_TRUE(s.ok()) << s.status();
  JobRecord j;
  j.name = "train";
  j.client_token = "u\x1ftok";
  j.spec_json = "{\"argv\":[\"x\"]}";
  j.submit_time = 1234.5;
  auto id = (*s)->InsertJob(j);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE((*s)->Batch([&]() -> Status {
    JobRecord r = *(*s)->GetJob(*id);
    r.state = JobState::kRunning;
    r.generation = 3;
    r.placement = {{"a1", 2}, {"a2", 1}};
    r.workers_json = "{\"next_worker\":3}";
    ARYL_RETURN_IF_ERROR((*s)->UpdateJob(r));
    ARYL_RETURN_IF_ERROR((*s)->UpsertNode({"a1", "training", "cpu", 2, "available", 1}));
    EventRecord e;
    e.time = 10;
    e.job = *id;
    e.kind = "start";
    e.detail = "started";
    e.nodes = {"a1", "a2"};
    e.data = "{\"workers\":3}";
    ARYL_RETURN_IF_ERROR((*s)->AppendEvent(e));
    for (int i = 0; i < 5; ++i) ARYL_RETURN_IF_ERROR((*s)->AppendCoreEvent(i, "row" + std::to_string(i)));
    return (*s)->SetMeta("epoch", "42.5");
  }).ok());
  ASSERT_TRUE((*s)->SaveCoreSnapshot(std::string(300 * 1024, 'S'), 3).ok());
  ASSERT_TRUE((*s)->AppendCoreEvent(6, "row-after").ok());
  EXPECT_GT((*s)->transactions(), 0u);

  auto again = Open(term);
  ASSERT_TRUE(again.ok()) << again.status();
  auto& t = **again;
  auto job = t.GetJob(*id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name, "train");
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_EQ(job->generation, 3u);
  EXPECT_EQ(job->placement, (std::map<std::string, int>{{"a1", 2}, {"a2", 1}}));
  EXPECT_EQ(job->submit_time, 1234.5);
  EXPECT_EQ(*t.FindJobByToken("u\x1ftok"), std::optional<std::uint64_t>(*id));
  auto nodes = t.ListNodes();
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].server_id, 1u);
  auto events = t.Events(*id);
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].nodes, (std::vector<std::string>{"a1", "a2"}));
  EXPECT_EQ((*events)[0].data, "{\"workers\":3}");
  EXPECT_EQ(**t.GetMeta("epoch"), "42.5");
  EXPECT_EQ(**t.CoreSnapshot(), std::string(300 * 1024, 'S'));
  auto core = t.CoreEvents();
  ASSERT_EQ(core->size(), 3u);  // seqs 4..6: 1..3 are in the snapshot
  EXPECT_EQ((*core)[0].second, "row3");
  EXPECT_EQ((*core)[2].second, "row-after");
  EXPECT_EQ(*t.CoreEvents(), *(*s)->CoreEvents());  // etcd holds what the leader's index holds
  // New rows continue the sequences.
  auto id2 = t.InsertJob(JobRecord{.name = "second", .spec_json = "{}"});
  ASSERT_TRUE(id2.ok());
  EXPECT_EQ(*id2, *id + 1);
  // The retry of a submission finds the first job.
  JobRecord dup = j;
  EXPECT_TRUE(t.InsertJob(dup).status().code() == Status::Code::kAlreadyExists);
}

TEST_F(EtcdStoreTest, StaleTermWritesNothing) {
  std::int64_t term = Lead();
  std::string deposed;
  auto s = Open(term, &deposed);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->SetMeta("k", "1").ok());
  // Another scheduler takes over: the key is deleted and created again.
  ASSERT_TRUE(client_->Delete(url_.prefix + "leader").ok());
  std::int64_t newer = Lead();
  ASSERT_GT(newer, term);
  Status st = (*s)->SetMeta("k", "2");
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition) << st;
  EXPECT_NE(deposed.find("another scheduler leads"), std::string::npos) << deposed;
  EXPECT_EQ(**(*s)->GetMeta("k"), "1");  // the index rolled back
  auto fresh = Open(newer);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(**(*fresh)->GetMeta("k"), "1");
}

// One batch that upserts a node twice, appends a journal row that the
// snapshot of the same batch removes, and appends one after it: etcd refuses
// such a transaction as it is ("duplicate key given in txn request").
TEST_F(EtcdStoreTest, ABatchThatWritesAKeyTwiceLands) {
  std::int64_t term = Lead();
  auto s = Open(term);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->AppendCoreEvent(1, "row1").ok());
  Status st = (*s)->Batch([&]() -> Status {
    ARYL_RETURN_IF_ERROR((*s)->UpsertNode({"a1", "training", "cpu", 2, "available", 1}));
    ARYL_RETURN_IF_ERROR((*s)->AppendCoreEvent(2, "row2"));
    ARYL_RETURN_IF_ERROR((*s)->UpsertNode({"a1", "training", "cpu", 4, "loaned", 1}));
    ARYL_RETURN_IF_ERROR((*s)->SaveCoreSnapshot("snap-after-2"));
    return (*s)->AppendCoreEvent(3, "row3");
  });
  ASSERT_TRUE(st.ok()) << st;
  auto t = Open(term);
  ASSERT_TRUE(t.ok()) << t.status();
  auto nodes = (*t)->ListNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].gpus, 4);
  EXPECT_EQ((*nodes)[0].loan_state, "loaned");
  EXPECT_EQ(**(*t)->CoreSnapshot(), "snap-after-2");
  EXPECT_EQ(*(*t)->CoreEvents(), *(*s)->CoreEvents());
}

// A state of many keys read back whole in small pages: etcd visits each key
// for its own page and for the few pages that look for a table's first key,
// not once per page before it (a range with a limit counts every key up to
// its range_end: pages up to the prefix's end would visit N^2 / 2 x page keys).
TEST_F(EtcdStoreTest, AStateReadInPagesVisitsEachKeyAFewTimes) {
  const std::int64_t term = Lead();
  auto s = Open(term);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Batch([&]() -> Status {
    for (int i = 0; i < 1200; ++i) {
      JobRecord j;
      j.name = "job" + std::to_string(i);
      j.spec_json = "{}";
      ARYL_RETURN_IF_ERROR((*s)->InsertJob(j).status());
    }
    for (int i = 0; i < 40; ++i)
      ARYL_RETURN_IF_ERROR((*s)->UpsertNode({"n" + std::to_string(i), "training", "cpu", 1, "available", 0}));
    return Status::Ok();
  }).ok());
  std::string body;
  for (int k = 0; k < 5; ++k) body += std::string(StateStore::kCoreSnapshotPieceBytes, static_cast<char>('a' + k));
  ASSERT_TRUE((*s)->SaveCoreSnapshot(body).ok());  // 5 chunks and a head
  for (int i = 0; i < 7; ++i) ASSERT_TRUE((*s)->AppendCoreEvent(i, "row" + std::to_string(i)).ok());

  for (std::int64_t page : {1000, 30}) {
    EtcdStateStore::Options o;
    o.location = "test";
    o.prefix = url_.prefix;
    o.term = term;
    o.load_page_keys = page;
    o.load_page_chunks = 2;
    auto t = EtcdStateStore::Open(client_, o);
    ASSERT_TRUE(t.ok()) << t.status();
    const std::size_t n = (*t)->loaded_keys();
    EXPECT_GE(n, 1200u + 40 + 6 + 7) << page;
    EXPECT_LE((*t)->load_counted_keys(), 4 * n) << page;
    EXPECT_EQ((*t)->ListJobs()->size(), 1200u);
    EXPECT_EQ((*t)->ListNodes()->size(), 40u);
    EXPECT_EQ(**(*t)->CoreSnapshot(), body);
    EXPECT_EQ(*(*t)->CoreEvents(), *(*s)->CoreEvents());
  }
}

// etcd stops answering (the member is stopped: every request runs into its
// timeout). A write rides it out for retry_seconds and one try, gives up
// with Unavailable and reports it (on_unavailable: the daemon freezes); with
// may_write false (frozen) nothing is sent and nothing waits: the daemon's
// thread that writes also answers agents' heartbeats.
TEST_F(EtcdStoreTest, AWriteToAnAbsentEtcdGivesUpAndAFrozenOneWaitsOnNothing) {
  std::int64_t term = Lead();
  etcd::ClientOptions co;
  co.endpoints = url_.endpoints;
  co.request_timeout = 0.5;
  auto c = etcd::Client::Connect(co);
  ASSERT_TRUE(c.ok()) << c.status();
  std::shared_ptr<etcd::Client> slow(std::move(*c));
  EtcdStateStore::Options o;
  o.location = "test";
  o.prefix = url_.prefix;
  o.term = term;
  o.retry_seconds = 0.6;
  std::atomic<bool> may{true};
  std::string unavailable;
  o.may_write = [&] { return may.load(); };
  o.on_unavailable = [&](const std::string& why) { unavailable = why; };
  auto s = EtcdStateStore::Open(slow, o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->SetMeta("k", "1").ok());
  etcd_.Pause(0);
  auto t0 = std::chrono::steady_clock::now();
  Status st = (*s)->SetMeta("k", "2");
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(st.IsUnavailable()) << st;
  EXPECT_GT(took, 0.6);
  EXPECT_LT(took, 0.6 + 0.5 + 0.6) << "tries go on past retry_seconds";
  EXPECT_FALSE(unavailable.empty());
  EXPECT_EQ(**(*s)->GetMeta("k"), "1");  // rolled back
  may = false;
  t0 = std::chrono::steady_clock::now();
  st = (*s)->SetMeta("k", "3");
  took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(st.IsUnavailable()) << st;
  EXPECT_LT(took, 0.1) << "a frozen leader's write waits on nothing";
  etcd_.Resume(0);
  may = true;
  // The "2" that gave up may still land once etcd runs again, before or after
  // the next write: it never lands over it. A write that finds it landed late
  // is Unavailable and reads the state again; the one after it goes in.
  for (int i = 0; i < 3; ++i) {
    st = (*s)->SetMeta("k", "4");
    if (st.ok()) break;
    EXPECT_TRUE(st.IsUnavailable()) << st;
  }
  EXPECT_TRUE(st.ok()) << st;
  auto t = Open(term);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(**(*t)->GetMeta("k"), "4");
}

// A transaction of the leader that gave up (Unavailable) and that etcd
// applies later, after the store went on, never lands over newer writes and
// is not lost: the next write's comparison of P/writer fails, the write
// is Unavailable naming it, and the store reads the prefix again. Here the
// late transaction is put by hand, as it would land: P/writer and a row.
TEST_F(EtcdStoreTest, ATransactionThatLandsLateIsSeenNotOverwritten) {
  std::int64_t term = Lead();
  auto s = Open(term);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->SetMeta("k", "1").ok());
  etcd::TxnRequest late;
  late.success = {etcd::Op::Put(url_.prefix + "writer", std::to_string(term) + "/99"),
                  etcd::Op::Put(url_.prefix + "s/meta/late", "landed")};
  ASSERT_TRUE(client_->Txn(late).ok());
  Status st = (*s)->SetMeta("k", "2");
  EXPECT_TRUE(st.IsUnavailable()) << st;
  EXPECT_NE(st.message().find("landed late"), std::string::npos) << st;
  EXPECT_EQ(**(*s)->GetMeta("k"), "1") << "rolled back";
  ASSERT_TRUE((*s)->SetMeta("k", "3").ok()) << "read again, then written";
  EXPECT_EQ(**(*s)->GetMeta("late"), "landed") << "the late row is in the index now";
  auto t = Open(term);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(**(*t)->GetMeta("k"), "3");
  EXPECT_EQ(**(*t)->GetMeta("late"), "landed");
}

// A standby's follower, started before the leader wrote anything and kept
// current by its watch, takes over with the same state a fresh read gives:
// jobs put again at every change, events, nodes, meta, core rows, and a
// snapshot in several chunks that removes the core rows it covers. A write
// of the old leader after the new term began is refused (fenced), so the
// marker write proves the copy complete.
TEST_F(EtcdStoreTest, AFollowerTakesOverWhatAFreshReadGives) {
  std::int64_t term = Lead();
  auto s = Open(term);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->AppendCoreEvent(0, "row0").ok());
  EtcdStateStore::Options fo;
  fo.location = "test";
  fo.prefix = url_.prefix;
  fo.max_txn_bytes = 64 * 1024;
  auto follower = StateFollower::Start(client_, fo);
  ASSERT_TRUE(follower.ok()) << follower.status();
  EXPECT_GT((*follower)->loaded_keys(), 0u);

  auto id = (*s)->InsertJob(JobRecord{.name = "train", .client_token = "tok", .spec_json = "{}"});
  ASSERT_TRUE(id.ok()) << id.status();
  for (int g = 1; g <= 3; ++g) {
    JobRecord r = *(*s)->GetJob(*id);
    r.state = JobState::kRunning;
    r.generation = static_cast<std::uint64_t>(g);
    r.placement = {{"a" + std::to_string(g), g}};
    ASSERT_TRUE((*s)->UpdateJob(r).ok());
  }
  ASSERT_TRUE((*s)->UpsertNode({"a1", "training", "cpu", 2, "available", 1}).ok());
  ASSERT_TRUE((*s)->AppendEvent(EventRecord{0, 5, *id, "start", "started", {"a1"}, "{}"}).ok());
  for (int i = 1; i <= 6; ++i) ASSERT_TRUE((*s)->AppendCoreEvent(i, "row" + std::to_string(i)).ok());
  ASSERT_TRUE((*s)->SaveCoreSnapshot(std::string(150 * 1024, 'A'), 4).ok());  // three chunks; rows 1..4 go
  ASSERT_TRUE((*s)->AppendCoreEvent(7, "row7").ok());
  ASSERT_TRUE((*s)->SaveCoreSnapshot(std::string(100 * 1024, 'B'), 6).ok());  // the first one's chunks go
  ASSERT_TRUE((*s)->SetMeta("epoch", "9").ok());

  // A new leader: the key deleted and created again, as after an expiry.
  ASSERT_TRUE(client_->Delete(url_.prefix + "leader").ok());
  std::int64_t newer = Lead();
  EXPECT_FALSE((*s)->SetMeta("epoch", "stale").ok()) << "the old leader is fenced";
  EtcdStateStore::Options lo = fo;
  lo.term = newer;
  auto taken = (*follower)->TakeOver(lo, 5.0);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_GT((*taken)->watched_events(), 10u);
  auto fresh = Open(newer);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  auto& f = **taken;
  auto& r = **fresh;
  auto job = f.GetJob(*id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->generation, 3u);
  EXPECT_EQ(job->placement, (std::map<std::string, int>{{"a3", 3}}));
  EXPECT_EQ(*f.FindJobByToken("tok"), std::optional<std::uint64_t>(*id));
  EXPECT_EQ(f.ListNodes()->size(), 1u);
  EXPECT_EQ(f.Events(*id)->size(), 1u);
  EXPECT_EQ(**f.GetMeta("epoch"), "9");
  EXPECT_EQ(**f.GetMeta("leader_term"), std::to_string(newer));
  EXPECT_EQ(**f.CoreSnapshot(), std::string(100 * 1024, 'B'));
  EXPECT_EQ(*f.CoreEvents(), *r.CoreEvents());
  ASSERT_EQ(f.CoreEvents()->size(), 2u);  // seqs 7 and 8 (row6, row7): row0 took seq 1
  EXPECT_EQ(**f.CoreSnapshot(), **r.CoreSnapshot());
  EXPECT_EQ(f.ListJobs()->size(), r.ListJobs()->size());
  // It leads: its writes land under the new term and continue the sequences.
  ASSERT_TRUE(f.AppendCoreEvent(8, "row8").ok());
  auto id2 = f.InsertJob(JobRecord{.name = "second", .spec_json = "{}"});
  ASSERT_TRUE(id2.ok()) << id2.status();
  EXPECT_EQ(*id2, *id + 1);
  auto after = Open(newer);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*(*after)->CoreEvents(), *f.CoreEvents());
}

// A change no leader makes (a job's key deleted by hand) stops the
// following: the follower refuses to take over, naming the key, and the
// caller reads the state whole instead.
TEST_F(EtcdStoreTest, AFollowerThatSawAForeignChangeRefusesToTakeOver) {
  std::int64_t term = Lead();
  auto s = Open(term);
  ASSERT_TRUE(s.ok()) << s.status();
  auto id = (*s)->InsertJob(JobRecord{.name = "train", .spec_json = "{}"});
  ASSERT_TRUE(id.ok());
  EtcdStateStore::Options fo;
  fo.location = "test";
  fo.prefix = url_.prefix;
  auto follower = StateFollower::Start(client_, fo);
  ASSERT_TRUE(follower.ok()) << follower.status();
  ASSERT_TRUE(client_->Delete(url_.prefix + "s/job/00000000000000000001").ok());
  EtcdStateStore::Options lo = fo;
  lo.term = term;
  auto taken = (*follower)->TakeOver(lo, 5.0);
  ASSERT_FALSE(taken.ok());
  EXPECT_NE(taken.status().message().find("s/job/00000000000000000001"), std::string::npos) << taken.status();
}

TEST_F(EtcdStoreTest, StandbyLeadsAfterResignAndAfterLeaseExpiry) {
  // a's TTL is long (a keep-alive every 2 s), so "at once" and "through the
  // watch" are told apart from "after the keep-alive period / the TTL" with
  // margins a loaded machine's etcd round trips fit in; b's is short, so its
  // expiry is quick to wait for.
  auto make = [&](const std::string& name, std::int64_t ttl) {
    ElectionOptions o;
    o.prefix = url_.prefix;
    o.endpoint = "tcp://" + name + ":7117";
    o.name = name;
    o.ttl_seconds = ttl;
    return std::make_shared<LeaderElection>(client_, o);
  };
  std::atomic<bool> stop{false};
  auto a = make("a", 6);
  ASSERT_TRUE(a->Campaign(stop, nullptr).ok());
  EXPECT_TRUE(a->CanDecide());
  // A failed state write freezes the leader until a keep-alive sent after it
  // is answered; one is sent at once, not a third of the TTL later.
  EXPECT_EQ(a->write_failures(), 0u);
  a->WriteFailed("test: etcd away");
  EXPECT_FALSE(a->CanDecide());
  EXPECT_EQ(a->write_failures(), 1u) << "counted, so a handler sees its write failed after the freeze lifts";
  EXPECT_NE(a->Why().find("etcd away"), std::string::npos) << a->Why();
  auto f0 = std::chrono::steady_clock::now();
  while (!a->CanDecide() && std::chrono::steady_clock::now() - f0 < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(a->CanDecide());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count(), 1.5)
      << "the probe goes at once, not with the next keep-alive 2 s later";
  auto b = make("b", 2);
  std::atomic<bool> b_won{false};
  std::string seen;
  std::thread tb([&] {
    if (b->Campaign(stop, [&](const std::string& e, std::uint64_t) { seen = e; }).ok()) b_won = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(b_won);
  auto t0 = std::chrono::steady_clock::now();
  a->Resign();
  tb.join();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(b_won);
  EXPECT_EQ(seen, "tcp://a:7117");
  EXPECT_LT(took, 3.0) << "a resignation is seen through the watch, not after a's TTL of 6 s";
  EXPECT_GT(b->term(), a->term());
  EXPECT_FALSE(a->CanDecide());

  // b dies without resigning (its keep-alive stops): a leads once b's lease expires.
  std::uint64_t b_term = b->term();
  b.reset();
  t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(a->Campaign(stop, nullptr).ok());
  took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(a->term(), b_term);
  EXPECT_LT(took, 2 + 3.0);
  std::printf("leadership moved %.2f s after the leader's keep-alive stopped (TTL 2 s)\n", took);
}

}  // namespace
}  // namespace aryl::daemon
