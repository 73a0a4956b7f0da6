// EtcdStateStore's read of the whole state (etcd_state_store.h): the load at
// open, paged so that etcd visits each key a few times, and a snapshot's body
// from its chunks.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "state/etcd/etcd_state_store.h"
#include "state/sqlite/sqlite_state_store.h"

namespace aryl::daemon {

using json = nlohmann::json;

namespace {

// The end of the window that follows `key` when its last segment is a
// 20-digit number n (job ids, event and core row sequence numbers, snapshot
// chunks): the same key with n + width + 1, so that the window holds n + 1 ..
// n + width and no more keys of that layout; empty when `key` is not one.
std::string WindowAfter(const std::string& key, std::int64_t width) {
  const auto slash = key.rfind('/');
  if (slash == std::string::npos || key.size() - slash - 1 != 20) return {};
  std::uint64_t n = 0;
  for (std::size_t i = slash + 1; i < key.size(); ++i) {
    if (key[i] < '0' || key[i] > '9') return {};
    n = n * 10 + static_cast<std::uint64_t>(key[i] - '0');
  }
  if (n > 9'999'999'999'999'999'999ull - static_cast<std::uint64_t>(width) - 1) return {};
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%020llu", static_cast<unsigned long long>(n + width + 1));
  return key.substr(0, slash + 1) + buf;
}

}  // namespace

// Every P/s/ key at one revision, in two regions: the rows and the snapshot's
// chunks (512 KB each), each read in pages of a limit (load_page_keys,
// load_page_chunks). etcd answers a range with a limit only after visiting
// every key from its start to its range_end (it counts them:
// etcd-io/etcd#11057), so pages over [last key, end of the prefix) would cost
// it N^2 / (2 x page) key visits, most of a restart at 100,000 jobs. So a
// page that follows a key numbered n (WindowAfter) ends at n + page: it
// visits only its own keys. A window that comes back empty (a table's end, a
// gap in the numbers) is followed by one page up to the region's end, which
// finds the next key.
Status EtcdStateStore::ReadRegion(const std::string& lo, const std::string& hi, std::int64_t limit,
                                  std::int64_t* revision, std::string* head) {
  std::string from = lo, until = hi;
  for (;;) {
    etcd::RangeOptions ro;
    ro.limit = limit;
    ro.revision = *revision;
    ARYL_ASSIGN_OR_RETURN(auto page, client_->Range(from, until, ro));
    if (*revision == 0) *revision = page.revision;  // every page at the first one's revision
    revision_ = *revision;
    load_counted_keys_ += static_cast<std::size_t>(page.count);
    for (const auto& kv : page.kvs) {
      Status st = Apply(kv, head);
      if (!st.ok()) return st.WithContext(opt_.location + ": key '" + kv.key + "'");
      ++loaded_keys_;
    }
    if (!page.more && until == hi) return Status::Ok();
    if (page.kvs.empty()) {  // an empty window: the next key, wherever it is
      from = until;
      until = hi;
      continue;
    }
    from = page.kvs.back().key + '\0';
    until = WindowAfter(page.kvs.back().key, limit);
    if (until.empty() || until > hi) until = hi;
  }
}

Status EtcdStateStore::Load() {
  const std::string begin = opt_.prefix + "s/";
  const std::string snap = Key("snap", "");
  chunks_.clear();
  std::string head;
  std::int64_t revision = 0;
  return index_->Batch([&]() -> Status {
    ARYL_RETURN_IF_ERROR(ReadRegion(begin, snap, std::max<std::int64_t>(opt_.load_page_keys, 1), &revision, &head));
    ARYL_RETURN_IF_ERROR(ReadRegion(snap, etcd::PrefixEnd(begin), std::max<std::int64_t>(opt_.load_page_chunks, 1),
                                    &revision, &head));
    if (head.empty()) return Status::Ok();
    ARYL_ASSIGN_OR_RETURN(std::string body, SnapshotBody(head));
    return index_->SaveCoreSnapshot(body, 0);
  });
}

Result<std::string> EtcdStateStore::SnapshotBody(const std::string& head) {
  try {
    json h = json::parse(head);
    const std::int64_t id = h.at("id").get<std::int64_t>();
    int n = h.at("chunks").get<int>();
    std::string body;
    for (int k = 0; k < n; ++k) {
      auto it = chunks_.find(Key("snap", Pad(id) + "/" + Pad(k)));
      if (it == chunks_.end())
        return Status::Corruption(opt_.location + ": core snapshot " + std::to_string(id) + " lacks chunk " +
                                  std::to_string(k) + " of " + std::to_string(n));
      body += it->second;
    }
    snapshot_id_ = id;
    return body;
  } catch (const std::exception& e) {
    return Status::Corruption(opt_.location + ": snapshot head '" + head.substr(0, 200) + "': " + e.what());
  }
}

}  // namespace aryl::daemon
