#include "runtime_model.h"

#include <algorithm>

#include "aryl/protocol/generation.h"

namespace aryl::daemon::testing {

void RuntimeModel::Train(p::JobId job, std::int64_t total_steps, double now, Checkpoints checkpoints) {
  training_[job].trained = true;
  training_[job].total = total_steps;
  training_[job].next_step = now + 1;
  training_[job].ckpt = checkpoints;
  if (checkpoints.every > 0) {
    Training& t = training_[job];
    t.disk = std::make_unique<MemoryCheckpointFs>();
    t.files = std::make_unique<CheckpointManager>(CheckpointDir(job), 3, t.disk.get());
    t.truth.Watch(t.disk.get(), CheckpointDir(job));
  }
}

MemoryCheckpointFs* RuntimeModel::Disk(p::JobId job) {
  auto it = training_.find(job);
  return it == training_.end() ? nullptr : it->second.disk.get();
}

std::int64_t RuntimeModel::Formed(p::JobId job) const {
  auto it = training_.find(job);
  return it == training_.end() ? 0 : it->second.formed;
}

int RuntimeModel::GenerationsStarted(p::JobId job) const {
  auto it = training_.find(job);
  return it == training_.end() ? 0 : static_cast<int>(it->second.members.size());
}

bool RuntimeModel::Done(p::JobId job) const {
  auto it = training_.find(job);
  return it != training_.end() && it->second.done;
}

std::int64_t RuntimeModel::FreshStart(p::JobId job) const {
  auto it = training_.find(job);
  return it == training_.end() ? 0 : it->second.fresh;
}

std::int64_t RuntimeModel::Step(p::JobId job) const {
  auto it = training_.find(job);
  return it == training_.end() ? 0 : it->second.step;
}

std::int64_t RuntimeModel::StepsTrained(p::JobId job) const {
  auto it = training_.find(job);
  return it == training_.end() ? 0 : it->second.steps_trained;
}

const CheckpointTruth* RuntimeModel::Truth(p::JobId job) const {
  auto it = training_.find(job);
  return it == training_.end() ? nullptr : &it->second.truth;
}

CheckpointTruth* RuntimeModel::Truth(p::JobId job) { return &training_[job].truth; }

void RuntimeModel::NoteGeneration(p::JobId job, std::int64_t gen, const std::vector<p::WorkerId>& members,
                                  const std::vector<p::WorkerPlacement>* started, double now) {
  Training& t = training_[job];  // every job's generations, trained or not
  // A generation none of whose members was in an earlier one is a fresh
  // start (a restart from the checkpoint).
  bool fresh = !t.members.count(gen);
  for (const auto& [g, earlier] : t.members)
    for (p::WorkerId w : members)
      if (g < gen && std::find(earlier.begin(), earlier.end(), w) != earlier.end()) fresh = false;
  if (fresh && !t.members.empty()) {
    t.fresh = std::max(t.fresh, gen);
    // A fresh group restores the checkpoint and trains on, even when an
    // older one already ended (on an agent the scheduler had given up on).
    t.done = false;
  }
  t.members[gen] = members;
  t.announced.emplace(gen, now);
  if (started)
    for (const auto& w : *started) t.joined_for[w.worker] = gen;
}

void RuntimeModel::Tick(double now, const Workers& ws) {
  for (auto& [job, t] : training_) {
    if (!t.trained || t.members.empty()) continue;
    WriteTick(job, t, now, ws);
    // A member of the formed generation gone: the survivors regroup (a
    // fault generation of the same plan) without the scheduler.
    if (t.formed > 0)
      for (p::WorkerId w : t.members[t.formed])
        if (!ws.running(w, nullptr)) t.fault = true;
    // The newest generation forms once all of its members run and are free
    // to join it: a joiner started for an earlier generation that has not
    // formed is still inside that generation's rendezvous (it gives up only
    // at its timeout) and hears of no later one.
    const auto& [newest, members] = *t.members.rbegin();
    auto free_to_join = [&, newest = newest](p::WorkerId w) {
      auto jf = t.joined_for.find(w);
      return ws.running(w, nullptr) && (jf == t.joined_for.end() || jf->second >= newest);
    };
    if (newest > t.formed && !members.empty() && now - t.announced[newest] >= kStartup &&
        std::all_of(members.begin(), members.end(), free_to_join)) {
      // No member was in the formed generation: none holds the state, so
      // rank 0 restores it (a fresh group).
      const bool fresh = t.formed == 0 || std::none_of(members.begin(), members.end(), [&](p::WorkerId w) {
                           const auto& old = t.members[t.formed];
                           return std::find(old.begin(), old.end(), w) != old.end();
                         });
      // Rank 0 of a fresh group raises the fence before it restores; when
      // it cannot (a full disk), its start fails and the group never forms.
      if (fresh && !Restore(job, t, members, now, ws)) continue;
      t.formed = newest;
      t.fault = false;
      for (auto jf = t.joined_for.begin(); jf != t.joined_for.end();)
        jf = jf->second <= newest ? t.joined_for.erase(jf) : std::next(jf);
    }
    // Joiners of a generation that never formed give up.
    std::vector<std::pair<std::string, p::WorkerId>> give_up;
    for (const auto& [w, gen] : t.joined_for) {
      std::string agent;
      if (gen > t.formed && now - t.announced[gen] > kRendezvousTimeout && ws.running(w, &agent))
        give_up.emplace_back(agent, w);
    }
    for (const auto& [agent, w] : give_up) {
      t.joined_for.erase(w);
      ws.exit(agent, w, 3, "interrupted", std::nullopt);
    }
    // Rank 0 of the formed generation reports a step a second, but none
    // while its group writes a checkpoint.
    if (t.done || t.formed == 0 || now + 1e-9 < t.next_step) continue;
    if (std::any_of(t.writes.begin(), t.writes.end(), [&](const auto& w) { return w.w.group == t.group; })) continue;
    t.next_step = now + 1;
    std::string agent;
    const auto& formed = t.members[t.formed];
    auto rank0 = std::find_if(formed.begin(), formed.end(), [&](p::WorkerId w) { return ws.running(w, &agent); });
    if (rank0 == formed.end()) continue;  // nobody left to train
    if (t.total > 0 && t.step >= t.total) {
      // The last step: every member that runs ends, "completed".
      t.done = true;
      for (p::WorkerId w : formed)
        if (ws.running(w, &agent)) ws.exit(agent, w, 0, "completed", t.step);
      continue;
    }
    const std::int64_t store_gen = p::PlanGeneration(t.formed) + (t.fault ? 1 : 0);
    p::JobProgress m;
    m.job = job;
    m.generation = store_gen;
    m.step = ++t.step;
    m.steps_per_second = 1;
    m.runtime = true;
    ws.send(agent, std::move(m));
    ++t.steps_trained;
    t.truth.Trained(t.step);
    if (t.ckpt.every > 0 && t.step % t.ckpt.every == 0) BeginWrite(t, *rank0, now, 0, -1);
  }
}

bool RuntimeModel::Restore(p::JobId job, Training& t, const std::vector<p::WorkerId>& members, double now,
                           const Workers& ws) {
  const std::int64_t gen = t.members.rbegin()->first;
  if (t.ckpt.every > 0) {
    // The runtime's RestoreCheckpoint (runtime_checkpoint.cc): the fence
    // first, raised to this generation by the manager, then LoadLatest.
    t.files->set_fence(FenceJob(job), gen);
    Status raised = t.files->RaiseFenceRetrying({});  // tries at once: a second apart in the runtime
    if (!raised.ok()) {
      // SyncState fails on rank 0 (Runtime::Start): the worker ends "failed"
      // and the others wait in the rendezvous until their timeout.
      std::string agent;
      auto rank0 = std::find_if(members.begin(), members.end(), [&](p::WorkerId w) { return ws.running(w, &agent); });
      t.truth.Note("group " + std::to_string(gen) + " cannot raise the fence: " + raised.ToString());
      if (rank0 != members.end()) {
        t.joined_for.erase(*rank0);
        ws.exit(agent, *rank0, 1, "failed", std::nullopt);
      }
      return false;
    }
  }
  t.group = gen;
  t.next_step = now + 1;
  if (t.ckpt.every <= 0) return true;  // no checkpoints: the model trains on where the job was
  // The newest file that passes its checks (a directory with none: step 0).
  auto loaded = t.files->LoadLatest();
  t.step = loaded.ok() ? loaded->info.step : 0;
  std::size_t skipped = loaded.ok() ? loaded->skipped.size() : 0;
  if (!loaded.ok())
    for (auto at = loaded.status().message().find("; skipped "); at != std::string::npos;
         at = loaded.status().message().find("; skipped ", at + 1))
      ++skipped;
  t.truth.Restored(t.group, t.step, now, skipped);
  return true;
}

void RuntimeModel::BeginWrite(Training& t, p::WorkerId writer, double now, int stop, double kill_at) {
  Training::Write w;
  w.w.group = t.group;
  w.w.generation = t.formed;
  w.w.writer = writer;
  w.w.step = t.step;
  w.w.begun = now;
  w.w.ends = now + t.ckpt.seconds;
  w.stop = stop;
  w.kill_at = kill_at;
  t.writes.push_back(w);
  t.truth.Begun(w.w);
}

bool RuntimeModel::Stop(p::JobId job, p::WorkerId worker, bool checkpoint_first, double grace, double now,
                        const Workers& ws) {
  auto it = training_.find(job);
  if (it == training_.end() || !it->second.trained || it->second.ckpt.every <= 0) return false;
  Training& t = it->second;
  WriteTick(job, t, now, ws);  // a writer that died this tick has torn its write
  if (!ws.running(worker, nullptr)) return true;  // its stop's grace ran out just now
  const int stop = checkpoint_first ? 1 : 2;
  for (auto& w : t.writes)
    if (w.w.writer == worker) {  // it stops once this write is done
      w.stop = stop;
      if (w.kill_at < 0 || now + grace < w.kill_at) w.kill_at = now + grace;
      return true;
    }
  if (t.done || t.formed == 0) return false;
  const auto& formed = t.members[t.formed];
  auto rank0 = std::find_if(formed.begin(), formed.end(), [&](p::WorkerId w) { return ws.running(w, nullptr); });
  if (rank0 == formed.end() || *rank0 != worker) return false;
  BeginWrite(t, worker, now, stop, now + grace);
  return true;
}

void RuntimeModel::WriteTick(p::JobId job, Training& t, double now, const Workers& ws) {
  for (std::size_t i = 0; i < t.writes.size();) {
    const Training::Write w = t.writes[i];
    std::string agent;
    if (!ws.running(w.w.writer, &agent)) {
      t.writes.erase(t.writes.begin() + static_cast<long>(i));
      t.truth.Torn(w.w.writer, "worker " + std::to_string(w.w.writer) + " is gone", now);
      continue;
    }
    if (w.kill_at >= 0 && now + 1e-9 >= w.kill_at && w.kill_at < w.w.ends) {
      t.writes.erase(t.writes.begin() + static_cast<long>(i));
      t.truth.Torn(w.w.writer, "SIGKILL at the stop's grace", now);
      ws.kill(agent, w.w.writer, 9);
      continue;
    }
    if (now + 1e-9 < w.w.ends) {
      ++i;
      continue;
    }
    t.writes.erase(t.writes.begin() + static_cast<long>(i));
    Commit(job, t, w, agent, now, ws);
  }
}

void RuntimeModel::Commit(p::JobId job, Training& t, const Training::Write& w, const std::string& agent, double now,
                          const Workers& ws) {
  int world = 0;
  for (p::WorkerId m : t.members[w.w.generation]) world += ws.running(m, nullptr);
  const std::string payload(t.ckpt.bytes, static_cast<char>('a' + w.w.step % 26));
  // The writer's own manager: fenced at its generation (Runtime::Impl::FenceAs).
  t.files->set_fence(FenceJob(job), w.w.generation);
  auto info = t.files->Write(w.w.step, std::max(1, world), payload);
  if (CheckpointManager::IsFenced(info.status())) {
    // A stale copy: the fence refuses its commit, and the runtime fails
    // without a report (runtime_checkpoint.cc).
    t.truth.Torn(w.w.writer, info.status().ToString(), now);
    ws.exit(agent, w.w.writer, 1, "failed", std::nullopt);
    return;
  }
  p::CheckpointReport r;
  r.agent_id = agent;  // as aryl-agent relays it
  r.job = job;
  r.worker = w.w.writer;
  r.generation = p::PlanGeneration(w.w.generation);
  r.step = w.w.step;
  r.seconds = w.w.ends - w.w.begun;
  if (info.ok()) {
    t.truth.Committed(w.w.writer, now);
    r.path = info->path;
    r.bytes = static_cast<std::int64_t>(payload.size());
  } else {
    // The runtime's CheckpointNow: the job keeps its newest good checkpoint
    // and the scheduler hears of the failure (runtime_checkpoint.cc).
    t.truth.Failed(w.w.writer, info.status().ToString(), CheckpointFs::IsNoSpace(info.status()),
                   payload.size() + kFileHeader, now);
    r.path = t.files->dir();
    r.error = info.status().ToString().substr(0, 1000);
  }
  t.truth.CheckDisk();
  ws.send(agent, std::move(r));
  if (w.stop == 1) ws.exit(agent, w.w.writer, 0, "stopped", std::nullopt);
  else if (w.stop == 2) ws.kill(agent, w.w.writer, 15);
  else if (w.w.group == t.group) t.next_step = now + 1;
}

}  // namespace aryl::daemon::testing
