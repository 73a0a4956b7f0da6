// Which environment variables a job may set for its workers (docs/security.md).
//
// A job's env reaches a process the agent forks, possibly as root: a variable
// that makes the dynamic loader or an interpreter load code of the submitter's
// choosing (LD_PRELOAD, PYTHONPATH, ...) turns "run this command" into "run this
// code inside any command". The default policy denies those; an agent (and the
// scheduler, so that a submission fails at once with the reason) can replace the
// deny list and allow exceptions. Names the agent sets itself (ARYL_*,
// CUDA_VISIBLE_DEVICES) are overwritten by the agent anyway.
//
// Patterns: an exact name, or a prefix ending in '*' ("LD_*").
#pragma once

#include <map>
#include <string>
#include <vector>

#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl::protocol {

struct EnvPolicy {
  std::vector<std::string> deny = DefaultDeny();
  std::vector<std::string> allow{};  // wins over deny

  static std::vector<std::string> DefaultDeny();
  // "A,B*,C" -> patterns; empty items are skipped.
  static std::vector<std::string> ParseList(const std::string& comma_separated);
  // From --env-deny / --env-allow: comma lists; an empty deny keeps the
  // default list, "none" denies nothing.
  static EnvPolicy FromFlags(const std::string& deny, const std::string& allow);

  bool Allows(const std::string& name) const;
  // InvalidArgument naming the first refused variable (field 'env').
  Status Check(const std::map<std::string, std::string>& env) const;
};

}  // namespace aryl::protocol
