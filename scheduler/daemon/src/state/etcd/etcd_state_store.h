// EtcdStateStore: the StateStore on an etcd cluster, written only by the
// leader and fenced by its term (docs/architecture.md, "High availability").
//
// Layout under the prefix P (keys sorted as etcd sorts them, bytewise):
//   P/leader                 the leader's record, bound to its lease (leader_election.h)
//   P/writer                 "<term>/<n>": the leader's n-th transaction, the last to land
//   P/s/core/<seq>           {"time","body"}: a core journal row (20-digit seq)
//   P/s/event/<seq>          {"seq","time","job","kind","detail","nodes","data"}
//   P/s/job/<id>             the whole JobRecord with its placement, as JSON
//   P/s/meta/<key>           the value as it is
//   P/s/node/<name>          the NodeRecord as JSON
//   P/s/snap/head            {"id","chunks","bytes"}: the core snapshot in force
//   P/s/snap/<id>/<k>        its k-th chunk (at most kSnapshotChunkBytes)
//
// How it works:
//  1. Open (by a scheduler that just won the election) reads every P/s/ key
//     at one revision into a local in-memory SQLite store, the index, which
//     answers every query (the same SQL as the SQLite backend): in pages
//     that end where their keys' numbers do, so that etcd visits each key
//     about once, not once per page (Load).
//  2. A mutating call applies itself to the index inside an index
//     transaction and queues the etcd operations it implies; at the end of
//     the outermost Batch (or of the call itself) they go to etcd as
//     transactions whose one comparison is "P/leader's create_revision is my
//     term". Only then does the index transaction commit; any failure rolls
//     it back, so the index never holds what etcd does not.
//     A leader's transaction also compares P/writer's mod_revision with the
//     one its last transaction left, and puts P/writer = "<term>/<n>". So
//     transactions land in the order they were sent or not at all: one whose
//     answer was lost (a timeout) and that etcd applies later, after the
//     store went on, fails its comparison instead of overwriting newer
//     writes. A failed comparison reads P/leader and P/writer back (the
//     failure branch): P/writer holding this very transaction's value means
//     it had landed (a retry of a lost answer) and it counts as written.
//  3. A comparison of P/leader that fails means another scheduler leads: on_deposed is
//     called and the write fails with FailedPrecondition. One of P/writer
//     alone means etcd holds a transaction the index does not (one that gave
//     up as Unavailable and landed later): Unavailable, and the next Batch
//     reads the prefix again (not while frozen; a read that fails keeps the
//     index and is tried again). etcd unreachable or
//     without quorum: retried for retry_seconds while etcd refuses at once
//     (an etcd leader election), then Unavailable and on_unavailable (the
//     leader freezes); the caller retries once it is back. No try is made
//     while may_write() is false (frozen): one outage stalls the caller's
//     thread, which answers agents' heartbeats, for one write, not for each.
//  4. The ops of a batch are coalesced first (txn_writes.h): etcd refuses a
//     transaction that puts a key twice or puts a key it also deletes.
//     A batch goes as one etcd transaction when it fits (max_txn_ops, etcd's
//     --max-txn-ops, default 128; max_txn_bytes under --max-request-bytes),
//     else as several in order.
//  5. The core snapshot (StateStore's steps 1-3): BeginCoreSnapshot deletes
//     every chunk but the head's (one transaction: a snapshot in flight is
//     cancelled, a crashed leader's chunks go); each AppendCoreSnapshot puts
//     its piece's chunks (one transaction each, so the serving thread is
//     held one piece at a time); CommitCoreSnapshot, one transaction, deletes
//     the rows it replaces and the older snapshots' chunks and puts the head
//     last. A reader (a restart, a standby) sees the old snapshot or the new
//     one, never half: chunks that no head names are ignored, and a leader's
//     Open deletes them.
//  6. A standby keeps a store opened with term 0 current (state_follower.h):
//     ApplyWatched applies each watched batch of P/s/ changes to the index
//     (puts of every table; deletes of core rows and snapshot chunks, the only
//     keys a leader deletes; a snapshot head installs the snapshot and drops
//     the core rows deleted with it). Lead then makes it a leader's store.
//
// Thread safety: not thread-safe, like every StateStore.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aryl/daemon/state_store.h"
#include "state/etcd/etcd_client.h"

namespace aryl::daemon {

class SqliteStateStore;

class EtcdStateStore final : public StateStore {
 public:
  static constexpr std::size_t kSnapshotChunkBytes = 512 * 1024;
  struct Options {
    std::string location;        // the etcd:// URL, for logs and status
    std::string prefix;          // "/aryl/": ends with '/'
    std::int64_t term = 0;       // the leader key's create revision (0: unfenced, tests only)
    std::function<void(const std::string&)> on_deposed;
    std::size_t max_txn_ops = 128;
    std::size_t max_txn_bytes = 1 << 20;
    // How long a write retries while etcd answers Unavailable (an etcd
    // leader election takes about its election timeout, 1 s by default).
    double retry_seconds = 1.5;
    // Asked before every try: false (the leader cannot decide now) fails the
    // write at once with Unavailable, with nothing sent.
    std::function<bool()> may_write;
    // Called when a write gives up with Unavailable (etcd unreachable or
    // without quorum), with why: the leader freezes until etcd answers again.
    std::function<void(const std::string&)> on_unavailable;
    // Reading the state (Open, a reload): keys per request, and snapshot
    // chunks (512 KB each) per request (Load).
    std::int64_t load_page_keys = 1000;
    std::int64_t load_page_chunks = 16;
  };
  static Result<std::unique_ptr<EtcdStateStore>> Open(std::shared_ptr<etcd::Client> client, Options options);
  ~EtcdStateStore() override;

  int schema_version() const override { return kSchemaVersion; }
  std::string location() const override { return opt_.location; }
  Status Batch(const std::function<Status()>& body) override;

  Result<std::uint64_t> InsertJob(const JobRecord& job) override;
  Result<std::optional<std::uint64_t>> FindJobByToken(const std::string& token) override;
  Status UpdateJob(const JobRecord& job) override;
  Result<JobRecord> GetJob(std::uint64_t id) override;
  Result<std::vector<JobRecord>> ListJobs(bool only_live = false, std::uint64_t after = 0, int limit = -1) override;
  Result<std::uint64_t> MaxJobId() override;
  Status UpsertNode(const NodeRecord& node) override;
  Result<std::vector<NodeRecord>> ListNodes() override;
  using StateStore::AppendEvent;
  using StateStore::Events;
  Status AppendEvent(const EventRecord& e) override;
  Result<std::vector<EventRecord>> Events(const EventFilter& filter) override;
  Status AppendCoreEvent(double time, const std::string& body) override;
  Result<std::vector<std::pair<double, std::string>>> CoreEvents() override;
  Result<std::int64_t> BeginCoreSnapshot(std::optional<std::int64_t> upto) override;
  Status AppendCoreSnapshot(std::int64_t id, std::string_view piece) override;
  Status CommitCoreSnapshot(std::int64_t id) override;
  Status AbortCoreSnapshot(std::int64_t id) override;
  Result<bool> CompactCoreJournal(int max_pieces, int max_rows) override;
  Result<std::int64_t> LastCoreEventSeq() override;
  Result<std::optional<std::string>> CoreSnapshot() override;
  Status SetMeta(const std::string& key, const std::string& value) override;
  Result<std::optional<std::string>> GetMeta(const std::string& key) override;

  // A follower's: applies one watched batch of changes under the prefix (in
  // revision order; a batch holds whole transactions). An error leaves the
  // index as it was before the batch; the follower then stops following.
  Status ApplyWatched(const std::vector<etcd::WatchEvent>& batch);
  // The etcd revision the index reflects: Load's, then the last applied event's.
  std::int64_t revision() const { return revision_; }
  // Makes a follower's store a leader's: the options' term fences every write.
  Status Lead(Options options);

  // Keys read at Open and etcd transactions written since (for tests, metrics).
  std::size_t loaded_keys() const { return loaded_keys_; }
  // The keys etcd visited to answer the reads of Open (and of reloads): the
  // sum of their ranges' counts.
  std::size_t load_counted_keys() const { return load_counted_keys_; }
  std::size_t watched_events() const { return watched_events_; }
  std::uint64_t transactions() const { return transactions_; }

 private:
  EtcdStateStore() = default;
  Status Load();
  // Reads [lo, hi) in pages of `limit` keys at *revision (0: the first
  // page's), into the index; the snapshot's head into *head.
  Status ReadRegion(const std::string& lo, const std::string& hi, std::int64_t limit, std::int64_t* revision,
                    std::string* head);
  Status Apply(const etcd::KeyValue& kv, std::string* head);
  // The core snapshot a head names, from chunks_.
  Result<std::string> SnapshotBody(const std::string& head);
  // Runs `apply` (index writes that queue etcd ops) as one step: flushed at
  // once unless inside a Batch.
  Status Write(const std::function<Status()>& apply);
  Status Flush();
  Result<etcd::TxnResult> Send(const etcd::TxnRequest& txn);
  // P/writer's mod_revision now (0: absent), into writer_revision_.
  Status ReadWriter();
  Status PutJob(std::uint64_t id);
  // Queues the deletion of every snapshot chunk but those of the one in force
  // (etcd_core_snapshot.cc); whether chunks_ holds such chunks.
  void DropStrayChunks();
  bool HasStrayChunks() const;
  static std::string Pad(std::uint64_t n);  // 20 digits: keys sort as numbers
  std::string Key(std::string_view table, std::string_view name) const;

  std::shared_ptr<etcd::Client> client_;
  Options opt_;
  std::unique_ptr<SqliteStateStore> index_;
  std::vector<etcd::Op> pending_;
  int depth_ = 0;
  bool reload_ = false;  // etcd may hold more (or less) than the index: Load again
  std::int64_t writer_revision_ = 0;  // P/writer's mod_revision after this store's last transaction
  std::uint64_t writes_ = 0;          // this store's transactions sent (P/writer's n)
  std::int64_t snapshot_id_ = 0;  // the snapshot in force (its head's id)
  // The snapshot being written (BeginCoreSnapshot): its id (0: none), the
  // index's id for it, the rows it replaces, chunks and bytes so far.
  std::int64_t writing_id_ = 0;
  std::int64_t writing_index_id_ = 0;
  std::optional<std::int64_t> writing_upto_;
  int writing_chunks_ = 0;
  std::size_t writing_bytes_ = 0;
  std::int64_t revision_ = 0;
  // Snapshot chunk key -> value: while loading, and kept by a follower, whose
  // snapshot's chunks may arrive in batches before its head.
  std::map<std::string, std::string> chunks_;
  std::size_t loaded_keys_ = 0;
  std::size_t load_counted_keys_ = 0;
  std::size_t watched_events_ = 0;
  std::uint64_t transactions_ = 0;
};

}  // namespace aryl::daemon
