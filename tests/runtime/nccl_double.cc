// NcclDouble's NCCL half: groups, communicators, their non-blocking states.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "nccl_double.h"
#include "nccl_double_state.h"

namespace aryl::testing {

namespace {

// Group calls are per thread (nccl_api.h rule 8): the depth and the
// communicators this thread queued work on since its outermost GroupStart.
thread_local int group_depth = 0;
thread_local std::vector<void*> group_comms;

NcclComm H(void* c) { return reinterpret_cast<NcclComm>(c); }

}  // namespace

NcclDouble::NcclDouble(int devices, int launch_polls)
    : devices_(devices), launch_polls_(launch_polls), producer_epoch_(std::size_t(devices), 0) {
  double_current_device = 0;
}

NcclDouble::~NcclDouble() {
  for (auto& [p, info] : device_memory_) delete[] p;
}

void NcclDouble::ProducerLaunched(int device) {
  std::lock_guard lock(mu_);
  ++producer_epoch_[std::size_t(device)];
}

void NcclDouble::InjectStickyError() {
  std::lock_guard lock(mu_);
  sticky_ = true;
}

void NcclDouble::Kill(int device, KillMode mode) {
  std::lock_guard lock(mu_);
  killed_[device] = mode;
  for (auto& c : comms_) {
    if (c->device != device || c->dead) continue;
    c->dead = c->killed = true;
    // A closed socket is what the peers can see, and only with kSocketError.
    if (mode == KillMode::kSocketError) c->group->dead = true;
  }
  for (auto& s : streams_) {
    if (s->device != device) continue;
    for (Op& op : s->queue) {  // its kernels went with the process
      if (!op.group) continue;
      auto& heads = op.group->heads[op.seq];
      heads.erase(std::remove(heads.begin(), heads.end(), &op), heads.end());
    }
    s->queue.clear();
  }
}

void NcclDouble::FailNextShrink() {
  std::lock_guard lock(mu_);
  fail_next_shrink_ = true;
}

void* NcclDouble::DeviceAlloc(int device, std::size_t bytes) {
  std::lock_guard lock(mu_);
  char* p = new char[bytes ? bytes : 1]();
  device_memory_[p] = {bytes, device};
  return p;
}

NcclDouble::Breaches NcclDouble::breaches() const {
  std::lock_guard lock(mu_);
  return breaches_;
}

int NcclDouble::LiveComms() const {
  std::lock_guard lock(mu_);
  return int(std::count_if(comms_.begin(), comms_.end(), [](const auto& c) { return !c->dead; }));
}

int NcclDouble::LiveRoots() const {
  std::lock_guard lock(mu_);
  return int(
      std::count_if(groups_.begin(), groups_.end(), [](const auto& g) { return g->root_live; }));
}

int NcclDouble::LiveDeviceBuffers() const {
  std::lock_guard lock(mu_);
  return int(device_memory_.size());
}

int NcclDouble::DeviceOf(NcclComm comm) const {
  std::lock_guard lock(mu_);
  return reinterpret_cast<Comm*>(comm)->device;
}

NcclDouble::Comm* NcclDouble::Live(NcclComm handle) {
  auto* c = reinterpret_cast<Comm*>(handle);
  bool known =
      std::any_of(comms_.begin(), comms_.end(), [&](const auto& p) { return p.get() == c; });
  if (known && c->killed) return nullptr;  // the test tearing down a "dead process"
  if (!known || c->dead) {
    ++breaches_.call_on_dead_handle;
    return nullptr;
  }
  return c;
}

NcclResult NcclDouble::GetUniqueId(NcclUniqueId* id) {
  std::lock_guard lock(mu_);
  *id = NcclUniqueId{};
  long n = next_id_++;
  std::memcpy(id->bytes, &n, sizeof(n));
  auto& g = groups_.emplace_back(std::make_unique<Group>());
  g->root_live = true;
  by_id_[std::string(reinterpret_cast<const char*>(id->bytes), sizeof(id->bytes))] = g.get();
  return NcclResult::kSuccess;
}

NcclResult NcclDouble::CommInitRank(NcclComm* comm, int nranks, const NcclUniqueId& id, int rank) {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(std::string(reinterpret_cast<const char*>(id.bytes), sizeof(id.bytes)));
  if (it == by_id_.end() || rank < 0 || rank >= nranks) return NcclResult::kInvalidArgument;
  Group* g = it->second;
  if (g->nranks == 0) {
    g->nranks = nranks;
    g->members.assign(std::size_t(nranks), nullptr);
  }
  auto& c = comms_.emplace_back(std::make_unique<Comm>());
  c->group = g;
  c->rank = rank;
  c->device = double_current_device;
  c->initializing = true;
  g->members[std::size_t(rank)] = c.get();
  ++g->joined;
  *comm = H(c.get());
  return NcclResult::kInProgress;
}

NcclResult NcclDouble::CommShrink(NcclComm parent, std::span<const int> excluded, NcclComm* child) {
  std::lock_guard lock(mu_);
  *child = nullptr;  // until the child is ready
  Comm* c = Live(parent);
  if (!c) return NcclResult::kInvalidArgument;
  if (c->state != NcclResult::kSuccess) return NcclResult::kInvalidUsage;
  Group& g = *c->group;
  g.shrink_excluded.assign(excluded.begin(), excluded.end());
  g.shrink_cells.push_back({c->rank, child});
  c->shrinking = true;
  c->state = NcclResult::kInProgress;
  return NcclResult::kInProgress;
}

void NcclDouble::Progress(Comm& c) {
  Group& g = *c.group;
  if (c.initializing && g.joined == g.nranks) {
    c.initializing = false;
    c.state = NcclResult::kSuccess;
    g.root_live = false;  // every rank has connected to the root
    for (Comm* m : g.members) {
      for (Comm* o : g.members) {
        if (m != o && m && o && m->device == o->device) c.state = NcclResult::kInvalidUsage;
      }
    }
  }
  // Kernels reach the stream some polls after their GroupEnd, and never
  // before it (a group another thread has not ended stays put).
  if (!c.unlaunched.empty() && c.launch_countdown > 0 && --c.launch_countdown == 0) {
    for (Op& op : c.unlaunched) {
      if (op.stream->ordered_epoch < producer_epoch_[std::size_t(op.stream->device)]) {
        ++breaches_.unordered_collective;
      }
      op.stream->queue.push_back(op);
    }
    c.unlaunched.clear();
    c.state = NcclResult::kSuccess;
  }
  if (c.ready_countdown > 0 && --c.ready_countdown == 0) {
    c.state = NcclResult::kSuccess;  // a shrink's child, on its own
  }
  if (c.shrinking && c.shrink_child) {  // queried after its child was written
    c.shrinking = false;
    c.state = c.shrink_fails ? NcclResult::kRemoteError : NcclResult::kSuccess;
    c.shrink_child->shrink_parent = nullptr;
    c.shrink_child = nullptr;
  } else if (c.shrinking && !g.shrink_cells.empty() &&
             int(g.shrink_cells.size()) == g.nranks - int(g.shrink_excluded.size())) {
    auto cells = g.shrink_cells;
    std::sort(cells.begin(), cells.end());
    auto& child = groups_.emplace_back(std::make_unique<Group>());
    child->nranks = child->joined = int(cells.size());
    child->members.resize(cells.size());
    for (std::size_t r = 0; r < cells.size(); ++r) {
      Comm* p = g.members[std::size_t(cells[r].first)];
      auto& k = comms_.emplace_back(std::make_unique<Comm>());
      k->group = child.get();
      k->rank = int(r);
      k->device = p->device;
      k->state = NcclResult::kInProgress;  // ready after polls of its own
      k->ready_countdown = launch_polls_;
      k->shrink_parent = p;  // until the parent is queried again
      p->shrink_child = k.get();
      p->shrink_fails = fail_next_shrink_;
      child->members[r] = k.get();
      // "NCCL's thread" writes the handle into the caller's storage.
      std::atomic_ref<NcclComm>(*cells[r].second).store(H(k.get()), std::memory_order_release);
    }
    g.shrink_cells.clear();
    fail_next_shrink_ = false;
  }
  if (c.finalizing) {
    // Local (rule 4): done once this rank's own work has left its streams.
    bool own_work = !c.unlaunched.empty();
    for (const auto& s : streams_) {
      for (const Op& op : s->queue) own_work = own_work || (op.group == &g && op.rank == c.rank);
    }
    c.state = own_work ? NcclResult::kInProgress : NcclResult::kSuccess;
    return;
  }
  if (g.dead && c.state == NcclResult::kSuccess) {
    bool outstanding = false;
    for (const auto& s : streams_) {
      for (const Op& op : s->queue) outstanding = outstanding || op.group == &g;
    }
    if (outstanding) c.state = NcclResult::kRemoteError;
  }
}

NcclResult NcclDouble::CommGetAsyncError(NcclComm comm, NcclResult* async) {
  Comm* c = nullptr;
  {
    std::lock_guard lock(mu_);
    c = Live(comm);
    if (!c) return NcclResult::kInvalidArgument;
    ++c->inside;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(200));  // inside NCCL a while
  std::lock_guard lock(mu_);
  Progress(*c);
  *async = c->state;
  --c->inside;
  return NcclResult::kSuccess;
}

NcclResult NcclDouble::CommFinalize(NcclComm comm) {
  std::lock_guard lock(mu_);
  Comm* c = Live(comm);
  if (!c) return NcclResult::kInvalidArgument;
  if (c->state != NcclResult::kSuccess) return NcclResult::kInvalidUsage;
  c->finalizing = true;
  c->state = NcclResult::kInProgress;
  return NcclResult::kInProgress;
}

NcclResult NcclDouble::CommDestroy(NcclComm comm) {
  std::lock_guard lock(mu_);
  Comm* c = Live(comm);
  if (!c) return NcclResult::kInvalidArgument;
  if (c->finalizing && c->state == NcclResult::kInProgress) {
    ++breaches_.destroy_while_finalizing;
    return NcclResult::kInvalidUsage;
  }
  c->dead = true;
  return NcclResult::kSuccess;
}

NcclResult NcclDouble::CommAbort(NcclComm comm) {
  std::lock_guard lock(mu_);
  Comm* c = Live(comm);
  if (!c) return NcclResult::kInvalidArgument;
  if (c->inside > 0) ++breaches_.abort_while_inside;
  c->dead = true;
  c->group->dead = true;
  return NcclResult::kSuccess;
}

NcclResult NcclDouble::Query(NcclComm comm, const std::function<void(const Comm&)>& read) {
  std::lock_guard lock(mu_);
  Comm* c = Live(comm);
  if (!c) return NcclResult::kInvalidArgument;
  if (c->shrink_parent) ++breaches_.child_used_before_parent;
  read(*c);
  return NcclResult::kSuccess;
}

NcclResult NcclDouble::CommUserRank(NcclComm comm, int* rank) {
  return Query(comm, [&](const Comm& c) { *rank = c.rank; });
}

NcclResult NcclDouble::CommCount(NcclComm comm, int* count) {
  return Query(comm, [&](const Comm& c) { *count = c.group->nranks; });
}

NcclResult NcclDouble::CommCuDevice(NcclComm comm, int* device) {
  return Query(comm, [&](const Comm& c) { *device = c.device; });
}

NcclResult NcclDouble::GroupStart() {
  ++group_depth;
  return NcclResult::kSuccess;
}

NcclResult NcclDouble::GroupEnd() {
  std::lock_guard lock(mu_);
  if (group_depth == 0) return NcclResult::kInvalidUsage;
  if (--group_depth > 0) return NcclResult::kSuccess;
  bool any = false;
  std::vector<void*> mine;
  mine.swap(group_comms);
  for (auto& c : comms_) {
    if (std::find(mine.begin(), mine.end(), c.get()) == mine.end()) continue;
    if (!c->dead && !c->unlaunched.empty() && c->state == NcclResult::kSuccess) {
      c->state = NcclResult::kInProgress;  // the kernels reach the stream later
      c->launch_countdown = std::max(launch_polls_, 1);
      any = true;
    }
  }
  return any ? NcclResult::kInProgress : NcclResult::kSuccess;
}

NcclResult NcclDouble::Enqueue(Op op, NcclComm comm, CudaStream stream) {
  std::lock_guard lock(mu_);
  Comm* c = Live(comm);
  if (!c) return NcclResult::kInvalidArgument;
  if (c->shrink_parent) ++breaches_.child_used_before_parent;
  // ncclCommEnsureReady: a communicator still in progress or failed refuses work.
  if (c->state != NcclResult::kSuccess) {
    return c->state == NcclResult::kInProgress ? NcclResult::kInvalidUsage : c->state;
  }
  auto* s = reinterpret_cast<Stream*>(stream);
  if (s->device != c->device) return NcclResult::kInvalidArgument;
  // Rule 12: a buffer on another device than the communicator's is refused.
  if (int device = DeviceOfLocked(op.dst); device >= 0 && device != c->device) {
    ++breaches_.buffer_on_another_device;
    return NcclResult::kInvalidArgument;
  }
  op.group = c->group;
  op.seq = c->seq++;
  op.rank = c->rank;
  op.stream = s;
  s->owner = c;
  c->unlaunched.push_back(op);
  if (group_depth > 0) {
    if (std::find(group_comms.begin(), group_comms.end(), c) == group_comms.end())
      group_comms.push_back(c);
    return NcclResult::kSuccess;
  }
  c->state = NcclResult::kInProgress;
  c->launch_countdown = std::max(launch_polls_, 1);
  return NcclResult::kInProgress;
}

NcclResult NcclDouble::AllReduceSum(void* data, std::size_t count, DataType dtype, NcclComm comm,
                                    CudaStream stream) {
  Op op;
  op.kind = Op::kAllReduce;
  op.dst = data;
  op.count = count;
  op.dtype = dtype;
  return Enqueue(op, comm, stream);
}

NcclResult NcclDouble::Broadcast(void* data, std::size_t count, DataType dtype, int root,
                                 NcclComm comm, CudaStream stream) {
  Op op;
  op.kind = Op::kBroadcast;
  op.dst = data;
  op.count = count;
  op.dtype = dtype;
  op.root = root;
  return Enqueue(op, comm, stream);
}

std::string NcclDouble::ErrorString(NcclResult r) {
  switch (r) {
    case NcclResult::kSuccess:
      return "no error";
    case NcclResult::kUnhandledCudaError:
      return "unhandled cuda error";
    case NcclResult::kSystemError:
      return "unhandled system error";
    case NcclResult::kInternalError:
      return "internal error";
    case NcclResult::kInvalidArgument:
      return "invalid argument";
    case NcclResult::kInvalidUsage:
      return "invalid usage";
    case NcclResult::kRemoteError:
      return "remote process exited or there was a network error";
    case NcclResult::kInProgress:
      return "NCCL operation in progress";
  }
  return "unknown";
}

}  // namespace aryl::testing
