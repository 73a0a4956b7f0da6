// Registers the "nccl" backend with aryl_runtime (comm/registry.h) when the
// objects of aryl_runtime_nccl are linked into a program.
#include "comm/nccl/nccl_communicator.h"
#include "comm/registry.h"

namespace aryl {
namespace {

[[maybe_unused]] const bool kNcclRegistered =
    RegisterCommunicatorBackend("nccl", CommunicatorBackend{&CreateNcclCommunicator, &ShrinkNcclCommunicator});

}  // namespace
}  // namespace aryl
