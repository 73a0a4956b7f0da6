// gpu_check: the NCCL communicator alone on real GPUs, several ranks per GPU
// (each rank a process with NCCL_HOSTID of its own, so NCCL takes them for
// different hosts and connects them over sockets on loopback):
//   1. all-reduce of a device buffer and of a host buffer (staged), and a
//      broadcast, in a group of all ranks;
//   2. a planned shrink (ncclCommShrink) without the last rank, an
//      all-reduce in the child, and the parents finalized;
//   3. rank 0 alone in a fresh group gets a retryable error within its
//      timeout + 2 s.
// `gpu_check --ranks N` starts the store and execs N workers of itself (no
// fork after CUDA or ZeroMQ start); prints one PASS/FAIL line per check.
// Built only with NCCL (ARYL_HAVE_NCCL); run by bench/runtime/gpu-check.sh.
#include <cuda_runtime.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl/nccl_communicator.h"
#include "protocol_store.h"
#include "rendezvous.h"

extern char** environ;

using namespace aryl;
using std::chrono::milliseconds;

namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int Fail(int rank, const char* what, const Status& s) {
  std::printf("FAIL rank %d %s: %s\n", rank, what, s.ToString().c_str());
  std::fflush(stdout);
  return 1;
}

// Sums a device buffer and a host buffer, then broadcasts from the last rank.
int Collectives(Communicator& comm, int rank, int world, const char* label) {
  const size_t n = 4u << 20;  // 16 MB of float32
  float* d = nullptr;
  if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess)
    return Fail(rank, "cudaMalloc", Status::Unavailable(label));
  std::vector<float> h(n, float(rank + 1));
  cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  std::vector<double> control(3, double(rank));
  BufferView views[] = {{d, n, DataType::kFloat32},
                        {control.data(), control.size(), DataType::kFloat64}};
  auto t0 = std::chrono::steady_clock::now();
  Status s = comm.AllReduceSum(views);
  double secs = Since(t0);
  if (!s.ok()) return Fail(rank, label, s);
  cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  int want = 0;
  for (int r = 0; r < world; ++r) want += r + 1;
  double want_control = world * (world - 1) / 2.0;
  if (h[0] != float(want) || h[n - 1] != float(want) || control[2] != want_control) {
    return Fail(
        rank, label,
        Status::Internal("sums " + std::to_string(h[0]) + " / " + std::to_string(control[2]) +
                         ", want " + std::to_string(want) + " / " + std::to_string(want_control)));
  }
  if (Status b = comm.Broadcast(views[1], world - 1); !b.ok()) return Fail(rank, label, b);
  cudaFree(d);
  if (rank == 0) std::printf("PASS %s world=%d 16MB allreduce %.4f s\n", label, world, secs);
  return 0;
}

int Worker(const std::string& endpoint, int rank, int world) {
  std::string host = "aryl-gpu-check-" + std::to_string(rank);
  setenv("NCCL_HOSTID", host.c_str(), 1);  // before NCCL reads it
  NcclContext context;
  context.api = &CudaNcclApi();
  int count = 0;
  cudaGetDeviceCount(&count);
  context.device = SelectCudaDevice(rank, count);
  auto js = JobStore::Connect(endpoint, "gpucheck", milliseconds(30000));
  if (!js.ok()) return Fail(rank, "store", js.status());
  auto comm = CreateNcclCommunicator(context, *js, "g1/nccl", rank, world, milliseconds(30000));
  if (!comm.ok()) return Fail(rank, "init", comm.status());
  if (int rc = Collectives(**comm, rank, world, "allreduce+broadcast")) return rc;
  if (world < 2) return 0;
  if (rank == world - 1) {  // leaves: its parent is finalized with the others'
    auto t0 = std::chrono::steady_clock::now();
    comm->reset();
    std::printf("INFO rank %d left; parent finalized in %.2f s\n", rank, Since(t0));
    return 0;
  }
  auto shrunk = ShrinkNcclCommunicator(comm->get(), {world - 1}, milliseconds(30000));
  if (!shrunk.ok()) return Fail(rank, "shrink", shrunk.status());
  comm->reset();
  if (int rc = Collectives(**shrunk, rank, world - 1, "shrink+allreduce")) return rc;
  shrunk->reset();
  if (rank == 0) {
    auto t0 = std::chrono::steady_clock::now();
    auto lonely = CreateNcclCommunicator(context, *js, "g2/nccl", 0, 2, milliseconds(2000));
    double took = Since(t0);
    if (lonely.ok() || !lonely.status().IsRetryable() || took > 4.0) {
      return Fail(rank, "timeout",
                  Status::Internal("expected a retryable error within 2 + 2 s, took " +
                                   std::to_string(took) + ": " + lonely.status().ToString()));
    }
    std::printf("PASS timeout in %.2f s: %s\n", took, lonely.status().ToString().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 3, worker = -1;
  std::string endpoint;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--ranks") ranks = std::atoi(argv[i + 1]);
    if (a == "--worker") worker = std::atoi(argv[i + 1]);
    if (a == "--endpoint") endpoint = argv[i + 1];
  }
  if (worker >= 0) return Worker(endpoint, worker, ranks);
  auto server = ProtocolStoreServer::Start("tcp://127.0.0.1:*");
  if (!server.ok()) return Fail(-1, "store server", server.status());
  endpoint = (*server)->endpoint();
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    std::string rs = std::to_string(r), ns = std::to_string(ranks);
    std::vector<char*> args = {
        argv[0],   const_cast<char*>("--ranks"),    ns.data(),       const_cast<char*>("--worker"),
        rs.data(), const_cast<char*>("--endpoint"), endpoint.data(), nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args.data(), environ) != 0) {
      return Fail(-1, "spawn", Status::Unavailable("posix_spawn"));
    }
    pids.push_back(pid);
  }
  int failed = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(80);
  for (pid_t p : pids) {
    int st = 0;
    while (waitpid(p, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(p, SIGKILL);
        waitpid(p, &st, 0);
        break;
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
    failed |= !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  std::printf("%s gpu_check with %d ranks\n", failed ? "FAIL" : "PASS", ranks);
  return failed;
}
