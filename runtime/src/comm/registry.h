// Collective backends that live outside aryl_runtime register here.
//
// aryl_runtime links neither CUDA nor NCCL: the NCCL communicator is its own
// library, aryl_runtime_nccl (an object library, Aryl::runtime_nccl once
// installed; find_package(Aryl COMPONENTS nccl)). Its objects are linked into
// the program that asks for it and register the "nccl" backend before main()
// runs; Runtime picks a backend by name (ARYL_BACKEND) at run time. A program
// that does not link it has no libnccl/libcudart dependency and gets a clear
// InvalidArgument when ARYL_BACKEND names it.
//
// Thread safety: registration happens during static initialization; lookups
// afterwards only read.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/communicator.h"
#include "aryl/result.h"

namespace aryl {

class JobStore;

struct CommunicatorBackend {
  // A fresh group of `size` ranks; keys live under "<job>/<prefix>/" in `store`.
  Result<std::unique_ptr<Communicator>> (*create)(JobStore& store, const std::string& prefix, int rank, int size,
                                                  std::chrono::milliseconds timeout) = nullptr;
  // Optional: the group without the parent's `excluded` ranks, built from the
  // live parent (a planned shrink). Null when the backend cannot.
  Result<std::unique_ptr<Communicator>> (*shrink)(Communicator* parent, const std::vector<int>& excluded,
                                                  std::chrono::milliseconds timeout) = nullptr;
};

// Returns true so that a registration can initialize a namespace-scope constant.
bool RegisterCommunicatorBackend(std::string name, CommunicatorBackend backend);
// Null when no linked library registered `name`.
const CommunicatorBackend* FindCommunicatorBackend(std::string_view name);

}  // namespace aryl
