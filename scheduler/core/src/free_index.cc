// FreeIndex: free GPUs per server, bucketed by (type, pool) and free count.
#include <algorithm>
#include <bit>

#include "round.h"

namespace aryl::sched::internal {

void FreeIndex::Reset(const ClusterState& state, const std::vector<int>& avail,
                      const std::vector<bool>& enabled) {
  state_ = &state;
  avail_ = avail;
  group_of_.assign(avail.size(), -1);
  max_gpus_ = 0;
  for (const auto& s : state.servers()) max_gpus_ = std::max(max_gpus_, s.spec.gpus);
  const int groups = state.num_types() * 2;
  words_ = static_cast<int>((avail.size() + 63) / 64);
  bits_.assign(static_cast<size_t>(groups) * (max_gpus_ + 1) * words_, 0);
  counts_.assign(static_cast<size_t>(groups) * (max_gpus_ + 1), 0);
  first_word_.assign(counts_.size(), words_);
  totals_.assign(groups, 0);
  for (size_t i = 0; i < avail.size(); ++i) {
    if (!enabled[i]) {
      avail_[i] = 0;
      continue;
    }
    const ServerInfo& s = state.servers()[i];
    group_of_[i] = Group(s.type, s.loaned());
    avail_[i] = std::clamp(avail_[i], 0, s.spec.gpus);
    Insert(Bucket(group_of_[i], avail_[i]), static_cast<int>(i));
    totals_[group_of_[i]] += avail_[i];
  }
}

int FreeIndex::First(int b) const {
  if (counts_[b] == 0) return -1;
  const std::uint64_t* w = &bits_[static_cast<size_t>(b) * words_];
  for (int k = first_word_[b]; k < words_; ++k) {
    if (w[k]) {
      first_word_[b] = k;
      return k * 64 + std::countr_zero(w[k]);
    }
  }
  return -1;
}

void FreeIndex::Insert(int b, int server) {
  std::uint64_t& w = bits_[static_cast<size_t>(b) * words_ + server / 64];
  const std::uint64_t bit = std::uint64_t{1} << (server % 64);
  if (!(w & bit)) {
    w |= bit;
    ++counts_[b];
    first_word_[b] = std::min(first_word_[b], server / 64);
  }
}

void FreeIndex::Erase(int b, int server) {
  std::uint64_t& w = bits_[static_cast<size_t>(b) * words_ + server / 64];
  const std::uint64_t bit = std::uint64_t{1} << (server % 64);
  if (w & bit) {
    w &= ~bit;
    --counts_[b];
  }
}

void FreeIndex::Set(int server, int value) {
  const int g = group_of_[server];
  if (g < 0) return;
  Erase(Bucket(g, avail_[server]), server);
  totals_[g] += value - avail_[server];
  avail_[server] = value;
  Insert(Bucket(g, value), server);
}

int FreeIndex::Total(int type, bool training, bool loaned) const {
  return (training ? totals_[Group(type, false)] : 0) + (loaned ? totals_[Group(type, true)] : 0);
}

int FreeIndex::Pick(int type, bool training, bool loaned, int n, bool prefer_loaned) const {
  int order[2];
  int count = 0;
  if (prefer_loaned) {
    if (loaned) order[count++] = Group(type, true);
    if (training) order[count++] = Group(type, false);
  } else {
    if (training) order[count++] = Group(type, false);
    if (loaned) order[count++] = Group(type, true);
  }
  for (int k = 0; k < count; ++k) {
    for (int a = std::max(n, 1); a <= max_gpus_; ++a) {
      const int s = First(Bucket(order[k], a));
      if (s >= 0) return s;
    }
  }
  for (int k = 0; k < count; ++k) {
    for (int a = std::min(n, max_gpus_); a >= 1; --a) {
      const int s = First(Bucket(order[k], a));
      if (s >= 0) return s;
    }
  }
  return -1;
}

Placement FreeIndex::Find(int type, bool training, bool loaned, int n, bool prefer_loaned) {
  if (n <= 0 || Total(type, training, loaned) < n) return {};
  // Largest servers first until the rest fits one server (best fit): as few
  // servers as possible. Takes tentatively, then gives everything back.
  std::vector<std::pair<int, int>> taken;  // server, amount
  Placement placement;
  int need = n;
  while (need > 0) {
    int s = Pick(type, training, loaned, need, prefer_loaned);
    if (s < 0) break;
    const int take = std::min(need, avail_[s]);
    taken.emplace_back(s, take);
    placement[state_->servers()[s].spec.id] += take;
    Take(s, take);
    need -= take;
  }
  for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
    Set(it->first, avail_[it->first] + it->second);
  }
  if (need > 0) return {};
  return placement;
}

}  // namespace aryl::sched::internal
