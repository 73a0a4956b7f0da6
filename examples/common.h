// Shared by the examples: the training loop's progress line.
//
// Every line rank 0 prints while training has the same key=value shape, so
// launchers (aryl-run, the demo, benchmarks) can parse it:
//   step=120 loss=0.41230 world=4 gen=3 rate=1843.2 step_s=0.0131 t=12.345 unix=1764480000.123456
// (rate: samples/s over the last window; step_s: the last step; t: since start;
// unix: wall-clock seconds, comparable across processes)
#pragma once

#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>

namespace aryl::examples {

class ProgressPrinter {
 public:
  explicit ProgressPrinter(int64_t every) : every_(every < 1 ? 1 : every) {}

  // Call after each committed step on rank 0.
  void Step(int64_t step, double loss, int world, int64_t gen, int64_t samples) {
    auto now = std::chrono::steady_clock::now();
    double since_last = std::chrono::duration<double>(now - last_).count();
    samples_ += samples;
    ++steps_;
    if (step % every_ == 0) {
      double window = std::chrono::duration<double>(now - window_start_).count();
      timespec ts{};
      clock_gettime(CLOCK_REALTIME, &ts);
      std::printf("step=%lld loss=%.5f world=%d gen=%lld rate=%.1f step_s=%.4f t=%.3f unix=%.6f\n", (long long)step,
                  loss, world, (long long)gen, window > 0 ? samples_ / window : 0.0, since_last,
                  std::chrono::duration<double>(now - start_).count(), double(ts.tv_sec) + ts.tv_nsec * 1e-9);
      std::fflush(stdout);
      samples_ = 0;
      steps_ = 0;
      window_start_ = now;
    }
    last_ = now;
  }

 private:
  int64_t every_;
  int64_t samples_ = 0, steps_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_, window_start_ = start_;
};

}  // namespace aryl::examples
