#include "stdout_progress.h"

#include <algorithm>
#include <cmath>
#include <regex>

namespace aryl::agent {

std::optional<ProgressLine> ParseProgressLine(const std::string& line) {
  static const std::regex kStep(R"((?:^|\s)step[=: ]\s*(\d+))");
  static const std::regex kLoss(R"((?:^|\s)loss[=: ]\s*([-+0-9.eE]+|nan))");
  static const std::regex kRate(R"((?:^|\s)(?:steps_per_second|steps/s|rate)[=: ]\s*([-+0-9.eE]+))");
  static const std::regex kStepTime(R"((?:^|\s)step_s[=: ]\s*([-+0-9.eE]+))");
  std::smatch m;
  if (!std::regex_search(line, m, kStep)) return std::nullopt;
  ProgressLine out;
  try {
    out.step = std::stoll(m[1].str());
    if (std::regex_search(line, m, kLoss)) out.loss = m[1].str() == "nan" ? NAN : std::stod(m[1].str());
    if (std::regex_search(line, m, kStepTime)) {
      double s = std::stod(m[1].str());
      if (s > 0 && std::isfinite(s)) {
        out.step_s = s;
        out.rate = 1.0 / s;
      }
    } else if (std::regex_search(line, m, kRate)) {
      double r = std::stod(m[1].str());
      out.rate = std::isfinite(r) ? std::max(0.0, r) : 0;
    }
  } catch (const std::exception&) {
    return std::nullopt;  // a number out of range: not a progress line
  }
  return out;
}

protocol::StepTimer::Options StdoutProgress::TimerOptions() {
  protocol::StepTimer::Options o;
  o.warmup_steps = 2;
  o.min_steps = 8;
  o.min_seconds = 0;
  return o;
}

std::optional<ProgressLine> StdoutProgress::Read(const std::string& path, std::int64_t generation, int world) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  in.seekg(offset_);
  std::optional<ProgressLine> newest;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a partial line: read it next time
    offset_ = in.tellg();
    auto p = ParseProgressLine(line);
    if (!p) continue;
    if (p->step_s > 0) timer_.StepTime(p->step_s, generation, world);
    newest = p;
  }
  return newest;
}

}  // namespace aryl::agent
