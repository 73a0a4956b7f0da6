// Checkpoints and fencing at the step boundary (checkpoint.h has the format,
// the retention and the fence).
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "runtime_impl.h"

namespace aryl {

// Fencing (checkpoint.h): under the scheduler (ARYL_FENCE_ID) its
// generations order every copy of the job, so a copy of a stale generation
// is refused.
void Runtime::Impl::FenceAs(int64_t generation) {
  if (!ckpt_ || opt_.fence_id.empty()) return;
  ckpt_->set_fence(opt_.fence_id, generation);
}

// A refused (fenced) write means this copy of the job is stale: the caller stops.
// Every other failure is reported to the scheduler, which counts each one
// (aryl_checkpoint_failures_total); the job keeps its newest good checkpoint.
Status Runtime::Impl::CheckpointNow(const ElasticState& state) {
  if (rank_ != 0 || !ckpt_) return Status::Ok();
  FenceAs(gen_);
  double t0 = RuntimeNow();
  auto bytes = state.Serialize();
  Result<CheckpointInfo> info =
      bytes.ok() ? ckpt_->Write(state.step(), world_, *bytes)
                 : Result<CheckpointInfo>(bytes.status().WithContext("serialize"));
  if (!info.ok()) {
    if (ckpt_failures_++ == 0) ckpt_failing_since_ = state.step();
    spdlog::error("aryl: checkpoint at step {} failed ({} in a row since step {}): {}",
                  state.step(), ckpt_failures_, ckpt_failing_since_, info.status().ToString());
    // A full disk is the operator's to see, not only this worker's stderr.
    if (channel_ && !CheckpointManager::IsFenced(info.status()))
      channel_->ReportCheckpoint(gen_, state.step(), ckpt_->dir(), 0, RuntimeNow() - t0,
                                 info.status().ToString());
    return info.status();
  }
  if (info->removed_for_space > 0)
    spdlog::warn("aryl: checkpoint dir {} was full: removed {} older checkpoint(s) to make room",
                 ckpt_->dir(), info->removed_for_space);
  if (ckpt_failures_ > 0) {
    spdlog::info("aryl: checkpoints written again after {} failure(s) since step {}",
                 ckpt_failures_, ckpt_failing_since_);
    ckpt_failures_ = 0;
  }
  spdlog::info("aryl: checkpoint {} step={} world={} bytes={} seconds={:.3f}", info->path,
               state.step(), world_, bytes->size(), RuntimeNow() - t0);
  if (channel_)
    channel_->ReportCheckpoint(gen_, state.step(), info->path, static_cast<int64_t>(bytes->size()),
                               RuntimeNow() - t0);
  return Status::Ok();
}

// Loads the newest valid checkpoint, if any, reporting the corrupt ones skipped.
Status Runtime::Impl::RestoreCheckpoint(ElasticState& state) {
  if (!ckpt_) return Status::Ok();
  // First the fence: once it is raised no stale copy commits another
  // checkpoint, so the one loaded below is the last before this generation.
  FenceAs(gen_);
  ARYL_RETURN_IF_ERROR(ckpt_->RaiseFenceRetrying([&](int tried) {
    spdlog::warn("aryl: raising the checkpoint fence in {} failed (try {} of {}); again in 1 s", ckpt_->dir(),
                 tried, CheckpointManager::kRaiseTries);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }));
  auto loaded = ckpt_->LoadLatest();
  if (!loaded.ok()) {
    if (!loaded.status().IsNotFound()) return loaded.status();
    if (loaded.status().message().find("skipped") != std::string::npos) {
      spdlog::error("aryl: {}", loaded.status().ToString());
      std::fprintf(stderr, "aryl: checkpoint skipped: %s\n", loaded.status().ToString().c_str());
    }
    return Status::Ok();
  }
  for (const auto& skipped : loaded->skipped) {
    spdlog::error("aryl: skipping corrupt checkpoint: {}", skipped.ToString());
    std::fprintf(stderr, "aryl: checkpoint skipped: %s\n", skipped.ToString().c_str());
  }
  ARYL_RETURN_IF_ERROR(state.Deserialize(loaded->payload).WithContext(loaded->info.path));
  spdlog::info("aryl: restored {} (step {}, saved at world {}) into world {}", loaded->info.path,
               loaded->info.step, loaded->info.world_size, world_);
  std::printf("aryl: restored checkpoint step=%lld saved_world=%d world=%d skipped=%zu\n",
              (long long)loaded->info.step, loaded->info.world_size, world_,
              loaded->skipped.size());
  std::fflush(stdout);
  return Status::Ok();
}

}  // namespace aryl
