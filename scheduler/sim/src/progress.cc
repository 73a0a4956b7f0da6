#include "aryl/sim/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace aryl::sim {

ProgressBar::ProgressBar(std::string label, double total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      tty_(enabled && isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(double done) {
  if (!tty_ || total_ <= 0) return;
  int permille = static_cast<int>(std::clamp(done / total_, 0.0, 1.0) * 1000);
  if (permille == last_permille_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - start_ < std::chrono::seconds(1)) return;
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_permille_ = permille;
  last_draw_ = now;
  constexpr int kWidth = 30;
  int filled = permille * kWidth / 1000;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  std::fprintf(stderr, "\r%-14s [%.*s%*s] %5.1f%%  %.0fs", label_.c_str(), filled,
               "##############################", kWidth - filled, "", permille / 10.0, elapsed);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::Finish() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace aryl::sim
