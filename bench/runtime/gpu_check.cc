// gpu_check: stage 1 of the GPU check (bench/runtime/gpu-check.sh), the NCCL
// communicator alone on the machine's GPUs. It links CUDA and NCCL only
// (aryl_comm_nccl): no libtorch, no ZeroMQ; ranks find each other's NCCL ids
// through files in a folder (FolderIdStore).
//
// `gpu_check --ranks N --timeout-ms T` is a launcher that never touches CUDA:
// it runs each scenario as fresh worker processes of itself (posix_spawn, no
// fork after CUDA starts), waits for them to a deadline and prints one line
// per scenario, "PASS name detail", "FAIL name detail" or "SKIP name why"
// (a skip is not a pass). Scenarios, in order:
//   1. one      world 1: init, all-reduce of a 16 MB device buffer and a host
//               buffer with every element checked, broadcast; Abort() from
//               another thread, the next call fails fast; a fresh group
//               (re-init) works again;
//   2. lonely   rank 0 of a world of 2 alone: a retryable error within T + 2 s,
//               then a fresh group of 1 works;
//   3. probe    2 ranks on device 0: does NCCL accept several ranks on one
//               GPU? It refuses them ("Duplicate GPU detected") unless it
//               supports them; refused, the scenarios below that need more
//               ranks than devices are skipped, saying so;
//   4. init     N ranks: init, all-reduce checked, broadcast;
//   5. grow     N-1 ranks all-reduce, then all N form a fresh group;
//   6. shrink   N ranks, then N-1 through ncclCommShrink (the line says so);
//   7. kill     N ranks inside an all-reduce that rank N-1 never enters; the
//               launcher SIGKILLs rank N-1 one second in; the survivors must
//               get a retryable error within T + 2 s of the kill and form a
//               fresh group of N-1 whose all-reduce is checked.
// Ranks use devices rank % D (D = visible devices).
#include <cuda_runtime.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl/nccl_communicator.h"

extern char** environ;

using namespace aryl;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Keys are files of one folder: written whole (a temporary file renamed),
// waited for by polling.
class FolderIdStore final : public NcclIdStore {
 public:
  explicit FolderIdStore(std::string dir) : dir_(std::move(dir)) {}

  Status Set(const std::string& key, const std::string& value) override {
    std::string path = Path(key), tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << value;
      if (!out.flush()) return Status::IoError("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::IoError("cannot rename " + tmp);
    return Status::Ok();
  }

  Result<std::string> Wait(const std::string& key, milliseconds timeout) override {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      std::ifstream in(Path(key));
      if (in) {
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
      }
      if (Clock::now() > deadline)
        return Status::Timeout("no key " + key + " after " + std::to_string(timeout.count()) +
                               " ms");
      std::this_thread::sleep_for(milliseconds(5));
    }
  }

 private:
  std::string Path(std::string key) const {
    for (char& c : key) c = c == '/' ? '_' : c;
    return dir_ + "/" + key;
  }
  std::string dir_;
};

struct Worker {
  std::string scenario;
  int rank = 0, world = 1;
  milliseconds timeout{5000};
  FolderIdStore* store = nullptr;
  NcclContext context;

  int Fail(const std::string& what, const Status& s) const {
    std::printf("FAIL %s rank %d: %s: %s\n", scenario.c_str(), rank, what.c_str(),
                s.ToString().c_str());
    std::fflush(stdout);
    return 1;
  }

  Result<std::unique_ptr<Communicator>> Group(const std::string& prefix, int r, int n) {
    return CreateNcclCommunicator(context, *store, scenario + "/" + prefix, r, n, timeout);
  }

  // All-reduces a 16 MB device buffer (rank r holds r + 1 + i % 7) and a host
  // buffer, checks every element, then broadcasts the host buffer from the last rank.
  int Collectives(Communicator& comm, const std::string& label) {
    const int r = comm.Rank(), n = comm.Size();
    const std::size_t count = std::size_t{4} << 20;
    std::vector<float> host(count);
    for (std::size_t i = 0; i < count; ++i) host[i] = float(r + 1 + int(i % 7));
    float* dev = nullptr;
    if (cudaMalloc(&dev, count * sizeof(float)) != cudaSuccess)
      return Fail(label, Status::Unavailable("cudaMalloc"));
    cudaMemcpy(dev, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
    std::vector<double> control = {double(r), 1.0, -double(r)};
    BufferView views[] = {{dev, count, DataType::kFloat32},
                          {control.data(), control.size(), DataType::kFloat64}};
    auto t0 = Clock::now();
    Status s = comm.AllReduceSum(views);
    double secs = Since(t0);
    if (!s.ok()) {
      cudaFree(dev);
      return Fail(label + " all-reduce", s);
    }
    cudaMemcpy(host.data(), dev, count * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(dev);
    const double ranks_sum = n * (n - 1) / 2.0;
    for (std::size_t i = 0; i < count; ++i) {
      float want = float(ranks_sum + n * (1 + int(i % 7)));
      if (host[i] != want) {
        return Fail(label,
                    Status::Internal("element " + std::to_string(i) + " is " +
                                     std::to_string(host[i]) + ", want " + std::to_string(want)));
      }
    }
    if (control[0] != ranks_sum || control[1] != n || control[2] != -ranks_sum) {
      return Fail(label, Status::Internal("host buffer " + std::to_string(control[0]) + "," +
                                          std::to_string(control[1]) + ", want " +
                                          std::to_string(ranks_sum) + "," + std::to_string(n)));
    }
    std::vector<double> b(3, double(r));
    if (Status bs = comm.Broadcast({b.data(), b.size(), DataType::kFloat64}, n - 1); !bs.ok())
      return Fail(label + " broadcast", bs);
    if (b[0] != n - 1 || b[2] != n - 1)
      return Fail(label, Status::Internal("broadcast gave " + std::to_string(b[0])));
    if (r == 0) std::printf("INFO %s world=%d 16 MB all-reduce %.4f s\n", label.c_str(), n, secs);
    return 0;
  }

  int One() {
    auto c = Group("a", 0, 1);
    if (!c.ok()) return Fail("init", c.status());
    if (int rc = Collectives(**c, "world 1")) return rc;
    std::thread aborter([&] { (*c)->Abort(); });
    aborter.join();
    std::vector<float> v(8, 1.0f);
    BufferView view{v.data(), v.size(), DataType::kFloat32};
    auto t0 = Clock::now();
    Status s = (*c)->AllReduceSum({&view, 1});
    if (s.ok() || !s.IsRetryable() || Since(t0) > 1.0)
      return Fail("after Abort()",
                  Status::Internal("want a fast retryable error, got " + s.ToString()));
    c->reset();
    auto again = Group("b", 0, 1);
    if (!again.ok()) return Fail("re-init after abort", again.status());
    if (int rc = Collectives(**again, "re-init")) return rc;
    std::printf(
        "PASS one world 1 all-reduce and broadcast checked; Abort() fails the next call "
        "in %.3f s; re-init works\n",
        Since(t0));
    return 0;
  }

  int Lonely() {
    auto t0 = Clock::now();
    auto c = Group("a", 0, 2);
    double took = Since(t0);
    double limit = timeout.count() / 1000.0 + 2;
    if (c.ok() || !c.status().IsRetryable() || took > limit)
      return Fail(
          "alone in a world of 2",
          Status::Internal("want a retryable error within " + std::to_string(limit) + " s, got " +
                           c.status().ToString() + " after " + std::to_string(took) + " s"));
    auto again = Group("b", 0, 1);
    if (!again.ok()) return Fail("fresh group after the timeout", again.status());
    if (int rc = Collectives(**again, "after timeout")) return rc;
    std::printf("PASS lonely retryable error in %.2f s <= %.0f s (%s); a fresh group works\n", took,
                limit, c.status().ToString().c_str());
    return 0;
  }

  int Init() {
    auto c = Group("a", rank, world);
    if (!c.ok() && scenario == "probe") {
      // The probe asks a question: any error is NCCL's "no" (refused with
      // invalid usage, or a hang ended by the timeout), not a failure.
      std::printf("REFUSED probe rank %d: %s\n", rank, c.status().ToString().c_str());
      return 3;
    }
    if (!c.ok()) return Fail("init", c.status());
    if (int rc = Collectives(**c, scenario)) return rc;
    if (rank == 0)
      std::printf("PASS %s world %d all-reduce and broadcast checked\n", scenario.c_str(), world);
    return 0;
  }

  int Grow() {
    if (rank < world - 1) {
      auto c = Group("a", rank, world - 1);
      if (!c.ok()) return Fail("init of world " + std::to_string(world - 1), c.status());
      if (int rc = Collectives(**c, "before growth")) return rc;
    }
    auto c = Group("b", rank, world);
    if (!c.ok()) return Fail("fresh group of world " + std::to_string(world), c.status());
    if (int rc = Collectives(**c, "grown")) return rc;
    if (rank == 0)
      std::printf("PASS grow world %d -> %d (a fresh group), checked\n", world - 1, world);
    return 0;
  }

  int Shrink() {
    auto c = Group("a", rank, world);
    if (!c.ok()) return Fail("init", c.status());
    if (int rc = Collectives(**c, "before shrink")) return rc;
    if (rank == world - 1) {
      auto t0 = Clock::now();
      c->reset();  // leaves: finalize is local
      std::printf("INFO shrink rank %d left; its communicator finalized in %.2f s\n", rank,
                  Since(t0));
      return 0;
    }
    auto t0 = Clock::now();
    auto child = ShrinkNcclCommunicator(c->get(), {world - 1}, timeout);
    if (!child.ok()) return Fail("ncclCommShrink", child.status());
    double secs = Since(t0);
    c->reset();
    if ((*child)->Size() != world - 1 || (*child)->Rank() != rank)
      return Fail("ncclCommShrink",
                  Status::Internal("child rank/size " + std::to_string((*child)->Rank()) + "/" +
                                   std::to_string((*child)->Size())));
    if (int rc = Collectives(**child, "shrunk")) return rc;
    if (rank == 0)
      std::printf("PASS shrink world %d -> %d through ncclCommShrink (%.3f s), checked\n", world,
                  world - 1, secs);
    return 0;
  }

  int Kill() {
    auto c = Group("a", rank, world);
    if (!c.ok()) return Fail("init", c.status());
    if (int rc = Collectives(**c, "before kill")) return rc;
    if (rank == world - 1) {  // the victim: never enters the next all-reduce
      (void)store->Set(scenario + "/victim-ready", "1");
      std::this_thread::sleep_for(std::chrono::seconds(600));
      return 1;
    }
    std::vector<float> v(1024, 1.0f);
    BufferView view{v.data(), v.size(), DataType::kFloat32};
    (void)store->Set(scenario + "/entered-" + std::to_string(rank), "1");
    Status s = (*c)->AllReduceSum({&view, 1});
    double returned = WallNow();
    auto killed_text = store->Wait(scenario + "/killed-at", milliseconds(5000));
    if (!killed_text.ok()) return Fail("the launcher's kill time", killed_text.status());
    double detect = returned - std::atof(killed_text->c_str());
    double limit = timeout.count() / 1000.0 + 2;
    if (s.ok() || !s.IsRetryable() || detect > limit)
      return Fail("all-reduce with a killed peer",
                  Status::Internal("want a retryable error within " + std::to_string(limit) +
                                   " s of the SIGKILL, got " + s.ToString() + " " +
                                   std::to_string(detect) + " s after it"));
    c->reset();  // aborted already
    auto fresh = Group("b", rank, world - 1);
    if (!fresh.ok()) return Fail("survivors' fresh group", fresh.status());
    if (int rc = Collectives(**fresh, "regrouped")) return rc;
    if (rank == 0)
      std::printf(
          "PASS kill detected %.2f s after the SIGKILL <= %.0f s (%s); %d survivors "
          "regrouped, checked\n",
          detect, limit, s.ToString().c_str(), world - 1);
    return 0;
  }

  int Run() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::printf("FAIL %s rank %d: no CUDA device\n", scenario.c_str(), rank);
      return 1;
    }
    context.api = &CudaNcclApi();
    // The probe puts both its ranks on device 0 whatever the machine has.
    context.device = scenario == "probe" ? 0 : SelectCudaDevice(rank, count);
    if (scenario == "one") (void)store->Set("devices", std::to_string(count));
    if (scenario == "one") return One();
    if (scenario == "lonely") return Lonely();
    if (scenario == "init" || scenario == "probe") return Init();
    if (scenario == "grow") return Grow();
    if (scenario == "shrink") return Shrink();
    if (scenario == "kill") return Kill();
    std::printf("FAIL unknown scenario %s\n", scenario.c_str());
    return 2;
  }
};

struct Launcher {
  std::string self, dir;
  milliseconds timeout{5000};
  int failed = 0;

  // Runs `world` workers of `scenario`; kill_last: SIGKILLs the last rank
  // once it is parked and the others are inside the all-reduce. Returns the
  // workers' exit codes (-1: killed at the deadline).
  std::vector<int> Run(const std::string& scenario, int world, bool kill_last = false) {
    std::vector<pid_t> pids;
    std::string ws = std::to_string(world), ts = std::to_string(timeout.count());
    for (int r = 0; r < world; ++r) {
      std::string rs = std::to_string(r);
      std::string sc = scenario;
      std::vector<char*> args = {
          self.data(), const_cast<char*>("--scenario"),   sc.data(), const_cast<char*>("--rank"),
          rs.data(),   const_cast<char*>("--world"),      ws.data(), const_cast<char*>("--dir"),
          dir.data(),  const_cast<char*>("--timeout-ms"), ts.data(), nullptr};
      pid_t pid = 0;
      if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, args.data(), environ) != 0) {
        std::printf("FAIL %s: posix_spawn\n", scenario.c_str());
        continue;
      }
      pids.push_back(pid);
    }
    FolderIdStore store(dir);
    auto deadline = Clock::now() + std::chrono::seconds(60);
    if (kill_last && int(pids.size()) == world) {
      bool ready = store.Wait(scenario + "/victim-ready", milliseconds(30000)).ok();
      for (int r = 0; ready && r < world - 1; ++r)
        ready = store.Wait(scenario + "/entered-" + std::to_string(r), milliseconds(30000)).ok();
      std::this_thread::sleep_for(milliseconds(1000));  // the survivors are inside the all-reduce
      char at[64];
      std::snprintf(at, sizeof(at), "%.6f", WallNow());
      kill(pids.back(), SIGKILL);
      (void)store.Set(scenario + "/killed-at", at);
      std::printf("INFO kill: SIGKILL rank %d at %s (%s)\n", world - 1, at,
                  ready ? "survivors inside the all-reduce" : "survivors not seen entering");
    }
    std::vector<int> codes;
    for (pid_t p : pids) {
      int st = 0;
      while (waitpid(p, &st, WNOHANG) == 0) {
        if (Clock::now() > deadline) {
          kill(p, SIGKILL);
          waitpid(p, &st, 0);
          break;
        }
        std::this_thread::sleep_for(milliseconds(20));
      }
      codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    std::fflush(stdout);
    return codes;
  }

  // A scenario passes when every worker exits 0 (the victim of a kill aside).
  void Expect(const std::string& scenario, const std::vector<int>& codes, int victims = 0) {
    for (std::size_t r = 0; r + victims < codes.size(); ++r) {
      if (codes[r] != 0) {
        std::printf("FAIL %s rank %zu exited %d (its lines above)\n", scenario.c_str(), r,
                    codes[r]);
        ++failed;
        return;
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  int ranks = 3, rank = -1, world = 1, timeout_ms = 5000;
  std::string scenario, dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--ranks") ranks = std::atoi(argv[i + 1]);
    if (a == "--rank") rank = std::atoi(argv[i + 1]);
    if (a == "--world") world = std::atoi(argv[i + 1]);
    if (a == "--scenario") scenario = argv[i + 1];
    if (a == "--dir") dir = argv[i + 1];
    if (a == "--timeout-ms") timeout_ms = std::atoi(argv[i + 1]);
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (!scenario.empty()) {
    FolderIdStore store(dir);
    Worker w;
    w.scenario = scenario;
    w.rank = rank;
    w.world = world;
    w.timeout = milliseconds(timeout_ms);
    w.store = &store;
    return w.Run();
  }
  if (ranks < 2 || ranks > 8) {
    std::printf("FAIL gpu_check: --ranks %d is not in [2, 8]\n", ranks);
    return 2;
  }
  char tmpl[] = "/tmp/aryl-gpu-check-ids.XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::printf("FAIL gpu_check: mkdtemp\n");
    return 1;
  }
  Launcher l;
  l.self = "/proc/self/exe";
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) l.self.assign(exe, std::size_t(n));
  l.dir = tmpl;
  l.timeout = milliseconds(timeout_ms);
  std::printf("INFO gpu_check: %d ranks, collective timeout %d ms, ids in %s\n", ranks, timeout_ms,
              tmpl);

  l.Expect("one", l.Run("one", 1));
  l.Expect("lonely", l.Run("lonely", 1));
  FolderIdStore ids(l.dir);
  auto devices_text = ids.Wait("devices", milliseconds(1));
  int devices = devices_text.ok() ? std::atoi(devices_text->c_str()) : 0;
  // Several ranks on one device: NCCL's answer decides whether the scenarios
  // below can run with more ranks than devices.
  auto probe = l.Run("probe", 2);
  bool shared = probe[0] == 0 && probe[1] == 0;
  if (shared) {
    std::printf("INFO probe: NCCL accepted 2 ranks on one device\n");
  } else if (probe[0] == 3 || probe[1] == 3) {
    std::printf(
        "INFO probe: NCCL refused 2 ranks on one device (\"Duplicate GPU detected\" "
        "under NCCL_DEBUG=WARN)\n");
  } else {
    l.Expect("probe", probe);
  }
  const char* multi[] = {"init", "grow", "shrink", "kill"};
  if (!shared && devices < ranks) {
    for (const char* s : multi)
      std::printf(
          "SKIP %s %d ranks need %d devices (%d here) or NCCL's support of several ranks "
          "on one device, which it did not give (probe)\n",
          s, ranks, ranks, devices);
  } else {
    l.Expect("init", l.Run("init", ranks));
    l.Expect("grow", l.Run("grow", ranks));
    l.Expect("shrink", l.Run("shrink", ranks));
    l.Expect("kill", l.Run("kill", ranks, /*kill_last=*/true), /*victims=*/1);
  }
  std::printf("%s gpu_check: %d failed\n", l.failed ? "FAIL" : "DONE", l.failed);
  std::string rm = std::string("rm -rf ") + tmpl;
  (void)std::system(rm.c_str());
  return l.failed ? 1 : 0;
}
