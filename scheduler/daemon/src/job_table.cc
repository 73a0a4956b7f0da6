#include "job_table.h"

#include <utility>

namespace aryl::daemon {

LiveJob* JobTable::Find(s::JobId id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

LiveJob& JobTable::Add(Job j) {
  const s::JobId id = j.rec.id;
  live_by_owner_[OwnerOf(j)].insert(id);
  Job& in = jobs_[id] = std::move(j);
  for (const auto& [wid, w] : in.workers) registry_.Index(w.agent, id, wid);
  return in;
}

void JobTable::Erase(s::JobId id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  ClearWorkers(it->second);
  ForgetOwner(it->second);
  jobs_.erase(it);
}

void JobTable::ForgetOwner(const Job& j) {
  if (auto it = live_by_owner_.find(OwnerOf(j)); it != live_by_owner_.end()) {
    it->second.erase(j.rec.id);
    if (it->second.empty()) live_by_owner_.erase(it);
  }
}

void JobTable::Replace(std::map<s::JobId, Job> jobs) {
  jobs_ = std::move(jobs);
  live_by_owner_.clear();
  for (const auto& [id, j] : jobs_) live_by_owner_[OwnerOf(j)].insert(id);
  IndexWorkers();
}

const std::set<s::JobId>& JobTable::OwnedBy(const std::string& owner) const {
  static const std::set<s::JobId> kNone;
  auto it = live_by_owner_.find(owner);
  return it == live_by_owner_.end() ? kNone : it->second;
}

void JobTable::AddWorker(Job& j, const Worker& w) {
  // A worker id given again (a restore over a live one) moves its index entry.
  if (auto old = j.workers.find(w.id); old != j.workers.end())
    registry_.Unindex(old->second.agent, j.rec.id, w.id);
  j.workers[w.id] = w;
  registry_.Index(w.agent, j.rec.id, w.id);
}

void JobTable::EraseWorker(Job& j, p::WorkerId id) {
  auto it = j.workers.find(id);
  if (it == j.workers.end()) return;
  registry_.Unindex(it->second.agent, j.rec.id, id);
  j.workers.erase(it);
}

void JobTable::ClearWorkers(Job& j) {
  while (!j.workers.empty()) EraseWorker(j, j.workers.begin()->first);
}

void JobTable::IndexWorkers() {
  registry_.ClearIndex();
  for (const auto& [jid, j] : jobs_)
    for (const auto& [wid, w] : j.workers) registry_.Index(w.agent, jid, wid);
}

const p::CheckpointRow* JobTable::LastCheckpoint(s::JobId job) const {
  auto it = last_checkpoint_.find(job);
  return it == last_checkpoint_.end() ? nullptr : &it->second;
}

bool JobTable::CheckpointSaved(s::JobId job, const p::CheckpointRow& row, double every) {
  // A report a newer one overtook on the wire (a late resend) changes
  // nothing: describe job never goes back to an older checkpoint. Newer is
  // by generation, then step (a fresh group may restore an older step).
  if (auto it = last_checkpoint_.find(job); it != last_checkpoint_.end() &&
      std::pair(it->second.generation, it->second.step) > std::pair(row.generation, row.step))
    return false;
  last_checkpoint_[job] = row;
  Prune(last_checkpoint_);
  double& journaled = checkpoint_journaled_[job];
  if (row.time - journaled < every) return false;
  journaled = row.time;
  Prune(checkpoint_journaled_);
  return true;
}

std::optional<FailureTally::Row> JobTable::CheckpointFailed(s::JobId job, double now,
                                                            std::int64_t step,
                                                            const std::string& error,
                                                            double every) {
  auto due = checkpoint_failures_[job].Fail(now, step, error, every);
  Prune(checkpoint_failures_);
  return due;
}

std::optional<FailureTally::Row> JobTable::CheckpointRecovered(s::JobId job) {
  auto f = checkpoint_failures_.find(job);
  return f == checkpoint_failures_.end() ? std::nullopt : f->second.Recovered();
}

std::int64_t JobTable::CheckpointFailures(s::JobId job) const {
  auto f = checkpoint_failures_.find(job);
  return f == checkpoint_failures_.end() ? 0 : f->second.total();
}

}  // namespace aryl::daemon
