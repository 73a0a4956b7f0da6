// The greedy reclaim strategy: servers returned one at a time, each the one
// of least cost per server it returns, at each notice step.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "reclaim_internal.h"

namespace aryl::sched::internal {
namespace {

// Candidates per block of the greedy's scan (GreedyChoice).
constexpr size_t kBlock = 32;
thread_local bool block_skip = true;  // SetGreedyBlockSkip

// What returning one server does to one of its jobs: its placement after
// (empty: preempted) and the workers that leave each of its other servers.
// The same at every notice; only its price depends on the notice.
struct Removal {
  const JobInfo* job = nullptr;
  Placement next;
  int workers_after = 0;
  std::vector<std::pair<ServerId, int>> dropped;  // other server -> workers leaving it
};

// Scratch view for the greedy strategy: placements after the servers chosen so
// far are returned.
struct Scratch {
  const ClusterState& state;
  bool elastic = true;
  Seconds notice = 0;
  std::unordered_map<JobId, Placement> placement;  // overrides; empty = preempted
  // What made `placement`: per server returned, in order, its id, how many
  // of its jobs took their placement after, and their ids (the others were
  // left to finish). Equal histories make equal scratch states.
  std::vector<std::uint64_t> history;
  size_t depth = 0;  // servers returned so far (entries of `history`)

  // The override of `job`'s placement, or null when it has none.
  const Placement* Override(JobId job) const {
    if (placement.empty()) return nullptr;  // the first step of every pass
    auto it = placement.find(job);
    return it == placement.end() ? nullptr : &it->second;
  }
  const Placement& Of(const JobInfo& job) const {
    const Placement* o = Override(job.spec.id);
    return o ? *o : job.placement;
  }
  // What returning `sid` next does to each of its jobs, in the server's order.
  std::vector<Removal> Removals(ServerId sid) const {
    std::vector<Removal> out;
    const auto removed = [sid](ServerId x) { return x == sid; };
    out.reserve(state.server(sid)->jobs.size());
    for (const auto& [jid, unused] : state.server(sid)->jobs) {
      const JobInfo& job = *state.job(jid);
      // A job the server lists is on it unless an override moved it away.
      const Placement* o = Override(jid);
      if (o && (o->empty() || !o->count(sid))) continue;
      const Placement& cur = o ? *o : job.placement;
      Removal r{&job, AfterRemoval(state, job, cur, removed, elastic), 0, {}};
      for (const auto& [x, n] : r.next) r.workers_after += n;
      for (const auto& [other, n] : cur) {
        if (other == sid) continue;
        auto it = r.next.find(other);
        const int stays = it == r.next.end() ? 0 : it->second;
        if (n > stays) r.dropped.emplace_back(other, n - stays);
      }
      out.push_back(std::move(r));
    }
    return out;
  }
  // The cost at `notice` of returning a server with these removals. `freed`
  // (when given) receives how many other servers this leaves empty: a
  // preemption frees the job's workers everywhere, so one preemption may
  // return several servers.
  ReclaimCost Price(const std::vector<Removal>& removals, int* freed = nullptr) const {
    ReclaimCost cost;
    static thread_local std::vector<std::pair<ServerId, int>> dropped;  // other server -> workers leaving it
    dropped.clear();
    for (const Removal& r : removals) {
      const JobInfo& job = *r.job;
      if (LeftToFinish(state, job, notice)) continue;  // stays; costs nothing
      if (r.next.empty()) {
        cost.preemptions++;
        cost.lost_gpu_seconds += PreemptLoss(state, job, notice);
      } else {
        cost.lost_gpu_seconds += r.workers_after * state.config().RescalePause(job.spec);
      }
      if (!freed) continue;
      for (const auto& [other, n] : r.dropped) {
        auto d = std::find_if(dropped.begin(), dropped.end(), [other = other](const auto& e) { return e.first == other; });
        if (d == dropped.end()) {
          dropped.emplace_back(other, n);
        } else {
          d->second += n;
        }
      }
    }
    if (freed) {
      *freed = 0;
      for (const auto& [other, n] : dropped) {
        if (state.server(other)->loaned() && Used(other) == n) ++*freed;
      }
    }
    return cost;
  }
  // Returns `sid` with these removals (Removals(sid)): its jobs not left to
  // finish take their placements after.
  void Apply(ServerId sid, const std::vector<Removal>& removals) {
    ++depth;
    history.push_back(sid);
    const size_t count = history.size();
    history.push_back(0);
    for (const Removal& r : removals) {
      if (LeftToFinish(state, *r.job, notice)) continue;
      placement[r.job->spec.id] = r.next;
      history.push_back(r.job->spec.id);
      ++history[count];
    }
  }
  int Used(ServerId sid) const {
    int used = 0;
    for (const auto& [jid, n] : state.server(sid)->jobs) {
      const Placement* o = Override(jid);
      if (!o) {
        used += n;  // the server's own count of the job's workers
        continue;
      }
      auto it = o->find(sid);
      if (it != o->end()) used += it->second;
    }
    return used;
  }
};

// The first notice above `x` (> 0) at which the cost of one of these
// removals changes (ForCostPoints); kNever: none.
Seconds NextCostStep(const ClusterState& state, const std::vector<Removal>& removals, Seconds x) {
  Seconds next = kNever;
  for (const Removal& r : removals) {
    ForCostPoints(state, *r.job, [&](Seconds p) {
      if (p > x) next = std::min(next, p);
    });
  }
  return next;
}

// What the greedy's passes learn about returning a server next from one
// scratch state, kept across its notice steps. A pass at another notice
// usually returns the same servers with the same jobs left to finish: its
// scratch state has the same history, hence the same removals and used
// GPUs; their price changes only at a step of one of their jobs.
// levels_[d] holds what is known of the state after d returns.
class RemovalCache {
 public:
  // A pass (GreedyChoice) starts with a new Scratch.
  void NewPass() { checked_ = nullptr; }
  const std::vector<Removal>& Of(const Scratch& scratch, ServerId sid) {
    Slot& s = At(scratch, sid);
    if (!s.built) {
      s.removals = scratch.Removals(sid);
      s.built = true;
    }
    return s.removals;
  }
  // Scratch::Price of returning `sid` next, with `*freed`, and its used GPUs
  // (Scratch::Used) in `*used`; an empty server costs nothing.
  ReclaimCost Price(const Scratch& scratch, ServerId sid, int* freed, int* used) {
    Slot& s = At(scratch, sid);
    if (s.used < 0) s.used = scratch.Used(sid);
    *used = s.used;
    *freed = 0;
    if (s.used == 0) return ReclaimCost{};
    const Seconds x = scratch.notice;
    const bool holds = s.priced && (x == s.priced_at || (s.priced_at > 0 && x > s.priced_at && x < s.valid_until));
    if (!holds) {
      const std::vector<Removal>& removals = Of(scratch, sid);
      s.cost = scratch.Price(removals, &s.freed);
      s.priced = true;
      s.priced_at = x;
      s.valid_until = x > 0 ? NextCostStep(scratch.state, removals, x) : x;
    }
    *freed = s.freed;
    return s.cost;
  }

 private:
  struct Slot {
    bool built = false;
    std::vector<Removal> removals;
    int used = -1;  // -1: not counted yet
    bool priced = false;
    Seconds priced_at = 0;    // the notice `cost` and `freed` are for; they hold
    Seconds valid_until = 0;  // for notices in [priced_at, valid_until) when priced_at > 0
    ReclaimCost cost;
    int freed = 0;
  };
  struct Level {
    size_t len = 0;  // its history: the first `len` entries of history_
    std::unordered_map<ServerId, Slot> slots;
  };
  Slot& At(const Scratch& scratch, ServerId sid) {
    const size_t d = scratch.depth;
    // A scratch's history changes only with its depth (Scratch::Apply), and
    // the levels only here: one check per depth of a pass, and that check
    // reads only what the last step appended when the level above was
    // checked against this scratch (a pass checks every depth in turn).
    if (&scratch != checked_ || d != checked_depth_) {
      const std::vector<std::uint64_t>& h = scratch.history;
      const size_t from = &scratch == checked_ && d == checked_depth_ + 1 ? levels_[d - 1].len : 0;
      const bool match = d < levels_.size() && levels_[d].len == h.size() &&
                         std::equal(h.begin() + from, h.end(), history_.begin() + from);
      if (!match) {
        // history_ becomes this scratch's; the levels above keep theirs only
        // while it is a prefix of the new one (the others never match).
        size_t same = from;
        while (same < h.size() && same < history_.size() && h[same] == history_[same]) ++same;
        levels_.resize(std::min(d, levels_.size()));
        for (Level& l : levels_) {
          if (l.len > same) l.len = kStale;
        }
        while (levels_.size() < d) levels_.push_back({kStale, {}});
        history_.resize(same);
        history_.insert(history_.end(), h.begin() + same, h.end());
        levels_.push_back({h.size(), {}});
      }
      checked_ = &scratch;
      checked_depth_ = d;
    }
    return levels_[d].slots[sid];
  }
  static constexpr size_t kStale = static_cast<size_t>(-1);  // a level no history matches
  std::vector<Level> levels_;  // levels_[d]: after d returns
  std::vector<std::uint64_t> history_;  // the history of the deepest level; the others' are prefixes
  const Scratch* checked_ = nullptr;  // levels_[checked_depth_] matches this scratch
  size_t checked_depth_ = 0;
};

// The greedy strategy's choice of `need` busy servers at `notice`.
// `removals` serves the removals of every pass, shared across notices.
std::vector<ServerId> GreedyChoice(const ClusterState& state, const std::vector<ServerId>& busy,
                                   int need, bool elastic, Seconds notice, RemovalCache& removals) {
  std::vector<ServerId> out;
  // Least cost per server returned: (preemptions, lost GPU-time) divided
  // by 1 + the servers the step leaves empty (they are returned next at
  // no further cost), then fewest used GPUs, then lowest id.
  // Costs are at `notice`: a job left to finish costs nothing, a checkpoint
  // on notice replaces lost work where it fits.
  Scratch scratch{state, elastic, notice, {}, {}, 0};
  removals.NewPass();
  const std::vector<ServerId>& left = busy;  // candidates, in scan order
  int remaining = need;
  // Costs are cached and recomputed only for servers a step touched:
  // those sharing a job with a server whose jobs changed.
  struct Entry {
    ReclaimCost cost;
    int freed = 0;
    int used = 0;
    bool valid = false;
  };
  // By server index: a step invalidates a few entries.
  static thread_local std::vector<Entry> cache;
  cache.assign(state.servers().size(), Entry{});
  // The scan reads, per candidate in `left` order, its price per server
  // returned (p, l) and used GPUs from arrays beside `left` (`gone`: chosen
  // already). A step recomputes only the candidates it invalidated (`dirty`),
  // and all of them only while some entry frees as many servers as are
  // still needed (its share then depends on `remaining`).
  static thread_local std::vector<double> ps, ls;
  static thread_local std::vector<int> useds, pos_of, dirty;
  static thread_local std::vector<char> gone;
  const size_t candidates = left.size();
  ps.assign(candidates, 0);
  ls.assign(candidates, 0);
  useds.assign(candidates, 0);
  gone.assign(candidates, 0);
  pos_of.assign(state.servers().size(), -1);
  dirty.clear();
  for (size_t c = 0; c < candidates; ++c) {
    pos_of[state.server_index(left[c])] = static_cast<int>(c);
    dirty.push_back(static_cast<int>(c));
  }
  auto invalidate = [&](ServerId sid) {
    const int i = state.server_index(sid);
    if (!cache[i].valid) return;
    cache[i].valid = false;
    if (pos_of[i] >= 0 && !gone[pos_of[i]]) dirty.push_back(pos_of[i]);
  };
  // The scan visits the candidates in blocks of kBlock, each summarized by
  // the least p, l and used GPUs of its candidates not yet chosen (each least
  // on its own, so a bound, not a candidate). A candidate replaces `best` only
  // if p < p_lo, or p <= p_hi and (l < l_lo, or l <= l_hi and fewer used): a
  // block whose least p exceeds p_hi, or whose least p is at least p_lo and
  // whose least l exceeds l_hi or is at least l_lo with least used at least
  // best_used, holds no such candidate, whatever its order. The scan skips
  // those blocks and so makes the same choice as a scan of every candidate.
  // A block holding a NaN price (no order) is always scanned.
  struct Block {
    double p = 0, l = 0;
    int used = 0;
    int live = 0;            // candidates not yet chosen
    bool unordered = false;  // holds a NaN p or l
  };
  static thread_local std::vector<Block> blocks;
  static thread_local std::vector<char> block_dirty;
  static thread_local std::vector<int> dirty_blocks;
  blocks.assign((candidates + kBlock - 1) / kBlock, Block{});
  block_dirty.assign(blocks.size(), 0);
  dirty_blocks.clear();
  auto mark_block = [&](size_t c) {
    const size_t b = c / kBlock;
    if (!block_dirty[b]) {
      block_dirty[b] = 1;
      dirty_blocks.push_back(static_cast<int>(b));
    }
  };
  auto summarize_block = [&](int b) {
    block_dirty[b] = 0;
    Block m;
    const size_t end = std::min(candidates, (static_cast<size_t>(b) + 1) * kBlock);
    for (size_t c = static_cast<size_t>(b) * kBlock; c < end; ++c) {
      if (gone[c]) continue;
      const double p = ps[c], l = ls[c];
      if (std::isnan(p) || std::isnan(l)) m.unordered = true;
      if (m.live == 0) {
        m.p = p;
        m.l = l;
        m.used = useds[c];
      } else {
        m.p = std::min(m.p, p);
        m.l = std::min(m.l, l);
        m.used = std::min(m.used, useds[c]);
      }
      ++m.live;
    }
    blocks[b] = m;
  };
  int most_freed = 0;  // at least every valid entry's `freed`
  auto price = [&](size_t c) {
    Entry& e = cache[state.server_index(left[c])];
    if (!e.valid) {
      e.cost = removals.Price(scratch, left[c], &e.freed, &e.used);
      e.valid = true;
      most_freed = std::max(most_freed, e.freed);
    }
    const double share = 1.0 + std::min(e.freed, remaining - 1);
    ps[c] = e.cost.preemptions / share;
    ls[c] = e.cost.lost_gpu_seconds / share;
    useds[c] = e.used;
    mark_block(c);
  };
  while (remaining > 0) {
    for (int c : dirty) price(c);
    dirty.clear();
    if (most_freed >= remaining - 1) {
      for (size_t c = 0; c < candidates; ++c) {
        if (!gone[c]) price(c);
      }
    }
    for (int b : dirty_blocks) summarize_block(b);
    dirty_blocks.clear();
    size_t best = candidates;
    double best_p = 0, best_l = 0;
    int best_used = 0;
    // The bounds a candidate must pass to replace `best` (the tolerant
    // comparisons: 1e-12 on preemptions, 1e-9 on lost GPU-seconds).
    double p_lo = 0, p_hi = 0, l_lo = 0, l_hi = 0;
    for (size_t b = 0; b < blocks.size(); ++b) {
      const Block& m = blocks[b];
      if (m.live == 0) continue;
      // A block none of whose candidates can replace `best` leaves the scan's
      // state as it was: skipping it changes nothing (see Block).
      if (block_skip && best != candidates && !m.unordered &&
          (m.p > p_hi || (m.p >= p_lo && (m.l > l_hi || (m.l >= l_lo && m.used >= best_used))))) {
        continue;
      }
      const size_t end = std::min(candidates, (b + 1) * kBlock);
      for (size_t c = b * kBlock; c < end; ++c) {
        if (gone[c]) continue;
        const double p = ps[c], l = ls[c];
        const bool better =
            best == candidates || p < p_lo || (p <= p_hi && (l < l_lo || (l <= l_hi && useds[c] < best_used)));
        if (better) {
          best = c;
          best_p = p;
          best_l = l;
          best_used = useds[c];
          p_lo = best_p - 1e-12;
          p_hi = best_p + 1e-12;
          l_lo = best_l - 1e-9;
          l_hi = best_l + 1e-9;
        }
      }
    }
    if (best == candidates) break;  // fewer candidates than needed
    const ServerId chosen = left[best];
    // Servers holding the jobs about to change, before they change.
    static thread_local std::vector<ServerId> touched;
    touched.clear();
    for (const auto& [jid, n] : state.server(chosen)->jobs) {
      for (const auto& [sid, m] : scratch.Of(*state.job(jid))) touched.push_back(sid);
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    scratch.Apply(chosen, removals.Of(scratch, chosen));
    gone[best] = 1;
    mark_block(best);
    for (ServerId t : touched) {
      invalidate(t);
      for (const auto& [jid, n] : state.server(t)->jobs) {
        for (const auto& [sid, m] : scratch.Of(*state.job(jid))) invalidate(sid);
      }
    }
    out.push_back(chosen);
    --remaining;
  }
  return out;
}

}  // namespace

void SetGreedyBlockSkip(bool on) { block_skip = on; }

std::vector<ServerId> GreedyReclaim(const ClusterState& state, const std::vector<ServerId>& busy, int need,
                                    bool elastic, Seconds notice, const std::vector<ServerId>& chosen) {
  // The greedy choice depends on the notice only through the steps at
  // which a job's cost changes. Every choice made at a step at or
  // below the notice (and at no notice) is a candidate, priced at the
  // notice; the cheapest wins (ties: the shortest notice's). A longer
  // notice keeps every candidate of a shorter one, each no dearer, so
  // it never costs more.
  std::vector<Seconds> steps = CostSteps(state, busy, notice);
  if (steps.size() > kMaxNoticeSteps) steps.resize(kMaxNoticeSteps);
  steps.insert(steps.begin(), 0.0);
  std::vector<ServerId> best_set;
  ReclaimCost best_cost;
  std::vector<ServerId> prev;
  RemovalCache removals;
  for (Seconds x : steps) {
    std::vector<ServerId> cand = GreedyChoice(state, busy, need, elastic, x, removals);
    if (!best_set.empty() && cand == prev) continue;
    prev = cand;
    std::vector<ServerId> all = chosen;
    all.insert(all.end(), cand.begin(), cand.end());
    const ReclaimCost cost = CostOfReturning(state, all, nullptr, nullptr, elastic, notice);
    if (best_set.empty() || cost < best_cost) {
      best_cost = cost;
      best_set = std::move(cand);
    }
  }
  return best_set;
}

}  // namespace aryl::sched::internal
