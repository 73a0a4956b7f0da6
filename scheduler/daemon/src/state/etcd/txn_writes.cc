#include "state/etcd/txn_writes.h"

#include <map>
#include <optional>
#include <string>

namespace aryl::etcd {
namespace {

// A delete as [lo, hi); hi empty: up to no end (etcd's range_end "\0").
struct Span {
  std::string lo, hi;
  bool Covers(const std::string& k) const { return k >= lo && (hi.empty() || k < hi); }
};

Span SpanOf(const Op& d) {
  if (d.range_end.empty()) return {d.key, d.key + '\0'};  // one key
  if (d.range_end == std::string(1, '\0')) return {d.key, {}};
  return {d.key, d.range_end};
}

Op DeleteOf(const Span& s) { return Op::Delete(s.lo, s.hi.empty() ? std::string(1, '\0') : s.hi); }

}  // namespace

std::vector<Op> CoalesceWrites(std::vector<Op> ops) {
  // Slots in order; a put or a delete may be emptied (or a delete split) by
  // a later op.
  std::vector<std::optional<Op>> out;
  std::vector<std::vector<Span>> spans;  // per slot: what a delete still covers
  std::vector<std::size_t> deletes;      // slots that are deletes
  std::map<std::string, std::size_t> put_at;
  out.reserve(ops.size());
  spans.reserve(ops.size());
  for (Op& op : ops) {
    std::vector<Span> covers;
    if (op.kind == Op::Kind::kPut) {
      if (auto it = put_at.find(op.key); it != put_at.end()) out[it->second].reset();
      for (std::size_t d : deletes) {
        std::vector<Span> kept;
        for (const Span& s : spans[d]) {
          if (!s.Covers(op.key)) {
            kept.push_back(s);
            continue;
          }
          if (s.lo < op.key) kept.push_back({s.lo, op.key});
          std::string after = op.key + '\0';
          if (s.hi.empty() || after < s.hi) kept.push_back({after, s.hi});
        }
        spans[d] = std::move(kept);
      }
      put_at[op.key] = out.size();
    } else if (op.kind == Op::Kind::kDelete) {
      Span s = SpanOf(op);
      for (auto it = put_at.lower_bound(s.lo); it != put_at.end() && s.Covers(it->first);) {
        out[it->second].reset();
        it = put_at.erase(it);
      }
      deletes.push_back(out.size());
      covers.push_back(std::move(s));
    }
    spans.push_back(std::move(covers));
    out.push_back(std::move(op));
  }
  std::vector<Op> result;
  result.reserve(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!out[i]) continue;
    if (out[i]->kind != Op::Kind::kDelete) {
      result.push_back(std::move(*out[i]));
      continue;
    }
    const auto& pieces = spans[i];
    if (pieces.size() == 1 && pieces[0].lo == out[i]->key && SpanOf(*out[i]).hi == pieces[0].hi) {
      result.push_back(std::move(*out[i]));  // untouched: as the caller wrote it
      continue;
    }
    for (const Span& s : pieces) result.push_back(DeleteOf(s));
  }
  return result;
}

}  // namespace aryl::etcd
