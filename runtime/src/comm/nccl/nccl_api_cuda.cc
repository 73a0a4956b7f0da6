// NcclApi over NCCL (>= 2.27: ncclCommShrink) and the CUDA runtime: one line
// per call, no logic beyond translating types (the state machine is in
// nccl_communicator.cc, where the test double can reach it).
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "comm/nccl/nccl_api.h"

static_assert(sizeof(aryl::NcclUniqueId::bytes) == NCCL_UNIQUE_ID_BYTES);
static_assert(int(ncclInProgress) == int(aryl::NcclResult::kInProgress));
static_assert(int(ncclRemoteError) == int(aryl::NcclResult::kRemoteError));

namespace aryl {
namespace {

ncclComm_t C(NcclComm c) { return reinterpret_cast<ncclComm_t>(c); }
cudaStream_t S(CudaStream s) { return reinterpret_cast<cudaStream_t>(s); }
cudaEvent_t E(CudaEvent e) { return reinterpret_cast<cudaEvent_t>(e); }
NcclResult R(ncclResult_t r) { return static_cast<NcclResult>(r); }

// Errors after which the context is unusable until the process exits (CUDA
// programming guide, "Error Checking": sticky errors).
bool Sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
      return true;
    default:
      return false;
  }
}

CudaResult Cuda(cudaError_t e) {
  if (e == cudaSuccess) return {};
  if (e == cudaErrorNotReady) return {CudaResult::kNotReady, cudaGetErrorString(e)};
  if (!Sticky(e)) cudaGetLastError();  // a non-sticky error is cleared by reading it
  return {Sticky(e) ? CudaResult::kSticky : CudaResult::kError, cudaGetErrorString(e)};
}

ncclDataType_t ToNccl(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt8:
      return ncclUint8;
  }
  return ncclUint8;
}

ncclConfig_t NonBlocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

class CudaNccl final : public NcclApi {
 public:
  NcclResult GetUniqueId(NcclUniqueId* id) override {
    ncclUniqueId raw;
    ncclResult_t r = ncclGetUniqueId(&raw);
    std::memcpy(id->bytes, raw.internal, sizeof(id->bytes));
    return R(r);
  }
  NcclResult CommInitRank(NcclComm* comm, int nranks, const NcclUniqueId& id, int rank) override {
    ncclUniqueId raw;
    std::memcpy(raw.internal, id.bytes, sizeof(id.bytes));
    ncclConfig_t config = NonBlocking();
    return R(
        ncclCommInitRankConfig(reinterpret_cast<ncclComm_t*>(comm), nranks, raw, rank, &config));
  }
  NcclResult CommShrink(NcclComm parent, std::span<const int> excluded, NcclComm* child) override {
    ncclConfig_t config = NonBlocking();
    return R(ncclCommShrink(C(parent), const_cast<int*>(excluded.data()), int(excluded.size()),
                            reinterpret_cast<ncclComm_t*>(child), &config, NCCL_SHRINK_DEFAULT));
  }
  NcclResult CommGetAsyncError(NcclComm comm, NcclResult* async) override {
    ncclResult_t a = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(C(comm), &a);
    *async = R(a);
    return R(r);
  }
  NcclResult CommFinalize(NcclComm comm) override { return R(ncclCommFinalize(C(comm))); }
  NcclResult CommDestroy(NcclComm comm) override { return R(ncclCommDestroy(C(comm))); }
  NcclResult CommAbort(NcclComm comm) override { return R(ncclCommAbort(C(comm))); }
  NcclResult CommUserRank(NcclComm comm, int* rank) override {
    return R(ncclCommUserRank(C(comm), rank));
  }
  NcclResult CommCount(NcclComm comm, int* count) override {
    return R(ncclCommCount(C(comm), count));
  }
  NcclResult CommCuDevice(NcclComm comm, int* device) override {
    return R(ncclCommCuDevice(C(comm), device));
  }
  NcclResult GroupStart() override { return R(ncclGroupStart()); }
  NcclResult GroupEnd() override { return R(ncclGroupEnd()); }
  NcclResult AllReduceSum(void* data, std::size_t count, DataType dtype, NcclComm comm,
                          CudaStream stream) override {
    return R(ncclAllReduce(data, data, count, ToNccl(dtype), ncclSum, C(comm), S(stream)));
  }
  NcclResult Broadcast(void* data, std::size_t count, DataType dtype, int root, NcclComm comm,
                       CudaStream stream) override {
    return R(ncclBroadcast(data, data, count, ToNccl(dtype), root, C(comm), S(stream)));
  }
  std::string ErrorString(NcclResult r) override {
    return ncclGetErrorString(static_cast<ncclResult_t>(r));
  }

  CudaResult DeviceCount(int* count) override { return Cuda(cudaGetDeviceCount(count)); }
  CudaResult SetDevice(int device) override { return Cuda(cudaSetDevice(device)); }
  CudaResult PointerDevice(const void* p, int* device) override {
    cudaPointerAttributes attr{};
    if (CudaResult r = Cuda(cudaPointerGetAttributes(&attr, p)); !r.ok()) return r;
    bool on_device = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
    *device = on_device ? attr.device : -1;
    return {};
  }
  CudaResult StreamCreate(CudaStream* stream) override {
    // Non-blocking: NCCL's kernels must not wait on unrelated work of the
    // legacy stream; order with the producer comes from an event instead.
    return Cuda(
        cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(stream), cudaStreamNonBlocking));
  }
  CudaResult StreamDestroy(CudaStream stream) override {
    return Cuda(cudaStreamDestroy(S(stream)));
  }
  CudaResult StreamQuery(CudaStream stream) override { return Cuda(cudaStreamQuery(S(stream))); }
  CudaResult EventCreate(CudaEvent* event) override {
    return Cuda(
        cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(event), cudaEventDisableTiming));
  }
  CudaResult EventDestroy(CudaEvent event) override { return Cuda(cudaEventDestroy(E(event))); }
  CudaResult RecordOnProducerStream(CudaEvent event) override {
    return Cuda(cudaEventRecord(E(event), cudaStreamLegacy));
  }
  CudaResult StreamWaitEvent(CudaStream stream, CudaEvent event) override {
    return Cuda(cudaStreamWaitEvent(S(stream), E(event), 0));
  }
  CudaResult Malloc(void** p, std::size_t bytes) override {
    return Cuda(cudaMalloc(p, bytes ? bytes : 1));
  }
  CudaResult Free(void* p) override { return Cuda(cudaFree(p)); }
  CudaResult MemcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                         CudaStream stream) override {
    auto k = kind == MemcpyKind::kHostToDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    return Cuda(cudaMemcpyAsync(dst, src, bytes, k, S(stream)));
  }
};

}  // namespace

NcclApi& CudaNcclApi() {
  static CudaNccl api;
  return api;
}

}  // namespace aryl
