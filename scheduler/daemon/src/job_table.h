// JobTable: the live jobs (queued or running) the daemon holds, each owner's
// live job ids, and each job's checkpoint bookkeeping; the one place where a
// job's worker is added or removed, so that a job's workers and the nodes'
// worker index (NodeRegistry::workers_on) always agree:
//   for every live job j and worker w of j: (j, w) is in workers_on[w.agent],
//   and workers_on holds nothing else.
// A job's other fields are the daemon's to change (live_job.h). No store, no
// network, no clock: times come in as arguments.
//
// Checkpoints (protocol/inspect.h, docs/operations.md): the newest report of
// each job, when it was last journaled, and its failures (failure_tally.h).
// They outlive the job (describe job of an ended job reads them) until the
// maps grow past twice the live jobs and 1,000; then the ended jobs' go.
//
// Thread safety: none; the daemon's serving thread owns it.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include "failure_tally.h"
#include "live_job.h"
#include "node_registry.h"

namespace aryl::daemon {

class JobTable {
 public:
  using Job = LiveJob;
  using Worker = LiveWorker;

  // Keeps `registry`'s worker index; `registry` outlives the table.
  explicit JobTable(NodeRegistry& registry) : registry_(registry) {}
  JobTable(const JobTable&) = delete;
  JobTable& operator=(const JobTable&) = delete;

  // The live jobs by id. Their fields are the daemon's to change, but for
  // `workers` (AddWorker, EraseWorker, ClearWorkers); jobs come and go
  // through Add, Erase and Replace.
  std::map<s::JobId, Job>& jobs() { return jobs_; }
  const std::map<s::JobId, Job>& jobs() const { return jobs_; }
  Job* Find(s::JobId id);
  // A submitted job (its workers none yet), under its owner.
  Job& Add(Job j);
  // A job that ended: its workers and its owner's entry go with it.
  void Erase(s::JobId id);
  // The job no longer counts for its owner (EndJob; it stays in the table).
  void ForgetOwner(const Job& j);
  // Every live job as the store holds them (LoadState): the owners' ids and
  // the nodes' worker index are rebuilt from them.
  void Replace(std::map<s::JobId, Job> jobs);

  // The owner's live job ids ("local" for jobs without an owner); empty when none.
  const std::set<s::JobId>& OwnedBy(const std::string& owner) const;
  static std::string OwnerOf(const Job& j) { return j.spec.owner.value_or("local"); }

  // --- workers: the one place a job's workers change.
  void AddWorker(Job& j, const Worker& w);
  void EraseWorker(Job& j, p::WorkerId id);
  void ClearWorkers(Job& j);
  void IndexWorkers();  // rebuilds the nodes' worker index from the jobs

  // --- checkpoints
  const p::CheckpointRow* LastCheckpoint(s::JobId job) const;
  // A checkpoint written (`row`, at row.time): whether it is due a journal
  // row, one per `every` seconds; the caller writes it when it is. A report
  // older (generation, then step) than the one kept is ignored.
  bool CheckpointSaved(s::JobId job, const p::CheckpointRow& row, double every);
  // A failed one: the row to journal now (FailureTally::Fail), if one is due.
  std::optional<FailureTally::Row> CheckpointFailed(s::JobId job, double now, std::int64_t step,
                                                    const std::string& error, double every);
  // Checkpoints of `job` work again: the failures no row stood for yet.
  std::optional<FailureTally::Row> CheckpointRecovered(s::JobId job);
  // The job's failed checkpoints in all (0: none).
  std::int64_t CheckpointFailures(s::JobId job) const;

 private:
  // Drops the ended jobs' entries of `m` once it holds more than twice the
  // live jobs and 1,000.
  template <typename M>
  void Prune(M& m) const {
    if (m.size() > 2 * jobs_.size() + 1000)
      std::erase_if(m, [&](const auto& kv) { return !jobs_.count(kv.first); });
  }

  NodeRegistry& registry_;
  std::map<s::JobId, Job> jobs_;
  std::map<std::string, std::set<s::JobId>> live_by_owner_;
  std::map<p::JobId, p::CheckpointRow> last_checkpoint_;  // newest report per job
  std::map<p::JobId, double> checkpoint_journaled_;       // wall time of its last journal row
  std::map<p::JobId, FailureTally> checkpoint_failures_;  // failures and which became rows
};

}  // namespace aryl::daemon
