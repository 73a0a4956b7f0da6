// ThroughputCatalog: how fast a model trains on w GPUs of a type (iterations/s).
//
// One table per (model, GPU type): measured worker counts -> iterations/s. A
// cell that is empty, nan or 0 means "this size is not allowed" (the
// measurement failed or the batch does not split). Sizes between measured
// points are interpolated:
//   - between two measured sizes a < w < b, linearly between thr(a) and thr(b),
//     and only when both a and b are allowed (otherwise w is not allowed);
//   - below the smallest measured size s0, linearly from the origin:
//     thr(w) = thr(s0) * w / s0;
//   - above the largest measured size, flat (thr(w) = thr(largest)) when the
//     largest is allowed, so a job never speeds up past what was measured;
//     not allowed otherwise.
// A GPU type without a table for a model uses another type's table scaled by a
// relative speed (SetRelativeSpeed("T4", "A100", 0.3): T4 runs at 0.3x A100).
//
// CSV format (the measured tables in data/throughput/<TYPE>/<model>.csv):
//   global_batch_size,1,2,4,8,16,32,64
//   <batch>,<thr at 1>,<thr at 2>,...
// One row per global batch size; ThroughputCsvOptions::batch_size picks the row (0 = the
// first data row, kLargestBatch = the row of the largest global batch). With a
// fixed global batch, more workers means a smaller batch per worker, so the
// first (smallest-batch) row flattens out at 8-32 workers; the largest-batch
// row is the one that matches jobs that scale out. Errors name the file and line.
//
// Thread safety: immutable after loading; share as shared_ptr<const ...>.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl::sched {

struct ThroughputCsvOptions {
  static constexpr int kLargestBatch = -1;
  int batch_size = 0;  // the row with this global batch size; 0 = the first row;
                       // kLargestBatch = the row with the largest batch
};

class ThroughputCatalog {
 public:
  struct Table {
    std::vector<int> sizes;      // ascending, > 0
    std::vector<double> values;  // iterations/s per size; 0 = size not allowed
    double batch = 0;            // the row's global batch size (ParseCsv); 0 = not given
  };
  using CsvOptions = ThroughputCsvOptions;

  // Errors: sizes not ascending or not > 0, lengths differ, negative or infinite
  // values, no allowed cell at all. nan cells are stored as 0 (not allowed).
  Status AddTable(const std::string& model, const std::string& gpu_type, Table table);
  // `gpu_type` uses `reference_type`'s table times `factor` for models that have
  // no table of their own on `gpu_type`. Errors: factor <= 0 or not finite.
  Status SetRelativeSpeed(const std::string& gpu_type, const std::string& reference_type,
                          double factor);

  // Parses one CSV table; `source` names it in errors ("A100/bert.csv").
  static Result<Table> ParseCsv(std::string_view text, const std::string& source,
                                const CsvOptions& options = {});
  // Loads every <dir>/<TYPE>/<model>.csv. Errors: missing dir, unreadable file,
  // any bad table (file:line).
  static Result<ThroughputCatalog> LoadCsvDir(const std::string& dir,
                                              const CsvOptions& options = {});

  // Iterations/s of `model` on `workers` GPUs of `gpu_type`; 0 when the size is
  // not allowed, the model is unknown, or the type has neither a table nor a
  // relative speed.
  double Throughput(const std::string& model, const std::string& gpu_type, int workers) const;
  bool HasModel(const std::string& model) const;
  std::vector<std::string> Models() const;
  // Types with a table of their own for `model`.
  std::vector<std::string> TypesWithTable(const std::string& model) const;

 private:
  static double Interpolate(const Table& table, int workers);
  std::map<std::pair<std::string, std::string>, Table> tables_;  // (model, type)
  std::map<std::string, std::pair<std::string, double>> relative_;  // type -> (ref, factor)
};

}  // namespace aryl::sched
