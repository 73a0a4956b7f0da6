#include "checkpoint_faults.h"

#include <algorithm>
#include <utility>

namespace aryl::simtest {

namespace p = aryl::protocol;
using daemon::testing::CheckpointTruth;
using daemon::testing::DrivenCluster;

CheckpointFaults::CheckpointFaults(DrivenCluster& c, p::JobId job, Later later,
                                   std::function<void(const std::string&)> trace)
    : c_(c), job_(job), later_(std::move(later)), trace_(std::move(trace)) {}

void CheckpointFaults::Aim() {
  for (auto it = armed_.begin(); it != armed_.end();) {
    const auto& writes = c_.Checkpoints(job_)->in_progress();
    auto w = std::find_if(writes.begin(), writes.end(), [&](const CheckpointTruth::Write& x) {
      return x.begun - DrivenCluster::kT0 + 1e-9 >= it->at;
    });
    if (w == writes.end()) {
      ++it;
      continue;
    }
    const double begun = w->begun - DrivenCluster::kT0;
    later_(begun + it->frac * (w->ends - w->begun), "tear checkpoint step " + std::to_string(w->step),
           [this, a = *it, writer = w->writer, begun] { Tear(a, writer, begun); });
    it = armed_.erase(it);
  }
}

void CheckpointFaults::Tear(const Armed& a, p::WorkerId writer, double begun) {
  const auto& writes = c_.Checkpoints(job_)->in_progress();
  if (std::none_of(writes.begin(), writes.end(), [&](const CheckpointTruth::Write& w) {
        return w.writer == writer && w.begun - DrivenCluster::kT0 == begun;
      }))
    return trace_("the write ended before the kill");
  std::string writer_agent;
  std::vector<std::pair<std::string, p::WorkerId>> others;
  for (const auto& [agent, ws] : c_.WorkersOf(job_))
    for (const auto& w : ws) {
      if (w.worker == writer) writer_agent = agent;
      else others.emplace_back(agent, w.worker);
    }
  if (writer_agent.empty()) return trace_("worker " + std::to_string(writer) + " is gone before the kill");
  if (a.kind == 2) {
    trace_("crash agent " + writer_agent + " (worker " + std::to_string(writer) + " writes)");
    c_.CrashAgent(writer_agent);
    later_(Now() + a.down, "agent " + writer_agent + " starts again",
           [this, writer_agent] { c_.agent(writer_agent).down = false; });
    return;
  }
  auto [agent, worker] = a.kind == 1 && !others.empty() ? others[0] : std::make_pair(writer_agent, writer);
  trace_("kill worker " + std::to_string(worker) + " on " + agent);
  ++kills_;
  c_.Kill(agent, worker, 9);
}

std::vector<CheckpointTruth::Violation> CheckpointFaults::Check() {
  auto out = c_.Checkpoints(job_)->TakeViolations();
  if (++ticks_ % 20 != 0 || !c_.daemon_running()) return out;
  auto d = c_.Call<p::JobDescription>(p::DescribeJob{job_});
  if (!d.ok() || !d->last_checkpoint) return out;
  const std::int64_t step = d->last_checkpoint->step;
  // A corrupted file takes the newest good checkpoint back (cdisk): while it
  // is below the record's high mark, the record may follow it down.
  if (c_.Checkpoints(job_)->newest_good() < daemon_seen_) daemon_seen_ = step;
  if (!c_.Checkpoints(job_)->WasGood(step) && !never_said_) {
    never_said_ = true;
    out.push_back({"D7", "the daemon's last checkpoint is step " + std::to_string(step) + ", never committed"});
  }
  if (step < daemon_seen_ && !back_said_) {
    back_said_ = true;
    out.push_back({"D7", "the daemon's last checkpoint went back from step " + std::to_string(daemon_seen_) +
                             " to " + std::to_string(step)});
  }
  daemon_seen_ = std::max(daemon_seen_, step);
  return out;
}

}  // namespace aryl::simtest
