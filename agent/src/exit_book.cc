// Unacknowledged worker exits and exit reports (exit_book.h).
#include "exit_book.h"

namespace aryl::agent {

namespace p = aryl::protocol;

std::vector<p::WorkerExited> ExitBook::Unacked() const {
  std::vector<p::WorkerExited> out;
  for (const auto& [key, ex] : unacked_) out.push_back(ex);
  return out;
}

std::vector<p::WorkerExited> ExitBook::DueForResend(double now) {
  if (unacked_.empty() || now - last_resend_ < kResendSeconds) return {};
  last_resend_ = now;
  return Unacked();
}

p::WorkerExited ExitReport(const std::string& agent_id, p::JobId job, p::WorkerId worker, std::int64_t generation,
                           const ExitInfo& ex, bool runtime, const std::optional<p::WorkerDone>& done) {
  p::WorkerExited m;
  m.agent_id = agent_id;
  m.job = job;
  m.worker = worker;
  m.generation = generation;
  if (ex.signal != 0) m.signal = ex.signal;
  else m.exit_code = ex.exit_code;
  m.runtime = runtime;
  if (done) {
    m.outcome = done->outcome;
    m.step = done->step;
  }
  return m;
}

p::WorkerExited LaunchFailure(const std::string& agent_id, p::JobId job, p::WorkerId worker, std::int64_t generation,
                              const std::string& error) {
  p::WorkerExited ex;
  ex.agent_id = agent_id;
  ex.job = job;
  ex.worker = worker;
  ex.generation = generation;
  ex.exit_code = 127;
  ex.error = error;
  return ex;
}

}  // namespace aryl::agent
