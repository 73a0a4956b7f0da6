// A one-line progress bar on stderr, shown only when stderr is a terminal and
// the work has taken longer than a second; silent otherwise (pipes, files, CI).
// Thread safety: not thread-safe.
#pragma once

#include <chrono>
#include <string>

namespace aryl::sim {

class ProgressBar {
 public:
  // `enabled` false forces silence (e.g. --no-progress).
  ProgressBar(std::string label, double total, bool enabled = true);
  ~ProgressBar();
  // Progress in the same unit as total; cheap to call often.
  void Update(double done);
  // Clears the line (if one was drawn).
  void Finish();

 private:
  std::string label_;
  double total_;
  bool tty_;
  bool drawn_ = false;
  int last_permille_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace aryl::sim
