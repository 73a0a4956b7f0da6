#include "aryl/sched/throughput.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace aryl::sched {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> SplitCsv(std::string_view line) {
  std::vector<std::string_view> cells;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      cells.push_back(Trim(line.substr(start)));
      return cells;
    }
    cells.push_back(Trim(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

// Parses a number; "" and "nan" give nan. Returns false for anything else.
bool ParseCell(std::string_view cell, double* out) {
  if (cell.empty() || cell == "nan" || cell == "NaN" || cell == "NAN") {
    *out = std::nan("");
    return true;
  }
  std::string s(cell);
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

}  // namespace

Status ThroughputCatalog::AddTable(const std::string& model, const std::string& gpu_type,
                                   Table table) {
  const std::string where = "throughput table " + model + "/" + gpu_type;
  if (model.empty() || gpu_type.empty()) {
    return Status::InvalidArgument(where + ": empty model or GPU type name");
  }
  if (table.sizes.size() != table.values.size() || table.sizes.empty()) {
    return Status::InvalidArgument(where + ": " + std::to_string(table.sizes.size()) +
                                   " sizes but " + std::to_string(table.values.size()) +
                                   " values");
  }
  bool any = false;
  for (size_t i = 0; i < table.sizes.size(); ++i) {
    if (table.sizes[i] <= 0 || (i > 0 && table.sizes[i] <= table.sizes[i - 1])) {
      return Status::InvalidArgument(where + ": sizes must be ascending and > 0 (size " +
                                     std::to_string(table.sizes[i]) + ")");
    }
    double& v = table.values[i];
    if (std::isnan(v)) v = 0;
    if (v < 0 || std::isinf(v)) {
      return Status::InvalidArgument(where + ": throughput at size " +
                                     std::to_string(table.sizes[i]) + " is " + std::to_string(v));
    }
    any = any || v > 0;
  }
  if (!any) return Status::InvalidArgument(where + ": no allowed size (every cell empty, nan or 0)");
  tables_[{model, gpu_type}] = std::move(table);
  return Status::Ok();
}

Status ThroughputCatalog::SetRelativeSpeed(const std::string& gpu_type,
                                           const std::string& reference_type, double factor) {
  if (!(factor > 0) || std::isinf(factor)) {
    return Status::InvalidArgument("relative speed of " + gpu_type + " to " + reference_type +
                                   " must be > 0, got " + std::to_string(factor));
  }
  if (gpu_type == reference_type) {
    return Status::InvalidArgument("relative speed of " + gpu_type + " to itself");
  }
  relative_[gpu_type] = {reference_type, factor};
  return Status::Ok();
}

Result<ThroughputCatalog::Table> ThroughputCatalog::ParseCsv(std::string_view text,
                                                             const std::string& source,
                                                             const CsvOptions& options) {
  Table table;
  int line_no = 0;
  bool have_header = false;
  bool have_row = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    line = Trim(line);
    if (line.empty()) continue;
    const std::string at = source + ":" + std::to_string(line_no) + ": ";
    auto cells = SplitCsv(line);
    if (!have_header) {
      if (cells.size() < 2 || cells[0] != "global_batch_size") {
        return Status::Corruption(at + "expected header 'global_batch_size,<workers>,...'");
      }
      for (size_t i = 1; i < cells.size(); ++i) {
        double w = 0;
        if (!ParseCell(cells[i], &w) || std::isnan(w) || w <= 0 || w != std::floor(w) ||
            (!table.sizes.empty() && w <= table.sizes.back())) {
          return Status::Corruption(at + "bad worker count '" + std::string(cells[i]) +
                                    "' in header (positive ascending integers)");
        }
        table.sizes.push_back(static_cast<int>(w));
      }
      have_header = true;
      continue;
    }
    if (cells.size() != table.sizes.size() + 1) {
      return Status::Corruption(at + std::to_string(cells.size()) + " cells, expected " +
                                std::to_string(table.sizes.size() + 1));
    }
    double batch = 0;
    if (!ParseCell(cells[0], &batch) || std::isnan(batch) || batch <= 0) {
      return Status::Corruption(at + "bad global batch size '" + std::string(cells[0]) + "'");
    }
    std::vector<double> values;
    for (size_t i = 1; i < cells.size(); ++i) {
      double v = 0;
      if (!ParseCell(cells[i], &v) || v < 0 || std::isinf(v)) {
        return Status::Corruption(at + "bad throughput '" + std::string(cells[i]) +
                                  "' for " + std::to_string(table.sizes[i - 1]) + " workers");
      }
      values.push_back(std::isnan(v) ? 0.0 : v);
    }
    const bool largest = options.batch_size == ThroughputCsvOptions::kLargestBatch;
    if (have_row && !largest) continue;  // validate every row, keep the chosen one
    if (largest ? batch > table.batch
                : options.batch_size == 0 || static_cast<int>(batch) == options.batch_size) {
      bool any = false;
      for (double v : values) any = any || v > 0;
      if (!any) {
        return Status::Corruption(at + "no allowed size: every cell is empty, nan or 0");
      }
      table.values = std::move(values);
      table.batch = batch;
      have_row = true;
    }
  }
  if (!have_header) return Status::Corruption(source + ":1: empty table");
  if (!have_row) {
    return Status::Corruption(source + ":" + std::to_string(line_no) + ": " +
                              (options.batch_size <= 0
                                   ? std::string("no data row")
                                   : "no row for global batch size " +
                                         std::to_string(options.batch_size)));
  }
  return table;
}

Result<ThroughputCatalog> ThroughputCatalog::LoadCsvDir(const std::string& dir,
                                                        const CsvOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::NotFound("throughput directory " + dir + " does not exist");
  }
  ThroughputCatalog catalog;
  std::vector<fs::path> files;
  for (const auto& type_dir : fs::directory_iterator(dir, ec)) {
    if (!type_dir.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(type_dir.path(), ec)) {
      if (f.path().extension() == ".csv") files.push_back(f.path());
    }
  }
  std::sort(files.begin(), files.end());  // deterministic error reporting
  for (const auto& path : files) {
    std::ifstream in(path);
    if (!in) return Status::IoError("cannot read " + path.string());
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string type = path.parent_path().filename().string();
    const std::string model = path.stem().string();
    ARYL_ASSIGN_OR_RETURN(Table table, ParseCsv(buffer.str(), path.string(), options));
    ARYL_RETURN_IF_ERROR(catalog.AddTable(model, type, std::move(table)));
  }
  if (catalog.tables_.empty()) return Status::NotFound("no <TYPE>/<model>.csv tables in " + dir);
  return catalog;
}

double ThroughputCatalog::Interpolate(const Table& t, int w) {
  if (w <= 0) return 0;
  const auto& s = t.sizes;
  const auto& v = t.values;
  if (w < s.front()) return v.front() * w / s.front();
  if (w >= s.back()) return v.back();  // flat above the largest size (0 if not allowed)
  auto it = std::lower_bound(s.begin(), s.end(), w);
  size_t hi = it - s.begin();
  if (s[hi] == w) return v[hi];
  size_t lo = hi - 1;
  if (v[lo] <= 0 || v[hi] <= 0) return 0;
  double f = static_cast<double>(w - s[lo]) / (s[hi] - s[lo]);
  return v[lo] + f * (v[hi] - v[lo]);
}

double ThroughputCatalog::Throughput(const std::string& model, const std::string& gpu_type,
                                     int workers) const {
  auto it = tables_.find({model, gpu_type});
  if (it != tables_.end()) return Interpolate(it->second, workers);
  auto rel = relative_.find(gpu_type);
  if (rel == relative_.end()) return 0;
  auto ref = tables_.find({model, rel->second.first});
  if (ref == tables_.end()) return 0;
  return Interpolate(ref->second, workers) * rel->second.second;
}

bool ThroughputCatalog::HasModel(const std::string& model) const {
  auto it = tables_.lower_bound({model, std::string()});
  return it != tables_.end() && it->first.first == model;
}

std::vector<std::string> ThroughputCatalog::Models() const {
  std::vector<std::string> out;
  for (const auto& [key, table] : tables_) {
    if (out.empty() || out.back() != key.first) out.push_back(key.first);
  }
  return out;
}

std::vector<std::string> ThroughputCatalog::TypesWithTable(const std::string& model) const {
  std::vector<std::string> out;
  for (auto it = tables_.lower_bound({model, std::string()});
       it != tables_.end() && it->first.first == model; ++it) {
    out.push_back(it->first.second);
  }
  return out;
}

}  // namespace aryl::sched
