#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <thread>

#include "rendezvous.h"

namespace aryl {
namespace {

using Clock = std::chrono::steady_clock;

std::string Hex(const void* data, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    uint8_t b = static_cast<const uint8_t*>(data)[i];
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

bool Unhex(const std::string& text, void* data, size_t n) {
  if (text.size() != 2 * n) return false;
  auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(data)[i] = uint8_t(nib(text[2 * i]) << 4 | nib(text[2 * i + 1]));
  return true;
}

ncclDataType_t ToNccl(DataType t) {
  switch (t) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUInt8: return ncclUint8;
  }
  return ncclUint8;
}

Status NcclError(ncclResult_t r, std::string_view op) {
  std::string msg = "nccl " + std::string(op) + ": " + ncclGetErrorString(r);
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) return Status::InvalidArgument(msg);
  return Status::IoError(msg);  // remote error, system error: rebuild the group
}

// Polls until the communicator is no longer in progress (ncclInProgress).
Status WaitComm(ncclComm_t comm, Clock::time_point deadline, std::string_view op) {
  while (true) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    if (r != ncclSuccess) return NcclError(r, op);
    if (async == ncclSuccess) return Status::Ok();
    if (async != ncclInProgress) return NcclError(async, op);
    if (Clock::now() > deadline) return Status::Timeout("nccl " + std::string(op) + ": timed out");
    std::this_thread::yield();
  }
}

// The runtime's small control buffers (agreement slots, state metadata) live
// in host memory; NCCL needs device memory. Host buffers are staged through a
// temporary device copy; device buffers pass through untouched.
struct Staging {
  struct Copy {
    BufferView host;
    void* device;
  };
  std::vector<Copy> copies;
  Status status;

  BufferView ToDevice(const BufferView& b) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, b.data) == cudaSuccess &&
        (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)) {
      return b;
    }
    cudaGetLastError();  // clear the error from probing a plain host pointer
    void* d = nullptr;
    if (cudaMalloc(&d, b.bytes() ? b.bytes() : 1) != cudaSuccess ||
        cudaMemcpy(d, b.data, b.bytes(), cudaMemcpyHostToDevice) != cudaSuccess) {
      status = Status::Unavailable("nccl: staging " + std::to_string(b.bytes()) + " bytes to the device failed");
      if (d) cudaFree(d);
      return b;
    }
    copies.push_back({b, d});
    return {d, b.count, b.dtype};
  }
  Status Back() {
    for (auto& c : copies) {
      if (cudaMemcpy(c.host.data, c.device, c.host.bytes(), cudaMemcpyDeviceToHost) != cudaSuccess) {
        return Status::IoError("nccl: copying a staged buffer back to the host failed");
      }
    }
    return Status::Ok();
  }
  ~Staging() {
    for (auto& c : copies) cudaFree(c.device);
  }
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int rank, int size, std::chrono::milliseconds timeout)
      : comm_(comm), stream_(stream), rank_(rank), size_(size), timeout_(timeout) {}
  ~NcclCommunicator() override {
    if (comm_) {
      if (aborted_) {
        ncclCommAbort(comm_);
      } else {
        ncclCommFinalize(comm_);
        ncclCommDestroy(comm_);
      }
    }
    if (stream_) cudaStreamDestroy(stream_);
  }

  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  std::string_view Backend() const override { return "nccl"; }

  Status AllReduceSum(std::span<const BufferView> in) override {
    if (aborted_) return Status::Unavailable("nccl: communicator aborted");
    Staging staging;
    std::vector<BufferView> buffers;
    for (const auto& b : in) buffers.push_back(staging.ToDevice(b));
    if (!staging.status.ok()) return staging.status;
    ncclGroupStart();
    for (const auto& b : buffers) {
      ncclResult_t r = ncclAllReduce(b.data, b.data, b.count, ToNccl(b.dtype), ncclSum, comm_, stream_);
      if (r != ncclSuccess && r != ncclInProgress) {
        ncclGroupEnd();
        return Fail(NcclError(r, "allreduce"));
      }
    }
    ncclResult_t r = ncclGroupEnd();
    if (r != ncclSuccess && r != ncclInProgress) return Fail(NcclError(r, "group end"));
    ARYL_RETURN_IF_ERROR(WaitStream("allreduce"));
    return staging.Back();
  }

  Status Broadcast(BufferView host_or_device, int root) override {
    if (aborted_) return Status::Unavailable("nccl: communicator aborted");
    Staging staging;
    BufferView buffer = staging.ToDevice(host_or_device);
    if (!staging.status.ok()) return staging.status;
    ncclResult_t r = ncclBroadcast(buffer.data, buffer.data, buffer.count, ToNccl(buffer.dtype), root, comm_, stream_);
    if (r != ncclSuccess && r != ncclInProgress) return Fail(NcclError(r, "broadcast"));
    ARYL_RETURN_IF_ERROR(WaitStream("broadcast"));
    return staging.Back();
  }

  void Abort() override {
    if (!aborted_.exchange(true) && comm_) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }

 private:
  Status Fail(Status s) {
    Abort();
    return s;
  }

  Status WaitStream(std::string_view op) {
    auto deadline = Clock::now() + timeout_;
    while (true) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return Status::Ok();
      if (q != cudaErrorNotReady) return Fail(Status::IoError("cuda stream: " + std::string(cudaGetErrorString(q))));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) return Fail(NcclError(async, op));
      if (Clock::now() > deadline) {
        return Fail(Status::Timeout("nccl " + std::string(op) + ": timed out after " +
                                    std::to_string(timeout_.count()) + " ms"));
      }
      std::this_thread::yield();
    }
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
};

ncclConfig_t NonBlocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(JobStore& store, const std::string& prefix, int rank,
                                                             int size, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return NcclError(r, "get unique id");
    ARYL_RETURN_IF_ERROR(store.Set(prefix + "/id", Hex(&id, sizeof(id))));
  } else {
    ARYL_ASSIGN_OR_RETURN(std::string text, store.Wait(prefix + "/id", timeout));
    if (!Unhex(text, &id, sizeof(id))) return Status::Corruption("nccl unique id at " + prefix + "/id is malformed");
  }
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    return Status::Unavailable("cudaStreamCreate: " + std::string(cudaGetErrorString(e)));
  }
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NonBlocking();
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    cudaStreamDestroy(stream);
    return NcclError(r, "init rank");
  }
  if (Status s = WaitComm(comm, deadline, "init rank"); !s.ok()) {
    ncclCommAbort(comm);
    cudaStreamDestroy(stream);
    return s;
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, stream, rank, size, timeout));
}

Result<std::unique_ptr<Communicator>> ShrinkNcclCommunicator(Communicator* parent, const std::vector<int>& excluded,
                                                             std::chrono::milliseconds timeout) {
  auto* p = dynamic_cast<NcclCommunicator*>(parent);
  if (!p || !p->comm()) return Status::InvalidArgument("ShrinkNcclCommunicator: parent is not a live NCCL communicator");
  auto deadline = Clock::now() + timeout;
  std::vector<int> ex(excluded);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NonBlocking();
  ncclResult_t r = ncclCommShrink(p->comm(), ex.data(), int(ex.size()), &comm, &config, NCCL_SHRINK_DEFAULT);
  if (r != ncclSuccess && r != ncclInProgress) return NcclError(r, "shrink");
  ARYL_RETURN_IF_ERROR(WaitComm(comm, deadline, "shrink"));
  int rank = 0, size = 0;
  ncclCommUserRank(comm, &rank);
  ncclCommCount(comm, &size);
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    ncclCommAbort(comm);
    return Status::Unavailable("cudaStreamCreate: " + std::string(cudaGetErrorString(e)));
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, stream, rank, size, timeout));
}

}  // namespace aryl
