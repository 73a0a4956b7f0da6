// Logging setup shared by every binary: spdlog with the level taken from a flag,
// else from the ARYL_LOG environment variable, else "info".
#pragma once

#include <string>
#include <string_view>

#include "aryl/status.h"

namespace aryl {

// Sets the default spdlog logger's level and pattern. `level` is one of trace,
// debug, info, warn, error, critical, off; empty means "use $ARYL_LOG or info".
// Logs go to stderr, so stdout stays for a program's output.
Status InitLogging(std::string_view program, std::string_view level = {});

}  // namespace aryl
