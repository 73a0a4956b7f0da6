// Command-line parsing shared by every binary (cxxopts).
//
// ParseFlagsOrExit prints --help or --version and exits 0, or prints a one-line error
// ("aryl-sim: error: ...") and exits 2 (SetUsageExitCode) for an unknown flag or a bad value.
#pragma once

#include <cxxopts.hpp>
#include <string>

#include "aryl/status.h"

namespace aryl {

cxxopts::ParseResult ParseFlagsOrExit(cxxopts::Options& options, int argc, char** argv);

// Prints "<program>: error: <message>" to stderr and exits with the usage exit
// code: 2 unless the program chose its own.
[[noreturn]] void UsageError(const std::string& program, const std::string& message);

// The exit code of every usage error below and of ParseFlagsOrExit. A program
// that passes on another program's exit codes (aryl-run: a job's) sets one
// that a job's own 2 cannot be mistaken for, before it parses anything.
void SetUsageExitCode(int code);

// Start-up checks of flag values: each exits 2 with one line naming the flag
// and the value, e.g. "aryl: error: --timeout 0: must be > 0".
[[noreturn]] void FlagError(const std::string& program, const std::string& flag, const std::string& value,
                            const std::string& problem);
// `value` must be finite and > `above` (NaN and infinities are refused).
void RequireAbove(const std::string& program, const std::string& flag, double value, double above);
// `value` must be finite and >= `min`.
void RequireAtLeast(const std::string& program, const std::string& flag, double value, double min);
// Parses a whole decimal integer in [min, max] ("2abc", "1.5", "-1" for min 0 are errors).
long long ParseIntegerOrExit(const std::string& program, const std::string& flag, const std::string& text,
                             long long min, long long max);

// The exit code of a service that could not start: 2 (the usage code, which
// the systemd units do not restart on: RestartPreventExitStatus=2) when the
// configuration must change first (InvalidArgument, NotFound, PermissionDenied:
// a bad flag value, a missing key file or GPU, a key readable by others); 1
// otherwise (a port in use, a disk error), which a restart may cure.
int StartupExitCode(const Status& status);

// Adds --log-level, --help and --version (version.h), and initializes logging after parsing.
void AddCommonFlags(cxxopts::Options& options);

}  // namespace aryl
