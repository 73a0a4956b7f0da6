// Registers the "nccl" backend with aryl_runtime (comm/registry.h) when the
// objects of aryl_runtime_nccl are linked into a program: the communicator
// over NCCL and the CUDA runtime (nccl_api_cuda.cc), on the device of this
// worker's local rank.
#include <cstdlib>
#include <string>

#include "comm/nccl/nccl_communicator.h"
#include "comm/registry.h"
#include "rendezvous.h"

namespace aryl {
namespace {

// One per process, made on first use (CUDA starts only when a group is built).
NcclContext& Context() {
  static NcclContext* context = [] {
    auto* c = new NcclContext;
    c->api = &CudaNcclApi();
    int count = 0;
    if (!c->api->DeviceCount(&count).ok()) count = 0;
    // LOCAL_RANK: aryl-rt-launch and torchrun; a worker that the agent pins
    // with CUDA_VISIBLE_DEVICES sees one device.
    const char* local = std::getenv("LOCAL_RANK");
    c->device = SelectCudaDevice(local ? std::atoi(local) : 0, count);
    return c;
  }();
  return *context;
}

// The job's store, where the communicator publishes and reads its ids.
class JobIdStore final : public NcclIdStore {
 public:
  explicit JobIdStore(JobStore& store) : store_(store) {}
  Status Set(const std::string& key, const std::string& value) override {
    return store_.Set(key, value);
  }
  Result<std::string> Wait(const std::string& key, std::chrono::milliseconds timeout) override {
    return store_.Wait(key, timeout);
  }

 private:
  JobStore& store_;
};

Result<std::unique_ptr<Communicator>> Create(JobStore& store, const std::string& prefix, int rank,
                                             int size, std::chrono::milliseconds timeout) {
  JobIdStore ids(store);
  return CreateNcclCommunicator(Context(), ids, prefix, rank, size, timeout);
}

[[maybe_unused]] const bool kNcclRegistered =
    RegisterCommunicatorBackend("nccl", CommunicatorBackend{&Create, &ShrinkNcclCommunicator});

}  // namespace
}  // namespace aryl
