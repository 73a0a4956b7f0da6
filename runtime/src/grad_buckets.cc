#include "grad_buckets.h"

#include <algorithm>
#include <string>

namespace aryl {

bool GradBuckets::SameLayout(const std::vector<at::Tensor>& parameters, int64_t slots) const {
  if (slots != slots_) return false;
  size_t i = 0;
  for (const auto& p : parameters) {
    if (!p.requires_grad()) continue;
    if (i == entries_.size() || entries_[i].param != p.unsafeGetTensorImpl() || entries_[i].numel != p.numel() ||
        p.device() != entries_[i].grad.device()) {
      return false;
    }
    ++i;
  }
  return i == entries_.size() && !buckets_.empty();
}

Status GradBuckets::Build(const std::vector<at::Tensor>& parameters, int64_t slots) {
  std::vector<const at::Tensor*> params;
  for (const auto& p : parameters) {
    if (!p.requires_grad()) continue;
    if (p.scalar_type() != torch::kFloat32) {
      return Status::InvalidArgument("AllReduceGradients: gradient " + std::to_string(params.size()) + " is " +
                                     std::string(c10::toString(p.scalar_type())) + ", want float32");
    }
    params.push_back(&p);
  }
  auto device = params.empty() ? torch::Device(torch::kCPU) : params[0]->device();
  auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  on_cpu_ = device.is_cpu();
  // Cut into buckets exactly as before: close one once it reaches bucket_bytes.
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t begin = 0, bytes = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    bytes += size_t(params[i]->numel()) * 4;
    if (bytes >= bucket_bytes_ || i + 1 == params.size()) {
      ranges.emplace_back(begin, i + 1);
      begin = i + 1;
      bytes = 0;
    }
  }
  if (ranges.empty()) ranges.emplace_back(0, 0);
  entries_.clear();
  buckets_.clear();
  views_.clear();
  for (size_t b = 0; b < ranges.size(); ++b) {
    int64_t n = 0;
    for (size_t i = ranges[b].first; i < ranges[b].second; ++i) n += params[i]->numel();
    bool last = b + 1 == ranges.size();
    auto bucket = torch::zeros({n + (last ? slots : 0)}, options);
    float* base = bucket.data_ptr<float>();
    int64_t off = 0;
    for (size_t i = ranges[b].first; i < ranges[b].second; ++i) {
      const at::Tensor& p = *params[i];
      // Holds the bucket: the .grad outlives a later layout safely.
      auto grad = torch::from_blob(base + off, p.sizes(), [keep = bucket](void*) {}, options);
      entries_.push_back({p.unsafeGetTensorImpl(), p.numel(), std::move(grad)});
      off += p.numel();
    }
    if (last) {
      last_grads_ = n;
      if (device.is_cpu()) {
        control_ = base + n;
      } else {
        host_control_ = torch::zeros({std::max<int64_t>(slots, 1)}, torch::kFloat32);
        control_ = host_control_.data_ptr<float>();
      }
    }
    views_.push_back({bucket.data_ptr(), size_t(bucket.numel()), DataType::kFloat32});
    buckets_.push_back(std::move(bucket));
  }
  slots_ = slots;
  ++layouts_;
  return Status::Ok();
}

Status GradBuckets::Prepare(const std::vector<at::Tensor>& parameters, int64_t slots) {
  if (!SameLayout(parameters, slots)) ARYL_RETURN_IF_ERROR(Build(parameters, slots));
  size_t i = 0;
  for (const auto& p : parameters) {
    if (!p.requires_grad()) continue;
    Entry& e = entries_[i++];
    at::Tensor& grad = const_cast<at::Tensor&>(p).mutable_grad();
    if (grad.defined() && grad.data_ptr() == e.grad.data_ptr()) continue;  // steady state
    if (grad.defined()) {
      e.grad.copy_(grad.reshape(e.grad.sizes()));
    } else {
      e.grad.zero_();
    }
    grad = e.grad;
  }
  std::fill(control_, control_ + slots_, 0.f);
  return Status::Ok();
}

void GradBuckets::Scale(double weight) {
  if (weight == 1.0) return;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t n = b + 1 == buckets_.size() ? last_grads_ : buckets_[b].numel();
    if (n > 0) buckets_[b].narrow(0, 0, n).mul_(weight);
  }
}

void GradBuckets::PushControl() {
  if (on_cpu_ || slots_ <= 0) return;
  buckets_.back().narrow(0, last_grads_, slots_).copy_(host_control_.narrow(0, 0, slots_));
}

void GradBuckets::PullControl() {
  if (on_cpu_ || slots_ <= 0) return;
  host_control_.narrow(0, 0, slots_).copy_(buckets_.back().narrow(0, last_grads_, slots_));
}

}  // namespace aryl
