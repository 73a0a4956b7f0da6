#include "comm/gloo/gloo_communicator.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace aryl {
namespace {

at::ScalarType ToTorch(DataType t) {
  switch (t) {
    case DataType::kFloat32: return at::kFloat;
    case DataType::kFloat64: return at::kDouble;
    case DataType::kInt64: return at::kLong;
    case DataType::kUInt8: return at::kByte;
  }
  return at::kByte;
}

at::Tensor View(const BufferView& b) {
  return at::from_blob(b.data, {int64_t(b.count)}, at::TensorOptions().dtype(ToTorch(b.dtype)));
}

std::string FirstLine(std::string s) {
  if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

// Destroys `pg` on a thread of its own and waits for that up to `bound`:
// ~ProcessGroupGloo joins its worker threads, which finish an operation in
// flight only when Gloo's own timeout fires. Past the bound the group is left
// to that thread (it holds nothing the next generation needs).
void ReleaseBounded(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, std::chrono::milliseconds bound) {
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto done = std::make_shared<Done>();
  std::thread([pg = std::move(pg), done]() mutable {
    pg.reset();
    std::lock_guard<std::mutex> lock(done->mu);
    done->done = true;
    done->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(done->mu);
  if (!done->cv.wait_for(lock, bound, [&] { return done->done; })) {
    spdlog::warn("gloo: a process group's operations did not end within {} ms; released in the background",
                 bound.count());
  }
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, int rank, int size, std::chrono::milliseconds timeout)
      : pg_(std::move(pg)), rank_(rank), size_(size), bound_(timeout + std::max(timeout / 2, kMinMargin)) {}
  ~GlooCommunicator() override { ReleaseBounded(std::move(pg_), bound_); }

  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  std::string_view Backend() const override { return "gloo"; }

  Status AllReduceSum(std::span<const BufferView> buffers) override {
    if (aborted_) return Status::Unavailable("gloo: communicator aborted");
    // Gloo works on copies it owns (see the header), launched together so
    // that its worker threads overlap them.
    std::vector<std::vector<at::Tensor>> tensors(buffers.size());
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    try {
      for (size_t i = 0; i < buffers.size(); ++i) {
        tensors[i].push_back(View(buffers[i]).clone());
        works.push_back(pg_->allreduce(tensors[i]));
      }
    } catch (const std::exception& e) {
      Status s = GlooErrorToStatus(e.what(), "allreduce");
      (void)WaitAll(works, "allreduce");
      return s;
    }
    ARYL_RETURN_IF_ERROR(WaitAll(works, "allreduce"));
    for (size_t i = 0; i < buffers.size(); ++i) View(buffers[i]).copy_(tensors[i][0]);
    return Status::Ok();
  }

  Status Broadcast(BufferView buffer, int root) override {
    if (aborted_) return Status::Unavailable("gloo: communicator aborted");
    if (root < 0 || root >= size_) {
      return Status::InvalidArgument("gloo broadcast: root " + std::to_string(root) + " not in [0, " +
                                     std::to_string(size_) + ")");
    }
    std::vector<at::Tensor> t{View(buffer).clone()};
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    try {
      c10d::BroadcastOptions opts;
      opts.rootRank = root;
      works.push_back(pg_->broadcast(t, opts));
    } catch (const std::exception& e) {
      return GlooErrorToStatus(e.what(), "broadcast");
    }
    ARYL_RETURN_IF_ERROR(WaitAll(works, "broadcast"));
    if (rank_ != root) View(buffer).copy_(t[0]);
    return Status::Ok();
  }

  // Gloo cannot cancel an operation in flight; pending ones end at the
  // timeout or when a peer closes. Later calls fail fast.
  void Abort() override { aborted_ = true; }

 private:
  static constexpr std::chrono::milliseconds kMinMargin{1000};

  // Waits for every work, all within bound_ (Work::wait(0) would wait forever).
  // The first error wins; past the bound the communicator is unusable.
  Status WaitAll(const std::vector<c10::intrusive_ptr<c10d::Work>>& works, std::string_view op) {
    const auto deadline = std::chrono::steady_clock::now() + bound_;
    Status first;
    for (const auto& w : works) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      try {
        w->wait(std::max(left, std::chrono::milliseconds(1)));
      } catch (const std::exception& e) {
        Status s = GlooErrorToStatus(e.what(), op);
        if (!w->isCompleted()) {
          aborted_ = true;
          s = Status::Timeout("gloo " + std::string(op) + ": not done within " + std::to_string(bound_.count()) +
                              " ms (Gloo's own timeout did not fire)");
        }
        if (first.ok()) first = s;
      }
    }
    return first;
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  int rank_, size_;
  std::chrono::milliseconds bound_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

Status GlooErrorToStatus(const std::string& what, std::string_view op) {
  std::string line = FirstLine(what);
  std::string msg = "gloo " + std::string(op) + ": " + line;
  if (line.find("Timed out") != std::string::npos || line.find("timed out") != std::string::npos ||
      line.find("Timeout") != std::string::npos) {
    return Status::Timeout(msg);
  }
  return Status::IoError(msg);
}

Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                             int rank, int size, const std::string& host,
                                                             std::chrono::milliseconds timeout) {
  if (rank < 0 || rank >= size) {
    return Status::InvalidArgument("gloo: rank " + std::to_string(rank) + " not in [0, " + std::to_string(size) +
                                   ")");
  }
  try {
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(host));
    opts->threads = 2;
    store->setTimeout(timeout);
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
    return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(pg), rank, size, timeout));
  } catch (const std::exception& e) {
    return GlooErrorToStatus(e.what(), "connect").WithContext("rank " + std::to_string(rank) + " of " +
                                                                std::to_string(size));
  }
}

}  // namespace aryl
