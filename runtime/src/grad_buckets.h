// GradBuckets: the gradients of one parameter list kept in flat buckets that
// are reused from step to step, so that a step's all-reduce needs no
// concatenation, no copy back and no allocation (the Python API's fixed cost
// per step; see docs/performance.md).
//
//  1. Prepare(parameters, slots) lays the buckets out when the parameter list
//     (which tensors, their sizes, dtype and device) or the number of control
//     slots differs from the last call: consecutive gradients in parameter
//     order, a new bucket after every ~bucket_bytes (the same cut on every
//     rank), `slots` floats at the end of the last bucket.
//  2. It then makes every parameter's .grad a tensor over its range of a
//     bucket. A .grad that is elsewhere (the first step, zero_grad with
//     set_to_none, a new layout) is copied in once, an undefined one zeroed;
//     after that autograd accumulates into the bucket in place (it adds into
//     a defined .grad) and zero_grad() zeroes it in place, so steady state
//     touches nothing. The .grad tensors are made with from_blob holding the
//     bucket alive, not as autograd views: libtorch's Optimizer::zero_grad
//     calls detach_(), which views refuse.
//  3. control() is where the caller writes the control slots before the
//     all-reduce and reads the agreed values after (host memory: for a device
//     bucket, PushControl/PullControl copy them).
//
// Thread safety: not thread-safe; used by the training thread only.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "aryl/communicator.h"
#include "aryl/status.h"

namespace aryl {

class GradBuckets {
 public:
  explicit GradBuckets(std::size_t bucket_bytes) : bucket_bytes_(bucket_bytes) {}

  // InvalidArgument for a gradient that is not float32 (names its index).
  Status Prepare(const std::vector<at::Tensor>& parameters, int64_t slots);
  // Multiplies the gradients (not the control slots) by `weight`.
  void Scale(double weight);
  float* control() { return control_; }
  void PushControl();  // host slots -> bucket (device buckets only)
  void PullControl();  // bucket -> host slots (device buckets only)
  std::span<const BufferView> views() const { return views_; }
  // How many times the layout was built (tests: steady state builds it once).
  int64_t layouts() const { return layouts_; }

 private:
  struct Entry {
    c10::TensorImpl* param = nullptr;
    int64_t numel = 0;
    at::Tensor grad;  // over the bucket
  };
  bool SameLayout(const std::vector<at::Tensor>& parameters, int64_t slots) const;
  Status Build(const std::vector<at::Tensor>& parameters, int64_t slots);

  std::size_t bucket_bytes_;
  std::vector<Entry> entries_;
  std::vector<at::Tensor> buckets_;
  std::vector<BufferView> views_;
  int64_t slots_ = -1;
  int64_t last_grads_ = 0;  // gradient elements in the last bucket
  at::Tensor host_control_;  // device buckets: the slots in host memory
  float* control_ = nullptr;
  bool on_cpu_ = true;
  int64_t layouts_ = 0;
};

}  // namespace aryl
