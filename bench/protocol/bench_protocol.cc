// Protocol benchmark harness: encode/decode time and frame size for representative
// messages, then request/reply round-trip latency (p50/p99) and rate over inproc,
// ipc and tcp loopback, with and without CURVE. Usage: bench_protocol [--quick]
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "aryl/protocol/security.h"
#include "aryl/protocol/transport.h"
#include "samples.h"

using namespace aryl::protocol;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// CPU time per call (this thread's), so that other load on a shared machine does
// not inflate it; the best of 5 rounds.
template <typename F>
double NsPerOp(int iters, F&& f) {
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    double start = ThreadCpuSeconds();
    for (int i = 0; i < iters; ++i) f();
    best = std::min(best, (ThreadCpuSeconds() - start) * 1e9 / iters);
  }
  return best;
}

Message BigJobsReply(int rows) {
  JobsReply r;
  for (int i = 0; i < rows; ++i)
    r.jobs.push_back({.job = JobId(i),
                      .name = "job-" + std::to_string(i),
                      .state = JobState::kRunning,
                      .workers = 4,
                      .min_workers = 1,
                      .max_workers = 8,
                      .gpu_type = "A100",
                      .generation = 3,
                      .step = 1000 + i,
                      .steps_per_second = 9.5,
                      .submit_time = 1.7e9,
                      .rescales = 1});
  return r;
}

void CodecTable(int iters) {
  std::vector<std::pair<std::string, Message>> cases = {
      {"heartbeat (8 workers)",
       Heartbeat{.agent_id = "train-01",
                 .seq = 1,
                 .free_slots = 0,
                 .workers = std::vector<RunningWorker>(8, RunningWorker{.job = 1, .pid = 10})}},
      {"start_workers", testing::SampleMessages()[3]},
      {"store_set (1 KiB value)",
       StoreSet{.key = "job/1/g2/rank0", .value = {std::string(1024, 'x')}}},
      {"jobs_reply (200 rows)", BigJobsReply(200)},
  };
  std::printf("%-26s %10s %12s %12s\n", "message", "bytes", "encode ns", "decode ns");  // CPU time
  for (auto& [name, msg] : cases) {
    std::string frame = Encode(msg);
    int n = std::max(1, iters * 200 / int(frame.size() + 200) / 5);
    double enc = NsPerOp(n, [&] { frame = Encode(msg); });
    double dec = NsPerOp(n, [&] {
      auto r = Decode(frame);
      if (!r.ok()) std::abort();
    });
    std::printf("%-26s %10zu %12.0f %12.0f\n", name.c_str(), frame.size(), enc, dec);
  }
}

void LatencyRow(const std::string& label, Server::Options so, Client::Options co, int requests) {
  auto server =
      Server::Start(std::move(so), [](const ReplyTo&, Message m) -> std::optional<Message> {
        return Ok{.message = std::to_string(std::get<CancelJob>(m).job)};
      });
  if (!server.ok()) {
    std::printf("%-18s %s\n", label.c_str(), server.status().ToString().c_str());
    return;
  }
  co.endpoint = (*server)->endpoint();
  auto client = Client::Connect(std::move(co));
  if (!client.ok()) std::abort();
  for (int i = 0; i < 50; ++i)
    (void)(*client)->Request(CancelJob{.job = 1}, std::chrono::seconds(5));
  std::vector<double> us;
  us.reserve(requests);
  auto start = Clock::now();
  for (int i = 0; i < requests; ++i) {
    auto t0 = Clock::now();
    auto r = (*client)->Call<Ok>(CancelJob{.job = JobId(i)}, std::chrono::seconds(5));
    if (!r.ok() || r->message != std::to_string(i)) {
      std::printf("%-18s failed: %s\n", label.c_str(), r.status().ToString().c_str());
      return;
    }
    us.push_back(Seconds(Clock::now() - t0) * 1e6);
  }
  double total = Seconds(Clock::now() - start);
  std::sort(us.begin(), us.end());
  std::printf("%-18s %10.1f %10.1f %10.1f %12.0f\n", label.c_str(), us[us.size() / 2],
              us[us.size() * 99 / 100], us.back(), requests / total);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  int iters = quick ? 2000 : 20000;
  int requests = quick ? 500 : 5000;
  std::printf("== encode/decode (JSON) ==\n");
  CodecTable(iters);

  std::printf("\n== request/reply round trip (one client, sequential, %d requests) ==\n", requests);
  std::printf("%-18s %10s %10s %10s %12s\n", "endpoint", "p50 us", "p99 us", "max us", "req/s");
  std::string ipc = "ipc:///tmp/aryl-bench-" + std::to_string(::getpid()) + ".sock";
  LatencyRow("inproc", {.endpoint = "inproc://aryl-bench"}, {}, requests);
  LatencyRow("ipc", {.endpoint = ipc}, {}, requests);
  LatencyRow("tcp loopback", {.endpoint = "tcp://127.0.0.1:*"}, {}, requests);
  auto server_keys = GenerateKeyPair();
  auto client_keys = GenerateKeyPair();
  if (server_keys.ok() && client_keys.ok()) {
    LatencyRow("tcp + CURVE",
               {.endpoint = "tcp://127.0.0.1:*",
                .curve = CurveServerKeys{server_keys->public_key,
                                         server_keys->secret_key,
                                         {client_keys->public_key}}},
               {.curve = CurveClientKeys{client_keys->public_key, client_keys->secret_key,
                                         server_keys->public_key}},
               requests);
  }
  return 0;
}
