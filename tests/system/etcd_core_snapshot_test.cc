// The core snapshot in pieces on the etcd backend (state_store.h, steps
// 1-4), against a real etcd member: pieces with rows between them, a restart
// in the middle, a newer snapshot cancelling an older one.
#include <gtest/gtest.h>

#include "etcd_store_fixture.h"

namespace aryl::daemon {
namespace {

// Snapshot chunk keys under the prefix (P/s/snap/<id>/<k>), the head excluded.
std::size_t ChunkKeys(etcd::Client& c, const std::string& prefix) {
  auto r = c.Range(prefix + "s/snap/", etcd::PrefixEnd(prefix + "s/snap/"));
  if (!r.ok()) return 0;
  std::size_t n = 0;
  for (const auto& kv : r->kvs)
    if (kv.key != prefix + "s/snap/head") ++n;
  return n;
}

// A snapshot appended over many transactions with core rows between them:
// until its commit another reader (a restart) sees the previous snapshot and
// every row; after it, the pieces joined and only the later rows.
TEST_F(EtcdStoreTest, SnapshotInPiecesWithRowsBetween) {
  const std::int64_t term = Lead();
  auto s = Open(term);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->SaveCoreSnapshot("old").ok());
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE((*s)->AppendCoreEvent(i, "row" + std::to_string(i)).ok());
  auto id = (*s)->BeginCoreSnapshot(*(*s)->LastCoreEventSeq());
  ASSERT_TRUE(id.ok()) << id.status();
  std::string whole;
  const std::uint64_t txns = (*s)->transactions();
  for (int k = 0; k < 12; ++k) {
    std::string piece = std::string(k == 5 ? 700 * 1024 : 1000 + k, static_cast<char>('a' + k));  // one of two chunks
    whole += piece;
    ASSERT_TRUE((*s)->AppendCoreSnapshot(*id, piece).ok());
    ASSERT_TRUE((*s)->AppendCoreEvent(10 + k, "between" + std::to_string(k)).ok());
  }
  EXPECT_GE((*s)->transactions() - txns, 24u);  // a piece is a transaction of its own
  {
    auto reader = Open(0);
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ(**(*reader)->CoreSnapshot(), "old");
    EXPECT_EQ((*reader)->CoreEvents()->size(), 15u);
  }
  ASSERT_TRUE((*s)->CommitCoreSnapshot(*id).ok());
  EXPECT_EQ(**(*s)->CoreSnapshot(), whole);
  EXPECT_EQ(ChunkKeys(*client_, url_.prefix), 13u);  // the old snapshot's chunk went
  auto again = Open(term);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(**(*again)->CoreSnapshot(), whole);
  auto rows = (*again)->CoreEvents();
  ASSERT_EQ(rows->size(), 12u);
  EXPECT_EQ(rows->front().second, "between0");
  EXPECT_EQ(*rows, *(*s)->CoreEvents());
}

// The leader stops half-way through a snapshot: a new leader's store reads
// the previous snapshot and every row, and deletes the orphaned chunks; a
// newer snapshot begun while one is in flight cancels the older.
TEST_F(EtcdStoreTest, RestartMidSnapshotAndNewerCancelsOlder) {
  const std::int64_t term = Lead();
  {
    auto s = Open(term);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE((*s)->AppendCoreEvent(1, "row1").ok());
    ASSERT_TRUE((*s)->SaveCoreSnapshot("kept").ok());
    ASSERT_TRUE((*s)->AppendCoreEvent(2, "row2").ok());
    auto id = (*s)->BeginCoreSnapshot(*(*s)->LastCoreEventSeq());
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE((*s)->AppendCoreSnapshot(*id, "half of").ok());
    ASSERT_TRUE((*s)->AppendCoreSnapshot(*id, " a snapshot").ok());
    ASSERT_TRUE((*s)->AppendCoreEvent(3, "row3").ok());
  }
  EXPECT_EQ(ChunkKeys(*client_, url_.prefix), 3u);
  auto s = Open(term);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(ChunkKeys(*client_, url_.prefix), 1u);
  EXPECT_EQ(**(*s)->CoreSnapshot(), "kept");
  auto rows = (*s)->CoreEvents();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].second, "row2");
  // Newer cancels older.
  auto older = (*s)->BeginCoreSnapshot(*(*s)->LastCoreEventSeq());
  ASSERT_TRUE(older.ok());
  ASSERT_TRUE((*s)->AppendCoreSnapshot(*older, "older").ok());
  auto newer = (*s)->BeginCoreSnapshot(*(*s)->LastCoreEventSeq());
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ((*s)->AppendCoreSnapshot(*older, "more").code(), Status::Code::kCancelled);
  EXPECT_EQ((*s)->CommitCoreSnapshot(*older).code(), Status::Code::kCancelled);
  EXPECT_EQ(ChunkKeys(*client_, url_.prefix), 1u);
  ASSERT_TRUE((*s)->AppendCoreSnapshot(*newer, "newer").ok());
  ASSERT_TRUE((*s)->CommitCoreSnapshot(*newer).ok());
  auto t = Open(term);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(**(*t)->CoreSnapshot(), "newer");
  EXPECT_TRUE((*t)->CoreEvents()->empty());
  EXPECT_EQ(ChunkKeys(*client_, url_.prefix), 1u);
}

}  // namespace
}  // namespace aryl::daemon
