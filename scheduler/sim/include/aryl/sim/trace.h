// Job traces: the ITP format and Aryl's own CSV, read into one merged stream.
//
// Both formats are CSV with a header naming the columns, in any order:
//   required  job_id, submission_time, duration, num_gpu      (the ITP format)
//   optional  model, gpu_type, elastic, min_workers, max_workers, rescale  (Aryl's format)
// `gpu_type` lists the GPU types a job may use, separated by '|' (empty: any).
// `elastic` is 0/1/true/false/yes/no; empty min/max default to num_gpu.
// `rescale` is how an elastic job changes size: inplace (default: it links the
// runtime) or restart (torchrun style: stopped and started again at the new
// size, paying the restart pause).
// Rows need not be sorted; several files merge into one stream ordered by
// (submission_time, file order, line).
//
// A bad row (wrong column count, non-numeric or negative time, duration <= 0,
// num_gpu < 1, duplicate job_id, min > max, ...) is an error naming file:line and
// the reason. With skip_bad_rows the row is dropped and recorded instead.
//
// Shared by aryl-sim and the live daemon. Thread safety: free functions on values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/result.h"

namespace aryl::sim {

struct TraceJob {
  std::string name;          // job_id from the trace (unique across the merged stream)
  double submit_time = 0;    // seconds
  double duration = 0;       // seconds the job ran at num_gpu GPUs
  int num_gpu = 1;           // requested GPUs
  std::string model;         // empty: assigned from the job id
  std::vector<std::string> gpu_types;  // empty: any type
  std::optional<bool> elastic;         // unset: decided by --elastic-fraction
  std::optional<int> min_workers;
  std::optional<int> max_workers;
  bool restart = false;      // rescale column: restart (torchrun style) instead of inplace
  std::string source;        // "file:line", for messages
};

struct BadRow {
  std::string where;   // "file:line"
  std::string reason;
};

struct Trace {
  std::vector<TraceJob> jobs;   // sorted by (submit_time, file order, line)
  std::vector<BadRow> skipped;  // rows dropped under skip_bad_rows
};

struct TraceReadOptions {
  bool skip_bad_rows = false;
};

// Parses CSV text; `source` names it in messages ("cluster01.csv").
Result<Trace> ParseTrace(std::string_view text, std::string_view source,
                         const TraceReadOptions& options = {});
// Reads and merges several files. Duplicate job ids across files are bad rows.
Result<Trace> ReadTraces(const std::vector<std::string>& paths,
                         const TraceReadOptions& options = {});

// Keeps the jobs submitted in [start, end) (times are not shifted).
void ApplyWindow(Trace& trace, double start, double end);
// Compresses inter-arrival times by `factor` (> 1: more load), keeping the first
// submission time fixed: t' = t0 + (t - t0) / factor.
Status ApplyLoad(Trace& trace, double factor);
// Parses "START:END" (seconds; either side may be empty for open).
Result<std::pair<double, double>> ParseWindow(std::string_view text);

}  // namespace aryl::sim
