#include "aryl/sim/trace.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_set>

#include "csv_util.h"

namespace aryl::sim {
namespace internal {

Result<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError("error reading '" + path + "'");
  return ss.str();
}

}  // namespace internal

namespace {

using internal::ParseDouble;
using internal::ParseInt;
using internal::Split;
using internal::Trim;

enum Column { kJobId, kSubmit, kDuration, kNumGpu, kModel, kGpuType, kElastic, kMin, kMax, kRescale, kNumColumns };
constexpr const char* kColumnNames[kNumColumns] = {"job_id", "submission_time", "duration", "num_gpu",
                                                   "model", "gpu_type", "elastic", "min_workers",
                                                   "max_workers", "rescale"};

std::optional<bool> ParseBool(std::string_view s) {
  std::string v(Trim(s));
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "1" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "no") return false;
  return std::nullopt;
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// Parses one data row; returns the reason when it is bad.
Result<TraceJob> ParseRow(const std::vector<std::string>& fields, const int (&col)[kNumColumns]) {
  TraceJob job;
  auto field = [&](Column c) -> std::string_view { return col[c] < 0 ? std::string_view() : fields[col[c]]; };
  job.name = std::string(field(kJobId));
  if (job.name.empty()) return Status::InvalidArgument("job_id: empty");
  auto submit = ParseDouble(field(kSubmit));
  if (!submit) return Status::InvalidArgument("submission_time: not a number: " + Quote(field(kSubmit)));
  if (*submit < 0) return Status::InvalidArgument("submission_time: negative: " + Quote(field(kSubmit)));
  job.submit_time = *submit;
  auto duration = ParseDouble(field(kDuration));
  if (!duration) return Status::InvalidArgument("duration: not a number: " + Quote(field(kDuration)));
  if (*duration <= 0) return Status::InvalidArgument("duration: must be > 0: " + Quote(field(kDuration)));
  job.duration = *duration;
  auto gpus = ParseInt(field(kNumGpu));
  if (!gpus) return Status::InvalidArgument("num_gpu: not an integer: " + Quote(field(kNumGpu)));
  if (*gpus < 1 || *gpus > 1'000'000) return Status::InvalidArgument("num_gpu: must be >= 1: " + Quote(field(kNumGpu)));
  job.num_gpu = static_cast<int>(*gpus);
  job.model = std::string(field(kModel));
  if (!field(kGpuType).empty()) {
    for (std::string_view t : Split(field(kGpuType), '|')) {
      if (t.empty()) return Status::InvalidArgument("gpu_type: empty type in " + Quote(field(kGpuType)));
      job.gpu_types.emplace_back(t);
    }
  }
  if (!field(kElastic).empty()) {
    job.elastic = ParseBool(field(kElastic));
    if (!job.elastic) return Status::InvalidArgument("elastic: not a boolean: " + Quote(field(kElastic)));
  }
  for (Column c : {kMin, kMax}) {
    if (field(c).empty()) continue;
    auto v = ParseInt(field(c));
    if (!v || *v < 1 || *v > 1'000'000)
      return Status::InvalidArgument(std::string(kColumnNames[c]) + ": must be an integer >= 1: " + Quote(field(c)));
    (c == kMin ? job.min_workers : job.max_workers) = static_cast<int>(*v);
  }
  if (std::string r(Trim(field(kRescale))); r == "restart") {
    job.restart = true;
  } else if (!r.empty() && r != "inplace") {
    return Status::InvalidArgument("rescale: expected inplace or restart, got " + Quote(field(kRescale)));
  }
  int lo = job.min_workers.value_or(job.num_gpu);
  int hi = job.max_workers.value_or(job.num_gpu);
  if (lo > hi)
    return Status::InvalidArgument("min_workers " + std::to_string(lo) + " > max_workers " + std::to_string(hi));
  if (job.elastic.has_value() && !*job.elastic && (job.min_workers || job.max_workers) &&
      (lo != job.num_gpu || hi != job.num_gpu))
    return Status::InvalidArgument("inelastic job with min_workers/max_workers other than num_gpu");
  return job;
}

}  // namespace

Result<Trace> ParseTrace(std::string_view text, std::string_view source, const TraceReadOptions& options) {
  Trace trace;
  Status error;
  int col[kNumColumns];
  std::fill(std::begin(col), std::end(col), -1);
  std::size_t num_fields = 0;
  bool have_header = false;
  std::unordered_set<std::string> ids;

  internal::ForEachLine(text, [&](int line_no, std::string_view line) {
    std::string where = std::string(source) + ":" + std::to_string(line_no);
    if (Trim(line).empty() || Trim(line).front() == '#') return true;
    auto split = internal::SplitCsv(line);
    if (!split.ok()) {
      error = Status::InvalidArgument(where + ": " + split.status().message());
      return false;
    }
    const std::vector<std::string>& fields = *split;
    if (!have_header) {
      have_header = true;
      num_fields = fields.size();
      for (std::size_t i = 0; i < fields.size(); ++i) {
        bool known = false;
        for (int c = 0; c < kNumColumns; ++c) {
          if (fields[i] == kColumnNames[c]) {
            if (col[c] >= 0) {
              error = Status::InvalidArgument(where + ": header: column '" + std::string(fields[i]) + "' twice");
              return false;
            }
            col[c] = static_cast<int>(i);
            known = true;
          }
        }
        if (!known) {
          error = Status::InvalidArgument(where + ": header: unknown column '" + std::string(fields[i]) +
                                          "' (expected job_id,submission_time,duration,num_gpu"
                                          "[,model,gpu_type,elastic,min_workers,max_workers,rescale])");
          return false;
        }
      }
      for (int c = kJobId; c <= kNumGpu; ++c) {
        if (col[c] < 0) {
          error = Status::InvalidArgument(where + ": header: missing column '" + kColumnNames[c] + "'");
          return false;
        }
      }
      return true;
    }
    Result<TraceJob> job = Status::InvalidArgument("");
    if (fields.size() != num_fields) {
      job = Status::InvalidArgument("expected " + std::to_string(num_fields) + " columns, got " +
                                    std::to_string(fields.size()));
    } else {
      job = ParseRow(fields, col);
      if (job.ok() && !ids.insert(job->name).second)
        job = Status::InvalidArgument("duplicate job_id '" + job->name + "'");
    }
    if (!job.ok()) {
      if (!options.skip_bad_rows) {
        error = Status::InvalidArgument(where + ": " + job.status().message());
        return false;
      }
      trace.skipped.push_back({where, job.status().message()});
      return true;
    }
    job->source = where;
    trace.jobs.push_back(std::move(*job));
    return true;
  });
  if (!error.ok()) return error;
  if (!have_header) return Status::InvalidArgument(std::string(source) + ": empty trace (no header)");
  std::stable_sort(trace.jobs.begin(), trace.jobs.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.submit_time < b.submit_time; });
  return trace;
}

Result<Trace> ReadTraces(const std::vector<std::string>& paths, const TraceReadOptions& options) {
  if (paths.empty()) return Status::InvalidArgument("no trace files given");
  Trace merged;
  std::unordered_set<std::string> ids;
  for (const std::string& path : paths) {
    ARYL_ASSIGN_OR_RETURN(std::string text, internal::ReadFileToString(path));
    ARYL_ASSIGN_OR_RETURN(Trace one, ParseTrace(text, path, options));
    // Parsing sorted each file; re-sort the union below, keeping file order for ties.
    for (TraceJob& job : one.jobs) {
      if (!ids.insert(job.name).second) {
        std::string reason = "duplicate job_id '" + job.name + "' (also in an earlier trace file)";
        if (!options.skip_bad_rows) return Status::InvalidArgument(job.source + ": " + reason);
        merged.skipped.push_back({job.source, reason});
        continue;
      }
      merged.jobs.push_back(std::move(job));
    }
    for (BadRow& bad : one.skipped) merged.skipped.push_back(std::move(bad));
  }
  std::stable_sort(merged.jobs.begin(), merged.jobs.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.submit_time < b.submit_time; });
  return merged;
}

void ApplyWindow(Trace& trace, double start, double end) {
  std::erase_if(trace.jobs, [&](const TraceJob& j) { return j.submit_time < start || j.submit_time >= end; });
}

Status ApplyLoad(Trace& trace, double factor) {
  if (!(factor > 0) || !std::isfinite(factor))
    return Status::InvalidArgument("--load: must be a positive number, got " + std::to_string(factor));
  if (trace.jobs.empty()) return Status::Ok();
  double t0 = trace.jobs.front().submit_time;
  for (TraceJob& j : trace.jobs) j.submit_time = t0 + (j.submit_time - t0) / factor;
  return Status::Ok();
}

Result<std::pair<double, double>> ParseWindow(std::string_view text) {
  auto colon = text.find(':');
  if (colon == std::string_view::npos)
    return Status::InvalidArgument("--window: expected START:END in seconds, got '" + std::string(text) + "'");
  std::string_view a = Trim(text.substr(0, colon));
  std::string_view b = Trim(text.substr(colon + 1));
  double start = 0;
  double end = std::numeric_limits<double>::infinity();
  if (!a.empty()) {
    auto v = ParseDouble(a);
    if (!v || *v < 0) return Status::InvalidArgument("--window: bad START '" + std::string(a) + "'");
    start = *v;
  }
  if (!b.empty()) {
    auto v = ParseDouble(b);
    if (!v) return Status::InvalidArgument("--window: bad END '" + std::string(b) + "'");
    end = *v;
  }
  if (!(end > start)) return Status::InvalidArgument("--window: END must be > START in '" + std::string(text) + "'");
  return std::make_pair(start, end);
}

}  // namespace aryl::sim
