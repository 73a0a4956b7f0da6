// What aryl-run shows of a job's own output: the failing worker's last
// stderr lines (read from its agent through the scheduler, as `aryl logs`)
// and rank 0's log followed from this machine.
#pragma once

#include <cstddef>
#include <ios>
#include <ostream>
#include <string>
#include <vector>

#include "aryl/protocol/scheduler_client.h"

namespace aryl::cli {

// The last `n` lines of `text`. When the window cut its first line (`cut`),
// that part is dropped if a whole line follows it (else it is all there is).
std::vector<std::string> LastLines(const std::string& text, std::size_t n, bool cut);

// Prints to stderr why `end` failed job `job`: its stderr's last 20 lines
// (within its last 4 KiB), fetched from its agent through the scheduler
// (bounded: two calls of 3 s), and where the rest is (`more`).
void ReportFailure(protocol::SchedulerClient& client, protocol::JobId job, const protocol::WorkerEnd& end,
                   const std::string& more);

// Follows one file from the start, printing whole lines.
class Tail {
 public:
  void Follow(const std::string& path);
  void Pump(std::ostream& out);

 private:
  std::string path_;
  std::streamoff offset_ = 0;
};

}  // namespace aryl::cli
