// NcclDouble's CUDA half: devices, streams that run when queried, events
// from the producer's stream, and host memory standing in for device memory.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "nccl_double.h"
#include "nccl_double_state.h"

namespace aryl::testing {

namespace {

template <typename T, typename OpPtr>
void SumInto(const std::vector<OpPtr>& ops, std::size_t count) {
  std::vector<T> total(count, T(0));
  for (OpPtr op : ops) {
    const T* p = static_cast<const T*>(op->dst);
    for (std::size_t i = 0; i < count; ++i) total[i] += p[i];
  }
  for (OpPtr op : ops) std::memcpy(op->dst, total.data(), count * sizeof(T));
}

}  // namespace

CudaResult NcclDouble::DeviceCount(int* count) {
  *count = devices_;
  return {};
}

CudaResult NcclDouble::SetDevice(int device) {
  if (device < 0 || device >= devices_) return {CudaResult::kError, "invalid device ordinal"};
  double_current_device = device;
  return {};
}

CudaResult NcclDouble::PointerDevice(const void* p, int* device) {
  std::lock_guard lock(mu_);
  *device = DeviceOfLocked(p);
  return {};
}

int NcclDouble::DeviceOfLocked(const void* p) const {
  auto it = device_memory_.upper_bound(static_cast<const char*>(p));
  if (it == device_memory_.begin()) return -1;
  --it;
  return static_cast<const char*>(p) < it->first + std::max<std::size_t>(it->second.first, 1)
             ? it->second.second
             : -1;
}

CudaResult NcclDouble::StreamCreate(CudaStream* stream) {
  std::lock_guard lock(mu_);
  auto& s = streams_.emplace_back(std::make_unique<Stream>());
  s->device = double_current_device;
  *stream = reinterpret_cast<CudaStream>(s.get());
  return {};
}

CudaResult NcclDouble::StreamDestroy(CudaStream) { return {}; }

bool NcclDouble::Uses(const Stream& s, const void* p) const {
  auto it = device_memory_.find(static_cast<const char*>(p));
  std::size_t bytes = it == device_memory_.end() ? 1 : std::max<std::size_t>(it->second.first, 1);
  auto within = [&](const void* q) {
    return q >= p && static_cast<const char*>(q) < static_cast<const char*>(p) + bytes;
  };
  return std::any_of(s.queue.begin(), s.queue.end(),
                     [&](const Op& op) { return within(op.dst) || within(op.src); });
}

void NcclDouble::RunStream(Stream& s) {
  while (!s.queue.empty()) {
    Op& op = s.queue.front();
    if (op.kind == Op::kCopy) {
      std::memcpy(op.dst, op.src, op.bytes);
      s.queue.pop_front();
      continue;
    }
    Group& g = *op.group;
    if (g.done[op.seq]) {
      s.queue.pop_front();
      continue;
    }
    auto& heads = g.heads[op.seq];
    if (std::find(heads.begin(), heads.end(), &op) == heads.end()) heads.push_back(&op);
    if (int(heads.size()) < g.nranks) return;  // the kernel waits for its peers
    if (op.kind == Op::kBroadcast) {
      auto root =
          std::find_if(heads.begin(), heads.end(), [&](Op* h) { return h->rank == op.root; });
      std::size_t bytes = op.count * DataTypeSize(op.dtype);
      for (Op* h : heads) {
        if (h != *root) std::memcpy(h->dst, (*root)->dst, bytes);
      }
    } else {
      switch (op.dtype) {
        case DataType::kFloat32:
          SumInto<float>(heads, op.count);
          break;
        case DataType::kFloat64:
          SumInto<double>(heads, op.count);
          break;
        case DataType::kInt64:
          SumInto<int64_t>(heads, op.count);
          break;
        case DataType::kUInt8:
          SumInto<uint8_t>(heads, op.count);
          break;
      }
    }
    g.done[op.seq] = true;
    g.heads.erase(op.seq);
    s.queue.pop_front();
  }
}

CudaResult NcclDouble::StreamQuery(CudaStream stream) {
  std::lock_guard lock(mu_);
  if (sticky_) return {CudaResult::kSticky, "an illegal memory access was encountered"};
  auto* s = reinterpret_cast<Stream*>(stream);
  if (s->owner && !s->owner->unlaunched.empty()) ++breaches_.stream_use_in_progress;
  RunStream(*s);
  return s->queue.empty() ? CudaResult{} : CudaResult{CudaResult::kNotReady, "device not ready"};
}

CudaResult NcclDouble::EventCreate(CudaEvent* event) {
  std::lock_guard lock(mu_);
  *event = reinterpret_cast<CudaEvent>(events_.emplace_back(std::make_unique<Event>()).get());
  return {};
}

CudaResult NcclDouble::EventDestroy(CudaEvent) { return {}; }

CudaResult NcclDouble::RecordOnProducerStream(CudaEvent event) {
  std::lock_guard lock(mu_);
  reinterpret_cast<Event*>(event)->epoch = producer_epoch_[std::size_t(double_current_device)];
  return {};
}

CudaResult NcclDouble::StreamWaitEvent(CudaStream stream, CudaEvent event) {
  std::lock_guard lock(mu_);
  auto* s = reinterpret_cast<Stream*>(stream);
  s->ordered_epoch = std::max(s->ordered_epoch, reinterpret_cast<Event*>(event)->epoch);
  return {};
}

CudaResult NcclDouble::Malloc(void** p, std::size_t bytes) {
  *p = DeviceAlloc(double_current_device, bytes);
  return {};
}

CudaResult NcclDouble::Free(void* p) {
  std::lock_guard lock(mu_);
  for (const auto& s : streams_) {
    if (Uses(*s, p)) ++breaches_.free_while_queued;
  }
  auto it = device_memory_.find(static_cast<const char*>(p));
  if (it == device_memory_.end()) return {CudaResult::kError, "invalid device pointer"};
  delete[] it->first;
  device_memory_.erase(it);
  return {};
}

CudaResult NcclDouble::MemcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                                   CudaStream stream) {
  auto* s = reinterpret_cast<Stream*>(stream);
  if (kind == MemcpyKind::kHostToDevice) {  // the host memory is read at the call
    std::lock_guard lock(mu_);
    if (s->owner && !s->owner->unlaunched.empty()) ++breaches_.stream_use_in_progress;
    Op op;
    op.dst = dst;
    op.bytes = bytes;
    op.staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                    static_cast<const char*>(src) + bytes);
    op.src = op.staged->data();
    s->queue.push_back(op);
    return {};
  }
  // To pageable host memory: the caller waits for the stream's earlier work (rule 9).
  auto t0 = std::chrono::steady_clock::now();
  for (bool first = true;; first = false) {
    {
      std::lock_guard lock(mu_);
      if (first && s->owner && !s->owner->unlaunched.empty()) ++breaches_.stream_use_in_progress;
      RunStream(*s);
      if (s->queue.empty()) {
        std::memcpy(dst, src, bytes);
        return {};
      }
      if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(kBlockedCopyLimitMs)) {
        ++breaches_.blocked_host_copy;  // on a GPU: blocked for good
        return {CudaResult::kError, "copy to the host blocked behind a collective that never ends"};
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace aryl::testing
