#include "aryl/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string>

namespace aryl {

Status InitLogging(std::string_view program, std::string_view level) {
  std::string lvl(level);
  if (lvl.empty()) {
    const char* env = std::getenv("ARYL_LOG");
    lvl = env && *env ? env : "info";
  }
  auto parsed = spdlog::level::from_str(lvl);
  // from_str maps unknown names to "off"; only accept "off" when it was asked for.
  if (parsed == spdlog::level::off && lvl != "off") {
    return Status::InvalidArgument("unknown log level '" + lvl +
                                   "' (expected trace, debug, info, warn, error, critical, off)");
  }
  auto logger = spdlog::stderr_color_mt(std::string(program.empty() ? "aryl" : program));
  spdlog::set_default_logger(logger);
  spdlog::set_level(parsed);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v");
  return Status::Ok();
}

}  // namespace aryl
