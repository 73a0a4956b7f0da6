#include "aryl/clock.h"

#include <chrono>

namespace aryl {

double SystemClock::NowSeconds() const {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

SystemClock* SystemClock::Default() {
  static SystemClock clock;
  return &clock;
}

double WallClock::NowSeconds() const {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

WallClock* WallClock::Default() {
  static WallClock clock;
  return &clock;
}

}  // namespace aryl
