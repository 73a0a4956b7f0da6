// Durations for people, in messages, journal rows and command output:
//   0.25 -> "250 ms", 1.5 -> "1.5 s", 60 -> "60 s", 125 -> "2 min 5 s",
//   3900 -> "1 h 5 min", 97200 -> "1 d 3 h".
// Under a second in whole milliseconds; under 10 s with up to two decimals and
// under two minutes with up to one (no trailing zeros: "60 s", "90 s", as
// people write deadlines); from two minutes on in two units, the smaller
// rounded (minutes and seconds, hours and minutes, days and hours). Negative
// values get a leading '-'; NaN and infinities are "unknown".
#pragma once

#include <string>

namespace aryl {

std::string FormatDuration(double seconds);

}  // namespace aryl
