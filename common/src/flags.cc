#include "aryl/flags.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "aryl/logging.h"
#include "aryl/version.h"

namespace aryl {
namespace {

// "true"/"false" for the words a boolean flag's value may be; nullopt otherwise.
std::optional<std::string> BoolWord(const std::string& v) {
  for (const char* t : {"true", "yes", "on", "1"}) {
    if (v == t) return std::string("true");
  }
  for (const char* f : {"false", "no", "off", "0"}) {
    if (v == f) return std::string("false");
  }
  return std::nullopt;
}

// Rewrites the boolean-flag spellings cxxopts does not read itself into
// --flag=true|false, before "--":
//   --flag VALUE   (VALUE a BoolWord; cxxopts would leave it as a positional
//                   argument and keep the flag true)
//   --flag=VALUE   (any BoolWord)
//   --no-flag      (-> false, unless "no-flag" is itself a flag)
//   -f VALUE       (a boolean with a short name)
// and then drops --flag=false where the flag's default is false, so that a
// program reading a boolean with count("flag") sees it as not given.
std::vector<std::string> NormalizeBoolFlags(const cxxopts::Options& options, int argc, char** argv) {
  std::set<std::string> longs;
  std::map<std::string, bool> bools;               // long name -> default value
  std::map<std::string, std::string> short_bools;  // short name -> long name
  for (const auto& group : options.groups()) {
    for (const auto& o : options.group_help(group).options) {
      const bool default_true = o.has_default && BoolWord(o.default_value) == std::string("true");
      for (const auto& l : o.l) {
        longs.insert(l);
        if (o.is_boolean) bools[l] = default_true;
      }
      if (o.is_boolean && !o.s.empty() && !o.l.empty()) short_bools[o.s] = o.l.front();
    }
  }
  std::vector<std::string> out;
  out.reserve(argc);
  for (int i = 0; i < argc; ++i) out.emplace_back(argv[i]);
  for (size_t i = 1; i < out.size(); ++i) {
    const std::string a = out[i];
    if (a == "--") break;
    std::string name;
    if (a.rfind("--", 0) == 0) {
      name = a.substr(2);
    } else if (a.size() == 2 && a[0] == '-' && short_bools.count(a.substr(1))) {
      name = short_bools[a.substr(1)];
    } else {
      continue;
    }
    std::optional<std::string> value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = BoolWord(name.substr(eq + 1));
      name = name.substr(0, eq);
      if (!bools.count(name) || !value) continue;  // cxxopts reports a bad value
    } else if (name.rfind("no-", 0) == 0 && bools.count(name.substr(3)) && !longs.count(name)) {
      name = name.substr(3);
      value = "false";
    } else if (bools.count(name)) {
      if (i + 1 < out.size()) value = BoolWord(out[i + 1]);
      if (value) out.erase(out.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      if (!value) value = "true";
    } else {
      continue;
    }
    if (*value == "false" && !bools[name]) {
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
      --i;
    } else {
      out[i] = "--" + name + "=" + *value;
    }
  }
  return out;
}

std::atomic<int> g_usage_exit_code{2};

}  // namespace

void SetUsageExitCode(int code) { g_usage_exit_code = code; }

void UsageError(const std::string& program, const std::string& message) {
  std::cerr << program << ": error: " << message << "\n";
  std::exit(g_usage_exit_code);
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
    std::vector<std::string> args = NormalizeBoolFlags(options, argc, argv);
    // Arguments after "--" are the program's own (a command to run); anything
    // else cxxopts did not consume is a mistake, never silently ignored.
    size_t dashdash = args.size();
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--") {
        dashdash = i;
        break;
      }
    }
    std::vector<char*> ptrs;
    for (auto& a : args) ptrs.push_back(a.data());
    auto result = options.parse(static_cast<int>(ptrs.size()), ptrs.data());
    if (result.count("help")) {
      std::cout << options.help() << std::endl;
      std::exit(0);
    }
    if (result.count("version")) {
      std::cout << VersionText(program) << std::flush;
      std::exit(0);
    }
    // cxxopts puts what follows "--" at the end of unmatched(): those are allowed.
    const size_t after = args.size() - std::min(args.size(), dashdash + 1);
    const auto& unmatched = result.unmatched();
    if (unmatched.size() > after) {
      UsageError(program, "unexpected argument '" + unmatched.front() +
                              "' (flags are --name VALUE or --name=VALUE; booleans --name, "
                              "--no-name, --name=true|false)");
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

int StartupExitCode(const Status& status) {
  using C = Status::Code;
  return status.code() == C::kInvalidArgument || status.code() == C::kNotFound ||
                 status.code() == C::kPermissionDenied
             ? 2
             : 1;
}

}  // namespace aryl
