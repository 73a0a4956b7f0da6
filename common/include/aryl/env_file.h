// Environment files for jobs (`aryl-run --env-file FILE`, like sbatch's and
// docker's): one KEY=VALUE per line; blank lines and lines starting with '#'
// are skipped; an optional leading "export " is allowed; a value wrapped in
// matching single or double quotes loses them (no escapes, no expansion). A
// later line wins over an earlier one. KEY is a shell variable name (letters,
// digits and '_', not starting with a digit).
//
// Errors are InvalidArgument naming "source:line" and the bad text. Which
// variables a job may set at all is decided by the scheduler's and the agent's
// EnvPolicy, not here.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "aryl/result.h"

namespace aryl {

Result<std::map<std::string, std::string>> ParseEnvFile(std::string_view text, std::string_view source);
// Reads `path` and parses it; NotFound names the file when it cannot be read.
Result<std::map<std::string, std::string>> ReadEnvFile(const std::string& path);

}  // namespace aryl
