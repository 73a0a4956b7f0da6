#include "comm/fake/fake_communicator.h"

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace aryl {

// One collective at a time: ranks arrive with their buffers, the last one
// computes the result, everyone copies it out, the last to leave resets.
class FakeWorld {
 public:
  explicit FakeWorld(int size) : size_(size), posted_(size) {}

  Status Run(int rank, std::vector<BufferView> buffers, int root, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    // Wait for the previous collective to drain.
    if (!cv_.wait_until(lock, deadline, [&] { return broken_ || departing_ == 0; })) {
      return Status::Timeout("fake: timed out waiting for the previous collective");
    }
    if (broken_) return Status::Unavailable("fake: world aborted");
    posted_[rank] = std::move(buffers);
    if (++arrived_ == size_) {
      Combine(root);
      departing_ = size_;
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      int64_t my_round = round_;
      if (!cv_.wait_until(lock, deadline, [&] { return broken_ || round_ != my_round; })) {
        broken_ = true;  // the others will never meet us again in step
        cv_.notify_all();
        return Status::Timeout("fake: rank " + std::to_string(rank) + " timed out after " +
                               std::to_string(timeout.count()) + " ms waiting for peers");
      }
      if (broken_) return Status::Unavailable("fake: world aborted");
    }
    for (size_t i = 0; i < posted_[rank].size(); ++i) {
      std::memcpy(posted_[rank][i].data, result_[i].data(), result_[i].size());
    }
    if (--departing_ == 0) cv_.notify_all();
    return Status::Ok();
  }

  void Abort() {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

 private:
  template <typename T>
  static void Add(std::vector<char>& acc, const BufferView& b) {
    T* a = reinterpret_cast<T*>(acc.data());
    const T* x = static_cast<const T*>(b.data);
    for (size_t i = 0; i < b.count; ++i) a[i] += x[i];
  }

  void Combine(int root) {
    result_.assign(posted_[0].size(), {});
    for (size_t i = 0; i < posted_[0].size(); ++i) {
      const BufferView& first = posted_[root < 0 ? 0 : root][i];
      result_[i].assign(static_cast<char*>(first.data), static_cast<char*>(first.data) + first.bytes());
      if (root >= 0) continue;
      for (int r = 1; r < size_; ++r) {
        switch (first.dtype) {
          case DataType::kFloat32: Add<float>(result_[i], posted_[r][i]); break;
          case DataType::kFloat64: Add<double>(result_[i], posted_[r][i]); break;
          case DataType::kInt64: Add<int64_t>(result_[i], posted_[r][i]); break;
          case DataType::kUInt8: Add<uint8_t>(result_[i], posted_[r][i]); break;
        }
      }
    }
  }

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<BufferView>> posted_;
  std::vector<std::vector<char>> result_;
  int arrived_ = 0;
  int departing_ = 0;
  int64_t round_ = 0;
  bool broken_ = false;
};

namespace {

std::shared_ptr<FakeWorld> JoinWorld(const std::string& key, int size) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<FakeWorld>> worlds;
  std::lock_guard<std::mutex> lock(mu);
  auto& weak = worlds[key + "#" + std::to_string(size)];
  auto world = weak.lock();
  if (!world) {
    world = std::make_shared<FakeWorld>(size);
    weak = world;
  }
  return world;
}

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeWorld> world, int rank, int size, std::chrono::milliseconds timeout)
      : world_(std::move(world)), rank_(rank), size_(size), timeout_(timeout) {}
  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  std::string_view Backend() const override { return "fake"; }
  Status AllReduceSum(std::span<const BufferView> buffers) override {
    return world_->Run(rank_, {buffers.begin(), buffers.end()}, -1, timeout_);
  }
  Status Broadcast(BufferView buffer, int root) override {
    if (root < 0 || root >= size_) return Status::InvalidArgument("fake broadcast: root " + std::to_string(root));
    return world_->Run(rank_, {buffer}, root, timeout_);
  }
  void Abort() override { world_->Abort(); }

 private:
  std::shared_ptr<FakeWorld> world_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<Communicator> CreateFakeCommunicator(const std::string& key, int rank, int size,
                                                     std::chrono::milliseconds timeout) {
  return std::make_unique<FakeCommunicator>(JoinWorld(key, size), rank, size, timeout);
}

}  // namespace aryl
