// The NCCL communicator's state machine against NcclDouble (nccl_double.h),
// which follows NCCL 2.28's non-blocking rules: ranks are threads, device
// memory is host memory. Each test opens with the defect of issue 23 that it
// pins down; a GPU run is bench/runtime/gpu-check.sh.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "comm/nccl/nccl_communicator.h"
#include "nccl_double.h"

namespace aryl {
namespace {

using std::chrono::milliseconds;
using testing::NcclDouble;

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The ids of a world's groups, in memory.
class MapIdStore final : public NcclIdStore {
 public:
  Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard lock(mu_);
    values_[key] = value;
    cv_.notify_all();
    return Status::Ok();
  }
  Result<std::string> Wait(const std::string& key, milliseconds timeout) override {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; }))
      return Status::Timeout("no key " + key);
    return values_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

// One process per rank: its own NcclContext over the shared double, on a
// device of its own (NCCL refuses two ranks of a group on one device).
struct World {
  explicit World(int devices = 4) : api(devices), devices(devices) {}

  NcclContext& Context(int rank) {
    while (int(contexts.size()) <= rank) {
      auto& c = contexts.emplace_back();
      c.api = &api;
      c.device = int(contexts.size() - 1) % devices;
    }
    return contexts[std::size_t(rank)];
  }

  // Creates `size` ranks as threads; every creation must succeed.
  std::vector<std::unique_ptr<Communicator>> Group(const std::string& prefix, int size,
                                                   milliseconds timeout) {
    std::vector<std::unique_ptr<Communicator>> comms(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) Context(r);
    RunEach(size, [&](int r) {
      auto c = CreateNcclCommunicator(Context(r), store, prefix, r, size, timeout);
      ASSERT_TRUE(c.ok()) << c.status();
      comms[std::size_t(r)] = std::move(*c);
    });
    return comms;
  }

  // Ranks tear down at once, as processes do (Finalize is local).
  static void Close(std::vector<std::unique_ptr<Communicator>>& comms) {
    RunEach(int(comms.size()), [&](int r) { comms[std::size_t(r)].reset(); });
  }

  static void RunEach(int size, const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }

  NcclDouble api;
  int devices;
  MapIdStore store;
  std::deque<NcclContext> contexts;
};

// Defect 1: GroupEnd returns kInProgress and the kernels reach the stream
// later; the result (device and staged host buffers) is there on return.
TEST(NcclCommunicator, AllReduceWaitsOutGroupEndInProgress) {
  World w;
  auto comms = w.Group("g1", 3, milliseconds(10000));
  World::RunEach(3, [&](int r) {
    auto* dev = static_cast<float*>(w.api.DeviceAlloc(r, 64 * sizeof(float)));
    std::fill(dev, dev + 64, float(r + 1));
    std::vector<double> host(5, 0.5);
    BufferView views[] = {{dev, 64, DataType::kFloat32},
                          {host.data(), host.size(), DataType::kFloat64}};
    ASSERT_TRUE(comms[std::size_t(r)]->AllReduceSum(views).ok());
    EXPECT_EQ(dev[63], 6.0f);
    EXPECT_EQ(host[4], 1.5);
    std::vector<uint8_t> bytes(9, uint8_t(r));
    ASSERT_TRUE(
        comms[std::size_t(r)]->Broadcast({bytes.data(), bytes.size(), DataType::kUInt8}, 2).ok());
    EXPECT_EQ(bytes[8], 2);
  });
  World::Close(comms);
  EXPECT_EQ(w.api.LiveComms(), 0);
  auto b = w.api.breaches();
  EXPECT_EQ(b.stream_use_in_progress, 0);
  EXPECT_EQ(b.free_while_queued, 0);
  EXPECT_EQ(b.call_on_dead_handle, 0);
}

// Defect 2: the child handle is null until the shrink is done and is written
// later; survivors get a working child, the leaver finalizes its parent.
TEST(NcclCommunicator, PlannedShrinkGetsTheChildOnceReady) {
  World w;
  auto comms = w.Group("g1", 3, milliseconds(10000));
  World::RunEach(3, [&](int r) {
    if (r == 2) {
      comms[2].reset();  // leaves: Finalize completes once the survivors drop the parent
      return;
    }
    auto child = ShrinkNcclCommunicator(comms[std::size_t(r)].get(), {2}, milliseconds(10000));
    ASSERT_TRUE(child.ok()) << child.status();
    EXPECT_EQ((*child)->Size(), 2);
    EXPECT_EQ((*child)->Rank(), r);
    std::vector<float> v(4, float(r + 1));
    BufferView view{v.data(), v.size(), DataType::kFloat32};
    ASSERT_TRUE((*child)->AllReduceSum({&view, 1}).ok());
    EXPECT_EQ(v[3], 3.0f);
    comms[std::size_t(r)].reset();  // the parent, as the runtime replaces it
    child->reset();
  });
  EXPECT_EQ(w.api.LiveComms(), 0);
  EXPECT_EQ(w.api.breaches().destroy_while_finalizing, 0);
  EXPECT_EQ(w.api.breaches().call_on_dead_handle, 0);
  EXPECT_EQ(w.api.breaches().child_used_before_parent, 0);
}

// Issue 37: NCCL reports a shrink's errors on the parent while the child
// looks ready; every communicator involved is queried until all have left
// kInProgress, so the error fails the shrink (both are aborted).
TEST(NcclCommunicator, ShrinkErrorOnTheParentFailsTheShrink) {
  World w;
  auto comms = w.Group("g1", 3, milliseconds(10000));
  w.api.FailNextShrink();
  auto t0 = std::chrono::steady_clock::now();
  World::RunEach(3, [&](int r) {
    if (r == 2) {
      comms[2].reset();
      return;
    }
    auto child = ShrinkNcclCommunicator(comms[std::size_t(r)].get(), {2}, milliseconds(10000));
    ASSERT_FALSE(child.ok());
    EXPECT_TRUE(child.status().IsRetryable()) << child.status();
    comms[std::size_t(r)].reset();
  });
  EXPECT_LT(Since(t0), 5.0);  // seen on the parent, not at the deadline
  EXPECT_EQ(w.api.LiveComms(), 0);
  EXPECT_EQ(w.api.breaches().child_used_before_parent, 0);
  EXPECT_EQ(w.api.breaches().call_on_dead_handle, 0);
}

// Defect 2: a shrink that a survivor never joins times out, and both the
// parent and the child are aborted (the runtime then builds a fresh group).
TEST(NcclCommunicator, ShrinkTimeoutAbortsParentAndChild) {
  World w;
  auto comms = w.Group("g1", 3, milliseconds(10000));
  auto t0 = std::chrono::steady_clock::now();
  auto child = ShrinkNcclCommunicator(comms[0].get(), {2}, milliseconds(300));
  ASSERT_FALSE(child.ok());
  EXPECT_TRUE(child.status().IsTimeout()) << child.status();
  EXPECT_LT(Since(t0), 2.3);
  EXPECT_EQ(w.api.LiveComms(), 2);  // ranks 1 and 2 only
  std::vector<float> v(1, 1.0f);
  BufferView view{v.data(), 1, DataType::kFloat32};
  EXPECT_TRUE(comms[0]->AllReduceSum({&view, 1}).IsRetryable());
  for (auto& c : comms) c->Abort();
  comms.clear();
  EXPECT_EQ(w.api.LiveComms(), 0);
}

// Defect 3: Finalize returns kInProgress; Destroy only once it is done.
TEST(NcclCommunicator, DestructorFinalizesThenDestroys) {
  World w;
  auto comms = w.Group("g1", 2, milliseconds(10000));
  auto t0 = std::chrono::steady_clock::now();
  World::Close(comms);
  EXPECT_LT(Since(t0), 5.0);  // not the 10 s deadline
  EXPECT_EQ(w.api.LiveComms(), 0);
  EXPECT_EQ(w.api.breaches().destroy_while_finalizing, 0);
}

// Issue 37: Finalize is local in NCCL 2.28: a peer SIGKILLed (nothing of it
// aborted) does not hold up this rank's teardown.
TEST(NcclCommunicator, DestructorFinalizesAloneWhenAPeerIsKilled) {
  World w;
  auto comms = w.Group("g1", 2, milliseconds(3000));
  w.api.Kill(1);
  auto t0 = std::chrono::steady_clock::now();
  comms[0].reset();
  EXPECT_LT(Since(t0), 1.5);  // not the 3 s deadline
  EXPECT_EQ(w.api.LiveComms(), 0);
  EXPECT_EQ(w.api.breaches().destroy_while_finalizing, 0);
  EXPECT_EQ(w.api.breaches().call_on_dead_handle, 0);
}

// Issue 37: NCCL refuses two ranks of one group on one device (the double,
// like NCCL, is one host): a fatal error, not "rebuild the group".
TEST(NcclCommunicator, TwoRanksOnOneDeviceAreRefused) {
  World w(1);
  World::RunEach(2, [&](int r) {
    auto c = CreateNcclCommunicator(w.Context(r), w.store, "g1", r, 2, milliseconds(5000));
    ASSERT_FALSE(c.ok());
    EXPECT_TRUE(c.status().IsInvalidArgument()) << c.status();
  });
  EXPECT_EQ(w.api.LiveComms(), 0);
}

// Defect 4: the collective's stream waits for the producer's (torch's) last
// kernel through an event before the collective is launched.
TEST(NcclCommunicator, CollectiveWaitsForTheProducerStream) {
  World w;
  auto comms = w.Group("g1", 2, milliseconds(10000));
  w.api.ProducerLaunched(0);  // the backward pass wrote the gradients
  w.api.ProducerLaunched(1);
  World::RunEach(2, [&](int r) {
    auto* dev = static_cast<float*>(w.api.DeviceAlloc(r, 8 * sizeof(float)));
    std::fill(dev, dev + 8, 1.0f);
    BufferView view{dev, 8, DataType::kFloat32};
    ASSERT_TRUE(comms[std::size_t(r)]->AllReduceSum({&view, 1}).ok());
    EXPECT_EQ(dev[7], 2.0f);
  });
  World::Close(comms);
  EXPECT_EQ(w.api.breaches().unordered_collective, 0);
}

// Defect 5: each rank selects the device of its local rank before its stream
// and communicator, and refuses a buffer on another device.
TEST(NcclCommunicator, SelectsTheDeviceOfItsLocalRank) {
  EXPECT_EQ(SelectCudaDevice(0, 2), 0);
  EXPECT_EQ(SelectCudaDevice(3, 2), 1);
  EXPECT_EQ(SelectCudaDevice(5, 1),
            0);  // pinned by CUDA_VISIBLE_DEVICES, or several ranks on one GPU
  EXPECT_EQ(SelectCudaDevice(2, 0), 0);
  World w(2);
  for (int r = 0; r < 2; ++r) w.Context(r).device = SelectCudaDevice(r, 2);
  auto comms = w.Group("g1", 2, milliseconds(10000));
  World::RunEach(2, [&](int r) {
    auto* mine = static_cast<float*>(w.api.DeviceAlloc(r, 4 * sizeof(float)));
    std::fill(mine, mine + 4, 1.0f);
    BufferView view{mine, 4, DataType::kFloat32};
    ASSERT_TRUE(comms[std::size_t(r)]->AllReduceSum({&view, 1}).ok());
    EXPECT_EQ(mine[3], 2.0f);
  });
  auto* other = w.api.DeviceAlloc(0, 4 * sizeof(float));
  BufferView wrong{other, 1, DataType::kFloat32};
  Status s = comms[1]->AllReduceSum({&wrong, 1});
  EXPECT_TRUE(s.IsInvalidArgument()) << s;
  EXPECT_NE(s.ToString().find("cuda:0"), std::string::npos) << s;
  World::Close(comms);
}

// Rule 12: the current device is per thread. A rank's collectives with host
// buffers, run on threads that never selected its device (or selected
// another), stage their buffers on the communicator's device, and the group's
// teardown runs there too; NCCL refuses a buffer of another device.
TEST(NcclCommunicator, EveryThreadWorksOnTheCommunicatorsDevice) {
  World w(2);
  auto comms = w.Group("g1", 2, milliseconds(10000));
  ASSERT_EQ(w.Context(1).device, 1);
  World::RunEach(2, [&](int r) {
    ASSERT_TRUE(w.api.SetDevice(1 - r).ok());  // the other rank's device
    std::vector<float> v(8, float(r + 1));
    BufferView view{v.data(), v.size(), DataType::kFloat32};
    Status s = comms[std::size_t(r)]->AllReduceSum({&view, 1});
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(v[7], 3.0f);
  });
  EXPECT_EQ(w.api.breaches().buffer_on_another_device, 0);
  World::Close(comms);
  EXPECT_EQ(w.api.LiveComms(), 0);
}

// Defect 6: Abort() from another thread while a collective waits only raises
// a flag; the collective thread aborts, so no thread is inside NCCL then.
TEST(NcclCommunicator, AbortFromAnotherThreadWhileInsideACollective) {
  World w;
  auto comms = w.Group("g1", 2, milliseconds(10000));
  std::vector<float> v(16, 1.0f);
  BufferView view{v.data(), v.size(), DataType::kFloat32};
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    comms[0]->Abort();
  });
  auto t0 = std::chrono::steady_clock::now();
  Status s = comms[0]->AllReduceSum({&view, 1});  // rank 1 never joins
  aborter.join();
  EXPECT_TRUE(s.IsRetryable()) << s;
  EXPECT_LT(Since(t0), 3.0);
  EXPECT_EQ(w.api.breaches().abort_while_inside, 0);
  EXPECT_EQ(w.api.breaches().call_on_dead_handle, 0);
  EXPECT_TRUE(comms[0]->AllReduceSum({&view, 1}).IsRetryable());  // later calls fail fast
  comms[1]->Abort();
}

// A peer SIGKILLed mid-collective: its closed sockets are all the survivor
// sees (kRemoteError), and it gets a retryable error in time.
TEST(NcclCommunicator, PeerKilledMidCollectiveIsRetryable) {
  World w;
  auto comms = w.Group("g1", 2, milliseconds(500));
  std::vector<float> v(16, 1.0f);
  BufferView view{v.data(), v.size(), DataType::kFloat32};
  std::thread killer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    w.api.Kill(1, NcclDouble::KillMode::kSocketError);
  });
  auto t0 = std::chrono::steady_clock::now();
  Status s = comms[0]->AllReduceSum({&view, 1});
  killer.join();
  EXPECT_TRUE(s.IsRetryable()) << s;
  EXPECT_LT(Since(t0), 2.5);
  EXPECT_EQ(w.api.breaches().blocked_host_copy, 0);
}

// Issue 37: a peer killed without a trace while this rank waits in an
// all-reduce of host buffers: the copy back to pageable host memory would
// block behind a collective that never ends (under the lock, out of reach
// of the deadline and of Abort()); it is queued only once the collective
// has drained, so the deadline ends the wait.
TEST(NcclCommunicator, SilentPeerDeathEndsAtTheDeadlineWithHostBuffers) {
  World w;
  auto comms = w.Group("g1", 2, milliseconds(500));
  std::vector<double> host(4, 1.0);
  BufferView view{host.data(), host.size(), DataType::kFloat64};
  w.api.Kill(1, NcclDouble::KillMode::kSilent);
  auto t0 = std::chrono::steady_clock::now();
  Status s = comms[0]->AllReduceSum({&view, 1});
  EXPECT_TRUE(s.IsTimeout()) << s;
  EXPECT_LT(Since(t0), 1.5);
  EXPECT_EQ(w.api.breaches().blocked_host_copy, 0);
  EXPECT_EQ(w.api.breaches().abort_while_inside, 0);
}

// Abort() from another thread ends a wait on a silently dead peer at once,
// host buffers and all.
TEST(NcclCommunicator, AbortReachesARankWaitingOnASilentlyDeadPeer) {
  World w;
  auto comms = w.Group("g1", 2, milliseconds(10000));
  std::vector<double> host(4, 1.0);
  BufferView view{host.data(), host.size(), DataType::kFloat64};
  w.api.Kill(1, NcclDouble::KillMode::kSilent);
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(200));
    comms[0]->Abort();
  });
  auto t0 = std::chrono::steady_clock::now();
  Status s = comms[0]->AllReduceSum({&view, 1});
  aborter.join();
  EXPECT_TRUE(s.IsRetryable()) << s;
  EXPECT_LT(Since(t0), 2.0);  // not the 10 s timeout
  EXPECT_EQ(w.api.breaches().blocked_host_copy, 0);
  EXPECT_EQ(w.api.breaches().abort_while_inside, 0);
}

// A sticky CUDA error leaves the context unusable: fatal, not "rebuild".
TEST(NcclCommunicator, StickyCudaErrorIsFatal) {
  World w;
  auto comms = w.Group("g1", 2, milliseconds(10000));
  w.api.InjectStickyError();
  World::RunEach(2, [&](int r) {
    std::vector<float> v(4, 1.0f);
    BufferView view{v.data(), v.size(), DataType::kFloat32};
    Status s = comms[std::size_t(r)]->AllReduceSum({&view, 1});
    EXPECT_FALSE(s.ok());
    EXPECT_FALSE(s.IsRetryable()) << s;
    EXPECT_NE(s.ToString().find("must exit"), std::string::npos) << s;
  });
}

// Rank 0's bootstrap root thread outlives a generation whose ranks never all
// came; past kMaxLeakedRoots rank 0 stops starting them and says to exit.
TEST(NcclCommunicator, RankZeroBoundsBootstrapRootsOfFailedGenerations) {
  World w;
  for (int g = 0; g < kMaxLeakedRoots; ++g) {
    auto c = CreateNcclCommunicator(w.Context(0), w.store, "g" + std::to_string(g), 0, 2,
                                    milliseconds(50));
    ASSERT_FALSE(c.ok());
    EXPECT_TRUE(c.status().IsRetryable()) << c.status();
  }
  EXPECT_EQ(w.api.LiveRoots(), kMaxLeakedRoots);
  auto c = CreateNcclCommunicator(w.Context(0), w.store, "gx", 0, 2, milliseconds(50));
  ASSERT_FALSE(c.ok());
  EXPECT_FALSE(c.status().IsRetryable()) << c.status();
  EXPECT_EQ(w.api.LiveRoots(), kMaxLeakedRoots);
}

// Creation has one deadline for the id and the init together: an id that
// comes late leaves the init only what is left.
TEST(NcclCommunicator, CreationTakesOneTimeoutWhenTheIdComesLate) {
  World w;
  w.Context(1);
  std::thread late_root([&] {
    std::this_thread::sleep_for(milliseconds(1500));
    (void)CreateNcclCommunicator(w.Context(0), w.store, "g1", 0, 3, milliseconds(100));
  });
  auto t0 = std::chrono::steady_clock::now();
  auto c = CreateNcclCommunicator(w.Context(1), w.store, "g1", 1, 3, milliseconds(2000));
  double took = Since(t0);
  late_root.join();
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().IsRetryable()) << c.status();
  EXPECT_GE(took, 1.9);
  EXPECT_LT(took, 2.9);  // not 1.5 s for the id plus 2 s for the init
}

// The double itself, against NCCL's rule 8: a GroupEnd launches what its own
// thread queued since its GroupStart, not another thread's.
TEST(NcclDouble, GroupEndLaunchesOnlyThisThreadsOperations) {
  NcclDouble api(2);
  NcclUniqueId id;
  ASSERT_EQ(api.GetUniqueId(&id), NcclResult::kSuccess);
  NcclComm comms[2] = {};
  CudaStream streams[2] = {};
  float* data[2] = {};
  auto ready = [&](NcclComm c) {
    for (NcclResult async = NcclResult::kInProgress; async == NcclResult::kInProgress;) {
      if (api.CommGetAsyncError(c, &async) != NcclResult::kSuccess) return false;
      if (async != NcclResult::kSuccess && async != NcclResult::kInProgress) return false;
    }
    return true;
  };
  std::mutex mu;
  std::condition_variable cv;
  int phase = 0;
  auto wait_for = [&](int p) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return phase >= p; });
  };
  auto advance = [&] {
    std::lock_guard lock(mu);
    ++phase;
    cv.notify_all();
  };
  World::RunEach(2, [&](int r) {
    ASSERT_TRUE(api.SetDevice(r).ok());
    ASSERT_TRUE(api.StreamCreate(&streams[r]).ok());
    data[r] = static_cast<float*>(api.DeviceAlloc(r, sizeof(float)));
    *data[r] = float(r + 1);
    ASSERT_EQ(api.CommInitRank(&comms[r], 2, id, r), NcclResult::kInProgress);
    ASSERT_TRUE(ready(comms[r]));
    ASSERT_EQ(api.GroupStart(), NcclResult::kSuccess);
    ASSERT_EQ(api.AllReduceSum(data[r], 1, DataType::kFloat32, comms[r], streams[r]),
              NcclResult::kSuccess);
    if (r == 1) {
      wait_for(1);  // rank 0 queued its all-reduce in a group it has not ended
      EXPECT_EQ(api.GroupEnd(), NcclResult::kInProgress);
      ASSERT_TRUE(ready(comms[1]));
      NcclResult of_rank0 = NcclResult::kInProgress;
      ASSERT_EQ(api.CommGetAsyncError(comms[0], &of_rank0), NcclResult::kSuccess);
      EXPECT_EQ(of_rank0, NcclResult::kSuccess);  // untouched: nothing launched for it
      advance();
    } else {
      advance();
      wait_for(2);
      // Its own launch: rank 1's GroupEnd left it alone.
      EXPECT_EQ(api.GroupEnd(), NcclResult::kInProgress);
      ASSERT_TRUE(ready(comms[0]));
    }
    while (api.StreamQuery(streams[r]).kind == CudaResult::kNotReady) std::this_thread::yield();
    EXPECT_EQ(*data[r], 3.0f);
  });
  for (NcclComm c : comms) api.CommAbort(c);
}

}  // namespace
}  // namespace aryl
