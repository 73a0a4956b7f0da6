// The agent's side of `aryl logs` (protocol/inspect.h, steps 5-6): a chunk of
// a worker's log file, read from the agent's log directory, where the agent
// writes each worker's output (<log dir>/job-<job>/worker-<worker>.out|.err).
// The file is named from the job and worker numbers only, so a request cannot
// reach any other path.
#pragma once

#include <string>

#include "aryl/protocol/messages.h"

namespace aryl::agent {

// The path of a worker's stdout ("stdout") or stderr ("stderr") log.
std::string WorkerLogPath(const std::string& log_dir, protocol::JobId job, protocol::WorkerId worker,
                          const std::string& stream);

// At most m.max_bytes from m.offset, or an error in the reply: NotFound when the
// file is gone, OutOfRange when the offset is past its end, IoError otherwise.
// Never blocks beyond the read itself.
protocol::LogReadReply ReadWorkerLog(const std::string& log_dir, const std::string& agent_id,
                                     const protocol::LogRead& m);

}  // namespace aryl::agent
