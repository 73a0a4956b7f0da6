// ClusterState <-> StateImage: the snapshot a driver keeps instead of the
// whole history of events (see StateImage in state.h).
#include <algorithm>

#include "aryl/sched/queues.h"
#include "aryl/sched/state.h"

namespace aryl::sched {

StateImage ClusterState::Image() const {
  StateImage image;
  ImageInto(image);
  return image;
}

void ClusterState::ImageInto(StateImage& image) const {
  image.now = now_;
  // Element by element into what the image holds (a vector's copy-assignment
  // assigns the elements it keeps): each server's job list, and below each
  // job's strings, placement map and curves, reuse their memory instead of
  // allocating (a job is several allocations; at 100,000 jobs most of the
  // copy's time was malloc and free).
  image.servers = servers_;
  // jobs_ is in id order: the running and queued ones, without a set of them.
  const std::size_t active = running_.size() + queued_.size();
  if (image.jobs.size() > active) image.jobs.resize(active);
  std::size_t i = 0;
  for (const auto& [id, j] : jobs_) {
    if (j.status != JobStatus::kQueued && j.status != JobStatus::kRunning) continue;
    if (i < image.jobs.size()) {
      image.jobs[i] = j;
    } else {
      image.jobs.push_back(j);
    }
    ++i;
  }
  image.reclaims = reclaims_;
  image.draining = draining_;
}

void ClusterState::ForgetEnded() {
  JobIndex& x = job_index_;
  const bool indexed = x.size == jobs_.size();
  // Every job running or queued: nothing to forget, and no walk of the map
  // (about 20 ms at 100,000 jobs).
  const bool none_ended = jobs_.size() == running_.size() + queued_.size();
  for (auto it = none_ended ? jobs_.end() : jobs_.begin(); it != jobs_.end();) {
    if (it->second.status == JobStatus::kQueued || it->second.status == JobStatus::kRunning) {
      ++it;
      continue;
    }
    if (indexed) {
      const JobId id = it->first;
      if (static_cast<size_t>(id) < x.dense.size() && x.dense[id] == &it->second) {
        x.dense[id] = nullptr;
      } else {
        x.sparse.erase(id);
      }
      --x.size;
    }
    it = jobs_.erase(it);
  }
  if (!indexed) x = JobIndex();  // rebuilt at the next lookup
  queue_log_id_ = InstanceId();
  queue_epoch_ = 0;
  queue_log_.clear();
}

Result<ClusterState> ClusterState::FromImage(StateImage image, std::shared_ptr<const ThroughputCatalog> thr,
                                             SchedulerConfig config) {
  std::vector<ServerSpec> specs;
  specs.reserve(image.servers.size());
  for (const auto& s : image.servers) specs.push_back(s.spec);
  ARYL_ASSIGN_OR_RETURN(ClusterState state, Create(std::move(specs), std::move(thr), std::move(config)));
  if (!(image.now >= 0)) return Status::Corruption("state image: time " + std::to_string(image.now));
  for (size_t i = 0; i < image.servers.size(); ++i) {
    ServerInfo& to = state.servers_[i];
    const ServerInfo& from = image.servers[i];
    const std::string who = "state image: server " + std::to_string(from.spec.id);
    if (from.spec.pool == Pool::kTraining ? from.state != ServerState::kAvailable
                                          : from.state != ServerState::kHeld && from.state != ServerState::kLoaned)
      return Status::Corruption(who + ": state " + std::to_string(static_cast<int>(from.state)) + " for its pool");
    to.state = from.state;
    to.failed = from.failed;
    to.used = from.used;
    to.jobs = from.jobs;
    to.busy_gpu_seconds = from.busy_gpu_seconds;
    to.loaned_seconds = from.loaned_seconds;
    to.return_by = from.return_by;
    to.reclaim_record = from.reclaim_record;
    to.cordoned = from.cordoned;
    state.cordoned_ += from.cordoned;
    if (from.draining() && (from.reclaim_record < 0 || from.reclaim_record >= static_cast<int>(image.reclaims.size())))
      return Status::Corruption(who + ": draining for reclaim " + std::to_string(from.reclaim_record) + " of " +
                                std::to_string(image.reclaims.size()));
  }
  for (ServerId id : image.draining) {
    const int i = state.server_index(id);
    if (i < 0 || !state.servers_[i].draining())
      return Status::Corruption("state image: server " + std::to_string(id) + " listed as draining but is not");
  }
  size_t draining_servers = 0;
  for (const auto& s : state.servers_) draining_servers += s.draining();
  if (draining_servers != image.draining.size())
    return Status::Corruption("state image: " + std::to_string(draining_servers) + " draining servers, " +
                              std::to_string(image.draining.size()) + " listed");
  state.draining_ = std::move(image.draining);
  for (auto& job : image.jobs) {
    const JobId id = job.spec.id;
    const std::string who = "state image: job " + std::to_string(id);
    if (job.status != JobStatus::kQueued && job.status != JobStatus::kRunning)
      return Status::Corruption(who + ": neither queued nor running");
    if (state.jobs_.count(id)) return Status::Corruption(who + ": appears twice");
    if (job.curves.size() != state.type_names_.size()) {
      ARYL_ASSIGN_OR_RETURN(JobInfo built, state.BuildJob(job.spec));
      job.curves = std::move(built.curves);
      job.base_workers = built.base_workers;
      job.requested_workers = built.requested_workers;
    }
    // Its queue by name, under the queues configured now: a queue since
    // removed from the file charges its jobs to the default queue.
    job.queue = -1;
    if (state.config_.queues) {
      job.queue = state.config_.queues->Find(job.spec.queue);
      if (job.queue < 0) job.queue = state.config_.queues->Find("");
    }
    if (job.status == JobStatus::kRunning) {
      state.running_.insert(id);
    } else {
      state.queued_.insert(id);
    }
    if (job.status == JobStatus::kRunning && job.elastic()) state.running_elastic_.insert(id);
    state.jobs_.emplace(id, std::move(job));
  }
  for (auto& [id, j] : state.jobs_) {
    state.IndexJob(&j);
    state.UpdateSlow(j);
  }
  state.reclaims_ = std::move(image.reclaims);
  state.now_ = image.now;
  Status ok = state.CheckInvariants();
  if (!ok.ok()) return Status::Corruption("state image: " + ok.message());
  return state;
}

}  // namespace aryl::sched
