// gpu_check: NCCL communicator checks on real GPUs (one process per GPU).
//   1. all-reduce and broadcast of device buffers across all GPUs;
//   2. ncclCommShrink excluding the last rank, then an all-reduce in the
//      shrunk group (the planned-shrink path of the resize protocol);
//   3. a rank alone in a collective gets Timeout within the configured time
//      (the communicator is aborted with ncclCommAbort).
// Needs >= 2 GPUs for 2 and 3; prints one PASS/FAIL line per check.
// Built only with NCCL (ARYL_HAVE_NCCL); run by bench/runtime/gpu-check.sh.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "comm/nccl/nccl_communicator.h"
#include "protocol_store.h"
#include "rendezvous.h"

using namespace aryl;
using std::chrono::milliseconds;

namespace {

int Fail(int rank, const char* what, const Status& s) {
  std::printf("FAIL rank %d %s: %s\n", rank, what, s.ToString().c_str());
  return 1;
}

int Worker(const std::string& endpoint, int rank, int world) {
  if (cudaSetDevice(rank) != cudaSuccess) return Fail(rank, "cudaSetDevice", Status::Unavailable("no device"));
  auto js = JobStore::Connect(endpoint, "gpucheck", milliseconds(30000));
  if (!js.ok()) return Fail(rank, "store", js.status());
  auto comm = CreateNcclCommunicator(*js, "g1/nccl", rank, world, milliseconds(20000));
  if (!comm.ok()) return Fail(rank, "init", comm.status());
  const size_t n = 25u << 20;  // 100 MB of float32
  float* d = nullptr;
  cudaMalloc(&d, n * sizeof(float));
  std::vector<float> h(n, float(rank + 1));
  cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  BufferView v{d, n, DataType::kFloat32};
  auto t0 = std::chrono::steady_clock::now();
  if (Status s = (*comm)->AllReduceSum({&v, 1}); !s.ok()) return Fail(rank, "allreduce", s);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cudaMemcpy(h.data(), d, sizeof(float), cudaMemcpyDeviceToHost);
  float want = float(world * (world + 1) / 2);
  if (h[0] != want) return Fail(rank, "allreduce value", Status::Internal(std::to_string(h[0])));
  if (Status s = (*comm)->Broadcast(v, world - 1); !s.ok()) return Fail(rank, "broadcast", s);
  if (rank == 0) std::printf("PASS allreduce+broadcast world=%d 100MB allreduce %.4f s\n", world, secs);
  if (world >= 2) {
    // Planned shrink: the last rank leaves; the others shrink without a new id.
    if (rank == world - 1) {
      std::this_thread::sleep_for(milliseconds(500));
      cudaFree(d);
      return 0;  // communicator destroyed with the process
    }
    auto shrunk = ShrinkNcclCommunicator(comm->get(), {world - 1}, milliseconds(20000));
    if (!shrunk.ok()) return Fail(rank, "shrink", shrunk.status());
    cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    if (Status s = (*shrunk)->AllReduceSum({&v, 1}); !s.ok()) return Fail(rank, "allreduce after shrink", s);
    if (rank == 0) std::printf("PASS shrink %d->%d\n", world, (*shrunk)->Size());
    // Timeout: rank 0 enters a collective alone.
    if (rank == 0) {
      auto t1 = std::chrono::steady_clock::now();
      auto lonely = CreateNcclCommunicator(*js, "g2/nccl", 0, 2, milliseconds(2000));
      double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      if (lonely.ok() || !lonely.status().IsRetryable() || took > 5) {
        return Fail(rank, "timeout", Status::Internal("expected a timeout within 2 s, took " + std::to_string(took)));
      }
      std::printf("PASS timeout in %.2f s: %s\n", took, lonely.status().ToString().c_str());
    }
  }
  cudaFree(d);
  return 0;
}

}  // namespace

int main() {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("FAIL no CUDA device\n");
    return 1;
  }
  auto server = ProtocolStoreServer::Start("tcp://127.0.0.1:*");
  if (!server.ok()) return Fail(-1, "store server", server.status());
  std::string endpoint = (*server)->endpoint();
  std::vector<pid_t> pids;
  for (int r = 0; r < gpus; ++r) {
    pid_t pid = fork();
    if (pid == 0) _exit(Worker(endpoint, r, gpus));
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    failed |= !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  std::printf("%s gpu_check on %d GPU(s)\n", failed ? "FAIL" : "PASS", gpus);
  return failed;
}
