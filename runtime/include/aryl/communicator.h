// Communicator: the collectives the elastic runtime needs, one interface for
// every backend (runtime/src/comm/<backend>/): Gloo over c10d on CPU, NCCL on
// GPU, and an in-process fake for tests.
//
// Buffers are raw pointers (host memory for gloo/fake, device memory for nccl),
// so this header needs neither torch, Gloo, CUDA nor NCCL headers.
//
// Errors: every call returns within the communicator's timeout. A peer that
// died or timed out yields a retryable Status (IoError, Timeout, Unavailable):
// "rebuild the group". A wrong argument yields InvalidArgument (fatal).
//
// Thread safety: one thread issues collectives; Abort() may be called from any
// thread and makes pending and later calls fail fast.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "aryl/status.h"

namespace aryl {

enum class DataType : int { kFloat32, kFloat64, kInt64, kUInt8 };
std::size_t DataTypeSize(DataType type);
std::string_view DataTypeName(DataType type);

// A contiguous array of `count` elements of `dtype`, not owned.
struct BufferView {
  void* data = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::kFloat32;
  std::size_t bytes() const { return count * DataTypeSize(dtype); }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int Rank() const = 0;
  virtual int Size() const = 0;
  virtual std::string_view Backend() const = 0;

  // Elementwise sum across ranks, in place, of every buffer (a bucket each;
  // backends may reduce them concurrently). All ranks pass the same shapes.
  virtual Status AllReduceSum(std::span<const BufferView> buffers) = 0;
  // Copies `root`'s buffer into every other rank's buffer (same size everywhere).
  virtual Status Broadcast(BufferView buffer, int root) = 0;
  // Makes pending and future calls fail fast. Idempotent.
  virtual void Abort() = 0;
};

}  // namespace aryl
