#include "aryl/flags.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "aryl/logging.h"

namespace aryl {

void UsageError(const std::string& program, const std::string& message) {
  std::cerr << program << ": error: " << message << "\n";
  std::exit(2);
}

void AddCommonFlags(cxxopts::Options& options) {
  options.add_options("common")
      ("h,help", "Print this help and exit")
      ("log-level", "Log level: trace, debug, info, warn, error, critical, off (default: $ARYL_LOG or info)",
       cxxopts::value<std::string>()->default_value(""));
}

cxxopts::ParseResult ParseFlagsOrExit(cxxopts::Options& options, int argc, char** argv) {
  const std::string program = options.program();
  try {
    auto result = options.parse(argc, argv);
    if (result.count("help")) {
      std::cout << options.help() << std::endl;
      std::exit(0);
    }
    if (result.count("log-level") || options.groups().size() > 0) {
      std::string level;
      try {
        level = result["log-level"].as<std::string>();
      } catch (const std::exception&) {
        // The program did not register --log-level: use $ARYL_LOG.
      }
      Status s = InitLogging(program, level);
      if (!s.ok()) UsageError(program, "--log-level: " + s.message());
    }
    return result;
  } catch (const std::exception& e) {
    UsageError(program, e.what());
  }
}

}  // namespace aryl
