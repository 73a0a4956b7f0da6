// StateStore: the scheduler daemon's durable state, behind one interface with
// two backends: one SQLite file (WAL mode) on the head node, or an etcd
// cluster shared by a leader and its standbys (docs/operations.md, "High
// availability").
//
// What survives a crash of aryl-scheduler (SIGKILL included):
//   jobs        every job ever submitted: its spec (JSON, opaque here), its state,
//               its current generation, exit code and message. A client token
//               (unique) makes submission idempotent: a client that retries after
//               a crash gets the same job back instead of a duplicate.
//   placements  the workers each running job holds on each node.
//   nodes       every node that ever registered: pool, GPU type, GPU count and its
//               loan state (available | held | loaned).
//   events      an append-only journal (never updated or deleted) of everything
//               the daemon decided: submissions, starts, resizes, preemptions,
//               loans, reclaims, exits.
//               Each row may name the nodes it is about (event_nodes) and carry
//               its facts as JSON (data), which `aryl describe` and `aryl events`
//               read; `detail` says the same for people.
//   core_events the inputs of the scheduling core, in order, for replay.
//
// Every mutating call is one transaction: it is either wholly on disk or not at
// all. Batch() groups several calls into one transaction (one fsync) for a round.
// Schema versioning: the file records its schema version; opening a file written
// by a newer Aryl is refused, an older one is migrated in place.
//
// Thread safety: not thread-safe; the daemon uses it from its one loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl::daemon {

enum class JobState : std::uint8_t { kQueued, kRunning, kFinished, kFailed, kCancelled };
std::string_view JobStateName(JobState s);
Result<JobState> ParseJobState(std::string_view s);
inline bool IsTerminal(JobState s) {
  return s == JobState::kFinished || s == JobState::kFailed || s == JobState::kCancelled;
}

struct JobRecord {
  std::uint64_t id = 0;
  std::string name;
  std::string client_token;  // empty: none
  std::string spec_json;     // the submission, as the daemon encoded it
  JobState state = JobState::kQueued;
  double submit_time = 0;    // unix seconds
  double start_time = 0;     // unix seconds of the last start; 0 when never started
  double end_time = 0;       // unix seconds; 0 while not terminal
  std::uint64_t generation = 0;
  int exit_code = 0;
  std::string message;
  std::map<std::string, int> placement;  // node name -> workers
  std::string workers_json = "{}";        // the daemon's per-worker bookkeeping (opaque here)
};

struct NodeRecord {
  std::string name;
  std::string pool;        // "training" | "inference"
  std::string gpu_type;
  int gpus = 0;
  std::string loan_state;  // "available" | "held" | "loaned"
  std::uint32_t server_id = 0;
};

struct EventRecord {
  std::int64_t seq = 0;
  double time = 0;         // unix seconds
  std::uint64_t job = 0;   // 0: not about one job
  std::string kind;        // "submit", "start", "resize", "preempt", "exit", "loan", ...
  std::string detail;      // human-readable or JSON
  std::vector<std::string> nodes;  // the nodes it is about (schema 2); empty: none
  std::string data = "{}";        // its facts as a JSON object (schema 2); "{}" for older rows
};

// Which journal rows Events returns: every filter given must match.
struct EventFilter {
  std::uint64_t job = 0;     // 0: any
  std::string node;          // empty: any
  std::string kind;          // empty: any
  double since = 0;          // rows with time >= since
  std::int64_t after = 0;    // rows with seq > after (oldest first) or < before (newest first)
  std::int64_t before = 0;   // 0: no upper bound
  int limit = 1000;
  bool newest_first = false;
};

// The interface every backend implements (one folder per backend under
// src/state/): SQLite on one head node (state/sqlite, the default) and etcd
// for a replicated, leader-fenced control plane (state/etcd).
class StateStore {
 public:
  static constexpr int kSchemaVersion = 3;  // 2: events name their nodes and carry data; 3: snapshot pieces
  // The pieces SaveCoreSnapshot cuts a snapshot into (and the daemon's).
  static constexpr std::size_t kCoreSnapshotPieceBytes = 256 * 1024;

  // Opens (creating when missing) the SQLite store at `path`; ":memory:" for
  // tests. Fails with Corruption when the file is not an Aryl store,
  // FailedPrecondition when it was written by a newer schema or another
  // process holds it: one scheduler per state file, enforced by an exclusive
  // flock on "<path>.lock" that the kernel releases when its holder dies
  // (SIGKILL included). The etcd backend is opened by the leader election
  // (state/etcd/etcd_state_store.h), which owns the fencing term.
  static Result<std::unique_ptr<StateStore>> Open(const std::string& path);
  virtual ~StateStore() = default;

  virtual int schema_version() const = 0;
  // Where the state lives, for logs and status: a path or etcd://.../prefix.
  virtual std::string location() const = 0;

  // Runs `body` in one transaction; rolls back when it returns an error.
  virtual Status Batch(const std::function<Status()>& body) = 0;

  // --- jobs ---
  // Inserts a new job and returns its id (or uses `job.id` when not 0). When
  // `job.client_token` is not empty and a job with that token exists, returns
  // AlreadyExists whose message is the id.
  virtual Result<std::uint64_t> InsertJob(const JobRecord& job) = 0;
  virtual Result<std::optional<std::uint64_t>> FindJobByToken(const std::string& token) = 0;
  // Overwrites state, times, generation, exit code, message and placement.
  virtual Status UpdateJob(const JobRecord& job) = 0;
  virtual Result<JobRecord> GetJob(std::uint64_t id) = 0;
  // Jobs with id > `after`, oldest first, at most `limit` (< 0: all);
  // `only_live` keeps queued and running ones.
  virtual Result<std::vector<JobRecord>> ListJobs(bool only_live = false, std::uint64_t after = 0,
                                                  int limit = -1) = 0;
  virtual Result<std::uint64_t> MaxJobId() = 0;

  // --- nodes ---
  virtual Status UpsertNode(const NodeRecord& node) = 0;
  virtual Result<std::vector<NodeRecord>> ListNodes() = 0;

  // --- journal ---
  Status AppendEvent(double time, std::uint64_t job, const std::string& kind, const std::string& detail);
  // Appends `e` with its nodes and data; e.seq 0 takes the next seq (a
  // replica restoring rows passes theirs).
  virtual Status AppendEvent(const EventRecord& e) = 0;
  // Events with seq > after, oldest first; job 0 means every job.
  Result<std::vector<EventRecord>> Events(std::uint64_t job = 0, std::int64_t after = 0, int limit = 1000);
  virtual Result<std::vector<EventRecord>> Events(const EventFilter& filter) = 0;

  // --- core journal (replayed into the scheduling core on restart) ---
  virtual Status AppendCoreEvent(double time, const std::string& body) = 0;
  virtual Result<std::vector<std::pair<double, std::string>>> CoreEvents() = 0;
  // The core snapshot: the core those rows built, which replaces them. The
  // journal is the snapshot in force, then the rows after it. A snapshot of
  // tens of megabytes is written in pieces, each its own short transaction,
  // so that its writer (the daemon's serving thread) can answer requests
  // between them:
  //  1. BeginCoreSnapshot(upto) starts snapshot `id`, to replace the rows up
  //     to seq `upto` (nullopt: every row); rows appended later follow it. It
  //     drops every piece not of the snapshot in force: those of one still
  //     being written (a newer snapshot cancels an older one; its later
  //     Append/Commit fail with Cancelled) and those a crash left.
  //  2. AppendCoreSnapshot(id, piece), any number of times, each its own
  //     transaction: the pieces are kept aside, read by nobody, while
  //     journal rows go on being appended between them.
  //  3. CommitCoreSnapshot(id), one short transaction: snapshot `id` becomes
  //     the one in force; from then on CoreEvents returns only the rows after
  //     `upto`. Inside a Batch it commits with the rest of the batch.
  //     AbortCoreSnapshot(id) instead drops its pieces.
  //  4. CompactCoreJournal(max_pieces, max_rows), any number of times, each
  //     its own transaction: deletes up to that many of the pieces and of the
  //     rows that the snapshot in force made obsolete; true once none is
  //     left. (A backend that deletes them at the commit has none left.)
  // A crash (or a store opened again) at any step leaves the previous
  // snapshot and every row after it: the pieces of a snapshot not committed
  // are ignored, and dropped when the store is opened by its writer.
  // CoreSnapshot is the snapshot in force, its pieces joined; nullopt until
  // the first one.
  virtual Result<std::int64_t> BeginCoreSnapshot(std::optional<std::int64_t> upto) = 0;
  virtual Status AppendCoreSnapshot(std::int64_t id, std::string_view piece) = 0;
  virtual Status CommitCoreSnapshot(std::int64_t id) = 0;
  virtual Status AbortCoreSnapshot(std::int64_t id) = 0;
  virtual Result<bool> CompactCoreJournal(int max_pieces, int max_rows) = 0;
  // Steps 1 to 4 at once, in one transaction (a snapshot that must be in
  // force before the caller goes on: the daemon's rebuild for a new GPU type).
  Status SaveCoreSnapshot(const std::string& body, std::optional<std::int64_t> upto = std::nullopt);
  // The seq of the newest core_events row (0: none).
  virtual Result<std::int64_t> LastCoreEventSeq() = 0;
  virtual Result<std::optional<std::string>> CoreSnapshot() = 0;

  // --- key/value (counters that must survive a restart) ---
  virtual Status SetMeta(const std::string& key, const std::string& value) = 0;
  virtual Result<std::optional<std::string>> GetMeta(const std::string& key) = 0;

 protected:
  StateStore() = default;
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;
};

}  // namespace aryl::daemon
