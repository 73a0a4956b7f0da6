#include "store_poller.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace aryl {

StorePoller::StorePoller(std::unique_ptr<JobStore> store, std::chrono::milliseconds interval, std::string worker_id)
    : store_(std::move(store)), interval_(interval), worker_id_(std::move(worker_id)) {
  thread_ = std::thread([this] { Loop(); });
}

StorePoller::~StorePoller() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StorePoller::SetProgress(bool rank0, int64_t step) {
  rank0_ = rank0;
  step_ = step;
}

Status StorePoller::PollOnce() {
  int64_t step = step_;
  if (rank0_ && step > stored_step_) {
    ARYL_RETURN_IF_ERROR(store_->Set("progress", std::to_string(step)));
    stored_step_ = step;
  }
  ARYL_ASSIGN_OR_RETURN(int64_t latest, store_->Latest());
  latest_ = std::max<int64_t>(latest_, latest);
  ARYL_ASSIGN_OR_RETURN(int64_t ck, store_->Add("control/checkpoint", 0));
  checkpoint_ = std::max<int64_t>(checkpoint_, ck);
  ARYL_ASSIGN_OR_RETURN(bool stop, store_->Check("control/stop"));
  stop_requested_ = stop;
  ++polls_;
  return Status::Ok();
}

void StorePoller::Loop() {
  std::chrono::milliseconds wait = interval_;
  double backoff_s = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, wait, [this] { return quit_; })) return;
    }
    Status s = PollOnce();
    if (s.ok()) {
      if (backoff_s > 0) spdlog::info("aryl: {}: the store answers again", worker_id_);
      backoff_s = 0;
      wait = interval_;
      continue;
    }
    if (backoff_s == 0) {
      spdlog::warn("aryl: {}: store poll failed ({}); training goes on, polling again with backoff", worker_id_,
                   s.ToString());
    }
    backoff_s = backoff_s == 0 ? 1.0 : std::min(16.0, 2 * backoff_s);
    wait = std::chrono::milliseconds(int64_t(backoff_s * 1000));
  }
}

}  // namespace aryl
