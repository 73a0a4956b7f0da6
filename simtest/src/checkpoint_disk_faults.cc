#include "checkpoint_disk_faults.h"

#include <algorithm>
#include <utility>

namespace aryl::simtest {

namespace p = aryl::protocol;
using daemon::testing::DrivenCluster;
using daemon::testing::RuntimeModel;

CheckpointDiskFaults::CheckpointDiskFaults(DrivenCluster& c, p::JobId job, bool exact,
                                           std::function<void(const std::string&)> trace)
    : c_(c), job_(job), exact_(exact), trace_(std::move(trace)) {
  c_.on_arrive = [this](const std::string&, const p::Message& m) {
    auto* r = std::get_if<p::CheckpointReport>(&m);
    if (!r || r->job != job_) return;
    if (!r->error.empty()) ++read_failures_;
    else if (read_failures_ > journaled_) due_ = read_failures_;  // the failures read before it
  };
}

void CheckpointDiskFaults::Draw(const Uniform& uniform, const Plan& plan, std::uint64_t file_bytes) {
  const int files = std::min(4, static_cast<int>(uniform(1, 5)));
  const auto slack = static_cast<std::uint64_t>(uniform(0, 1) * static_cast<double>(file_bytes));
  plan(0, "checkpoint disk: room for " + std::to_string(files) + " checkpoint(s)",
       [this, files, file_bytes, slack] { Capacity(files, file_bytes, slack); });
  const int windows = std::min(2, static_cast<int>(uniform(1, 3)));
  for (int i = 0; i < windows; ++i) {
    const double at = uniform(5, 250), len = uniform(5, 60), fraction = uniform(0.3, 1);
    plan(at, "checkpoint disk filled by other files", [this, fraction] { Fill(fraction); });
    plan(at + len, "checkpoint disk: other files removed", [this] { Empty(); });
  }
  const int errors = std::min(2, static_cast<int>(uniform(0, 3)));
  for (int i = 0; i < errors; ++i)
    plan(uniform(5, 300), "the next checkpoint write fails (EIO)", [this] { FailNextWrite(); });
  const int corrupt = std::min(2, static_cast<int>(uniform(0, 3)));
  for (int i = 0; i < corrupt; ++i) {
    const double at = uniform(5, 300);
    const bool torn = uniform(0, 1) < 0.5;
    plan(at, torn ? "tear the newest checkpoint file" : "corrupt the newest checkpoint file",
         [this, torn] { CorruptNewest(torn); });
  }
  // A restart of the whole job, so that a fresh group restores from the disk.
  const int restarts = std::min(2, static_cast<int>(uniform(1, 3)));
  for (int i = 0; i < restarts; ++i) plan(uniform(20, 320), "SIGKILL every worker of the job", [this] { KillAll(); });
}

void CheckpointDiskFaults::KillAll() {
  for (const auto& [agent, ws] : c_.WorkersOf(job_))
    for (const auto& w : ws) {
      trace_("kill worker " + std::to_string(w.worker) + " on " + agent);
      ++kills_;
      c_.Kill(agent, w.worker, 9);
    }
}

void CheckpointDiskFaults::Capacity(int files, std::uint64_t file_bytes, std::uint64_t slack) {
  if (!Disk()) return;
  Disk()->set_capacity(static_cast<std::uint64_t>(files) * file_bytes + slack);
  trace_("checkpoint disk of " + std::to_string(Disk()->capacity()) + " bytes (" + std::to_string(files) +
         " checkpoint(s) of " + std::to_string(file_bytes) + ")");
}

void CheckpointDiskFaults::Fill(double fraction) {
  if (!Disk()) return;
  // Other files take up to `fraction` of the disk, of the room that is free
  // (a disk never holds more than its capacity).
  const std::uint64_t cap = Disk()->capacity(), used = Disk()->used();
  const std::uint64_t free = used >= cap ? 0 : cap - used;
  Disk()->set_other_bytes(std::min(free, static_cast<std::uint64_t>(fraction * static_cast<double>(cap))));
  trace_("other files take " + std::to_string(Disk()->other_bytes()) + " bytes of the checkpoint disk");
}

void CheckpointDiskFaults::Empty() {
  if (Disk()) Disk()->set_other_bytes(0);
}

void CheckpointDiskFaults::FailNextWrite() {
  if (Disk()) Disk()->FailNextWrite();
}

void CheckpointDiskFaults::CorruptNewest(bool torn) {
  auto* disk = Disk();
  if (!disk) return;
  const std::string dir = RuntimeModel::CheckpointDir(job_);
  std::string newest;
  for (const auto& name : disk->Names(dir))
    if (name.rfind("ckpt-", 0) == 0 && name.find(".tmp") == std::string::npos) newest = std::max(newest, name);
  if (newest.empty()) return trace_("no checkpoint on the disk to corrupt");
  disk->Corrupt(dir + "/" + newest, torn);
  trace_(std::string(torn ? "tear " : "corrupt ") + newest);
  c_.Checkpoints(job_)->Corrupted(std::stoll(newest.substr(5, 12)));
}

void CheckpointDiskFaults::ReadEvents() {
  for (int page = 0; page < 100; ++page) {
    p::ListEvents q;
    q.job = job_;
    q.kind = "checkpoint_failed";
    q.after = events_after_;
    q.limit = p::kMaxEventsPage;
    auto r = c_.Call<p::EventsReply>(q);
    if (!r.ok()) return;
    for (const auto& e : r->events) {
      events_after_ = std::max(events_after_, e.seq);
      if (e.data.contains("failures") && e.data["failures"].is_number_integer())
        journaled_ += e.data["failures"].get<std::int64_t>();
    }
    if (!r->more || r->events.empty()) return;
  }
}

std::vector<CheckpointDiskFaults::Violation> CheckpointDiskFaults::Check() {
  std::vector<Violation> out;
  c_.Checkpoints(job_)->CheckDisk();
  const std::int64_t due = std::exchange(due_, 0);
  // The events each second once a failure was read, each 10 s before (a
  // row of failures nobody reported), and right after a resume.
  const int every = read_failures_ > 0 ? 20 : 200;
  if ((++ticks_ % every != 0 && due == 0) || !c_.daemon_running()) return out;
  ReadEvents();
  if (journaled_ > read_failures_ && !over_said_) {
    over_said_ = true;
    out.push_back({"D8", "the scheduler's checkpoint_failed events count " + std::to_string(journaled_) +
                             " failures; it read " + std::to_string(read_failures_) + " failure reports"});
  }
  if (due > 0 && exact_ && journaled_ < due && !short_said_) {
    auto row = c_.Job(job_);  // a report read after the job ended is not counted
    if (row.ok() && !p::IsTerminal(row->state)) {
      short_said_ = true;
      out.push_back({"D8", "checkpoints resumed, but the scheduler's checkpoint_failed events count " +
                               std::to_string(journaled_) + " of the " + std::to_string(due) +
                               " failure reports it read before"});
    }
  }
  return out;
}

std::vector<CheckpointDiskFaults::Violation> CheckpointDiskFaults::Finish(bool lossless, bool dup) {
  std::vector<Violation> out;
  const std::int64_t failed = c_.Checkpoints(job_)->failed();
  if (lossless && (dup ? read_failures_ < failed : read_failures_ != failed))
    out.push_back({"D8", "the runtime had " + std::to_string(failed) + " failed checkpoint writes; the scheduler read " +
                             std::to_string(read_failures_) + " failure reports, on a wire that lost nothing"});
  return out;
}

}  // namespace aryl::simtest
