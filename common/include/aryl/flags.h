// Command-line parsing shared by every binary (cxxopts).
//
// ParseFlagsOrExit prints --help and exits 0, or prints a one-line error
// ("aryl-sim: error: ...") and exits 2 for an unknown flag or a bad value.
#pragma once

#include <cxxopts.hpp>
#include <string>

namespace aryl {

cxxopts::ParseResult ParseFlagsOrExit(cxxopts::Options& options, int argc, char** argv);

// Prints "<program>: error: <message>" to stderr and exits with code 2.
[[noreturn]] void UsageError(const std::string& program, const std::string& message);

// Adds --log-level and --help, and initializes logging after parsing.
void AddCommonFlags(cxxopts::Options& options);

}  // namespace aryl
