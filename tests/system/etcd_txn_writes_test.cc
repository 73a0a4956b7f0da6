// CoalesceWrites (txn_writes.h): a batch's puts and deletes rewritten so etcd
// takes them as one transaction, with the effect of applying them in order.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "state/etcd/txn_writes.h"

namespace aryl::etcd {
namespace {

// The keys an op list leaves, applied in order to `before`.
std::map<std::string, std::string> Apply(std::map<std::string, std::string> kv, const std::vector<Op>& ops) {
  for (const Op& op : ops) {
    if (op.kind == Op::Kind::kPut) {
      kv[op.key] = op.value;
    } else if (op.kind == Op::Kind::kDelete) {
      for (auto it = kv.lower_bound(op.key); it != kv.end();) {
        bool in = op.range_end.empty() ? it->first == op.key
                                       : op.range_end == std::string(1, '\0') || it->first < op.range_end;
        if (!in) break;
        it = kv.erase(it);
      }
    }
  }
  return kv;
}

// etcd's own check (checkIntervals): no key put twice, no put inside a delete.
bool EtcdAccepts(const std::vector<Op>& ops) {
  std::map<std::string, int> puts;
  for (const Op& op : ops)
    if (op.kind == Op::Kind::kPut && puts[op.key]++ > 0) return false;
  for (const Op& d : ops) {
    if (d.kind != Op::Kind::kDelete) continue;
    for (const auto& [k, n] : puts)
      if (Apply({{k, ""}}, {d}).empty()) return false;
  }
  return true;
}

void ExpectSameEffect(const std::vector<Op>& ops, const std::map<std::string, std::string>& before = {}) {
  std::vector<Op> out = CoalesceWrites(ops);
  EXPECT_TRUE(EtcdAccepts(out));
  EXPECT_EQ(Apply(before, out), Apply(before, ops));
}

TEST(CoalesceWritesTest, TheLastPutOfAKeyWins) {
  std::vector<Op> ops = {Op::Put("n/a1", "1"), Op::Put("n/a2", "x"), Op::Put("n/a1", "2")};
  ASSERT_FALSE(EtcdAccepts(ops));
  std::vector<Op> out = CoalesceWrites(ops);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].key, "n/a2");
  EXPECT_EQ(out[1].key, "n/a1");
  EXPECT_EQ(out[1].value, "2");
  ExpectSameEffect(ops);
}

TEST(CoalesceWritesTest, ADeleteDropsThePutsItCovers) {
  // A journal row appended, then removed by the snapshot that replaces it.
  std::vector<Op> ops = {Op::Put("c/01", "r1"), Op::Put("c/02", "r2"), Op::Put("s/1/0", "chunk"),
                         Op::Delete("c/", PrefixEnd("c/")), Op::Put("s/head", "1")};
  ASSERT_FALSE(EtcdAccepts(ops));
  std::vector<Op> out = CoalesceWrites(ops);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].key, "s/1/0");  // the order of what stays is kept
  EXPECT_EQ(out[1].kind, Op::Kind::kDelete);
  EXPECT_EQ(out[2].key, "s/head");
  ExpectSameEffect(ops, {{"c/00", "old"}});
}

TEST(CoalesceWritesTest, APutAfterADeleteIsCarvedOutOfIt) {
  std::vector<Op> ops = {Op::Delete("c/", PrefixEnd("c/")), Op::Put("c/05", "new"), Op::Delete("x"),
                         Op::Put("x", "back"), Op::Delete("z/", std::string(1, '\0')), Op::Put("z/q", "1")};
  ASSERT_FALSE(EtcdAccepts(ops));
  ExpectSameEffect(ops, {{"c/01", "a"}, {"c/05", "b"}, {"c/09", "c"}, {"x", "y"}, {"z/a", "1"}, {"zz", "2"}});
  std::vector<Op> out = CoalesceWrites(ops);
  auto after = Apply({{"c/01", "a"}, {"c/09", "c"}}, out);
  EXPECT_EQ(after, (std::map<std::string, std::string>{{"c/05", "new"}, {"x", "back"}, {"z/q", "1"}}));
}

TEST(CoalesceWritesTest, ListsWithoutConflictsPassUnchanged) {
  std::vector<Op> ops = {Op::Put("a", "1"), Op::Delete("b", "c"), Op::Put("c", "2"), Op::Delete("d")};
  std::vector<Op> out = CoalesceWrites(ops);
  ASSERT_EQ(out.size(), ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(out[i].key, ops[i].key);
    EXPECT_EQ(out[i].range_end, ops[i].range_end);
  }
}

TEST(CoalesceWritesTest, RandomListsKeepTheirEffect) {
  std::uint32_t seed = 12345;
  auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
  const char* keys[] = {"a", "a0", "b", "b1", "b2", "c", "d"};
  for (int round = 0; round < 500; ++round) {
    std::vector<Op> ops;
    int n = 1 + next() % 8;
    for (int i = 0; i < n; ++i) {
      std::string k = keys[next() % 7];
      switch (next() % 4) {
        case 0: ops.push_back(Op::Delete(k)); break;
        case 1: ops.push_back(Op::Delete(k, std::string(keys[next() % 7]) + "z")); break;
        default: ops.push_back(Op::Put(k, std::to_string(i)));
      }
    }
    SCOPED_TRACE(round);
    ExpectSameEffect(ops, {{"a", "o"}, {"b1", "o"}, {"c", "o"}, {"e", "o"}});
  }
}

}  // namespace
}  // namespace aryl::etcd
