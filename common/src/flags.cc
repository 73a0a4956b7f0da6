#include "aryl/flags.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <cstdlib>
#include <iostream>

#include "aryl/logging.h"
#include "aryl/version.h"

namespace aryl {

void UsageError(const std::string& program, const std::string& message) {
  std::cerr << program << ": error: " << message << "\n";
  std::exit(2);
}

void FlagError(const std::string& program, const std::string& flag, const std::string& value,
               const std::string& problem) {
  UsageError(program, flag + " '" + value + "': " + problem);
}

namespace {
std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

void RequireAbove(const std::string& program, const std::string& flag, double value, double above) {
  if (!std::isfinite(value) || !(value > above)) FlagError(program, flag, Num(value), "must be a number > " + Num(above));
}

void RequireAtLeast(const std::string& program, const std::string& flag, double value, double min) {
  if (!std::isfinite(value) || !(value >= min)) FlagError(program, flag, Num(value), "must be a number >= " + Num(min));
}

long long ParseIntegerOrExit(const std::string& program, const std::string& flag, const std::string& text,
                             long long min, long long max) {
  long long v = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, v);
  if (text.empty() || ec != std::errc() || ptr != end)
    FlagError(program, flag, text, "not a whole number");
  if (v < min || v > max)
    FlagError(program, flag, text, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return v;
}

void AddCommonFlags(cxxopts::Options& options) {
  options.add_options("common")
      ("h,help", "Print this help and exit")
      ("version", "Print the version, commit and build options and exit")
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
    if (result.count("version")) {
      std::cout << VersionText(program) << std::flush;
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
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    // cxxopts names the value but not the flag: find the flag it followed.
    std::string msg = e.what();
    auto open = msg.find("\u2018"), close = msg.find("\u2019");
    std::string value = open != std::string::npos && close != std::string::npos && close > open
                            ? msg.substr(open + 3, close - open - 3)
                            : "";
    for (int i = 1; i < argc && !value.empty(); ++i) {
      std::string a = argv[i];
      if (a == "--") break;
      auto eq = a.find('=');
      if (a.rfind("-", 0) == 0 && eq != std::string::npos && a.substr(eq + 1) == value)
        FlagError(program, a.substr(0, eq), value, "not a valid value for this flag");
      if (a.rfind("-", 0) == 0 && i + 1 < argc && argv[i + 1] == value)
        FlagError(program, a, value, "not a valid value for this flag");
    }
    UsageError(program, msg);
  } catch (const std::exception& e) {
    UsageError(program, e.what());
  }
}

}  // namespace aryl
