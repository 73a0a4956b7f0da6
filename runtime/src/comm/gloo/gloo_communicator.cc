#include "comm/gloo/gloo_communicator.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
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

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, int rank, int size)
      : pg_(std::move(pg)), rank_(rank), size_(size) {}

  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  std::string_view Backend() const override { return "gloo"; }

  Status AllReduceSum(std::span<const BufferView> buffers) override {
    if (aborted_) return Status::Unavailable("gloo: communicator aborted");
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<std::vector<at::Tensor>> tensors(buffers.size());
    try {
      // Launch every bucket, then wait: Gloo's worker threads overlap them.
      for (size_t i = 0; i < buffers.size(); ++i) {
        tensors[i].push_back(View(buffers[i]));
        works.push_back(pg_->allreduce(tensors[i]));
      }
      for (auto& w : works) w->wait();
    } catch (const std::exception& e) {
      // Drain what was launched before reporting: the buffers must not be
      // written after we return.
      for (auto& w : works) {
        try {
          w->wait();
        } catch (...) {
        }
      }
      return GlooErrorToStatus(e.what(), "allreduce");
    }
    return Status::Ok();
  }

  Status Broadcast(BufferView buffer, int root) override {
    if (aborted_) return Status::Unavailable("gloo: communicator aborted");
    if (root < 0 || root >= size_) {
      return Status::InvalidArgument("gloo broadcast: root " + std::to_string(root) + " not in [0, " +
                                     std::to_string(size_) + ")");
    }
    try {
      std::vector<at::Tensor> t{View(buffer)};
      c10d::BroadcastOptions opts;
      opts.rootRank = root;
      pg_->broadcast(t, opts)->wait();
    } catch (const std::exception& e) {
      return GlooErrorToStatus(e.what(), "broadcast");
    }
    return Status::Ok();
  }

  // Gloo cannot cancel an operation in flight; pending ones end at the
  // timeout or when a peer closes. Later calls fail fast.
  void Abort() override { aborted_ = true; }

 private:
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  int rank_, size_;
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
    return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(pg), rank, size));
  } catch (const std::exception& e) {
    return GlooErrorToStatus(e.what(), "connect").WithContext("rank " + std::to_string(rank) + " of " +
                                                                std::to_string(size));
  }
}

}  // namespace aryl
