// The state of NcclDouble (nccl_double.h), shared by its NCCL half
// (nccl_double.cc) and its CUDA half (nccl_double_cuda.cc).
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "nccl_double.h"

namespace aryl::testing {

struct NcclDouble::Op {
  enum Kind { kCopy, kAllReduce, kBroadcast } kind = kCopy;
  void* dst = nullptr;  // copy: dst <- src; collectives: in place on dst
  const void* src = nullptr;
  std::size_t bytes = 0;
  std::size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
  Group* group = nullptr;
  long seq = 0;
  int rank = 0;
  Stream* stream = nullptr;
  std::shared_ptr<std::vector<char>> staged;  // a copy from host memory, read at the call
};

struct NcclDouble::Stream {
  int device = 0;
  std::deque<Op> queue;
  long ordered_epoch = 0;  // the producer epoch this stream waited for
  Comm* owner = nullptr;   // the communicator that last launched here
};

struct NcclDouble::Group {
  int nranks = 0;
  int joined = 0;
  bool root_live = false;
  bool dead = false;  // a member died or aborted
  std::vector<Comm*> members;
  std::map<long, std::vector<Op*>> heads;  // seq -> the ops heading their streams
  std::map<long, bool> done;
  std::vector<int> shrink_excluded;
  std::vector<std::pair<int, NcclComm*>> shrink_cells;  // parent rank, where the child goes
};

struct NcclDouble::Comm {
  Group* group = nullptr;
  int rank = 0;
  int device = 0;
  NcclResult state = NcclResult::kInProgress;
  bool dead = false;
  bool initializing = false;
  bool finalizing = false;
  bool shrinking = false;
  bool shrink_fails = false;      // FailNextShrink(): the parent ends in an error
  Comm* shrink_parent = nullptr;  // a child: its parent, until that is queried again
  Comm* shrink_child = nullptr;   // a parent: its child, once written
  bool killed = false;            // its process was killed (NcclDouble::Kill)
  int ready_countdown = 0;        // a child: polls until it is ready
  std::atomic<int> inside{0};
  std::vector<Op> unlaunched;  // a group's kernels, not on the stream yet
  int launch_countdown = 0;
  long seq = 0;
};

// The device the calling thread selected (cudaSetDevice is per thread).
inline thread_local int double_current_device = 0;

}  // namespace aryl::testing
