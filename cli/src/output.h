// How `aryl` prints: -o table|wide|json|yaml|csv|name, --no-headers, times in
// the local zone (or UTC with --utc), and terminal control codes only when
// stdout is a TTY. json and yaml print the reply's document (PrintDocument);
// csv and name print a command's table (every column as RFC 4180 CSV; the
// first column only, one value a line, for `xargs` and `$(...)`).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "aryl/result.h"

namespace aryl::cli {

enum class Format { kTable, kWide, kJson, kYaml, kCsv, kName };

// json or yaml: the command prints its reply as a document, not a table.
inline bool IsDocument(Format f) { return f == Format::kJson || f == Format::kYaml; }

struct OutputOptions {
  Format format = Format::kTable;
  bool headers = true;
  bool utc = false;
};

// "table", "wide", "json", "yaml", "csv" or "name"; anything else is an
// InvalidArgument naming it.
Result<Format> ParseFormat(const std::string& text);

// `doc` as JSON (`indent` < 0: one line) or, with Format::kYaml, as YAML (block
// style; every string double-quoted, so that YAML reads back exactly the JSON
// value), then a newline, on stdout.
void PrintDocument(const nlohmann::json& doc, Format format, int indent = 2);
std::string ToYaml(const nlohmann::json& doc);

// True when stdout is a terminal (and $TERM is not "dumb").
bool StdoutIsTty();

// A table with stable column names. A column marked wide is shown only with
// -o wide. Cells are padded to the widest one; no control codes.
class Table {
 public:
  struct Column {
    std::string name;
    bool wide = false;
  };
  explicit Table(std::vector<Column> columns);
  void Add(std::vector<std::string> cells);  // one cell per column, wide ones included
  std::string Render(const OutputOptions& out) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// Seconds since the Unix epoch as "2026-12-01 09:30:00" in the local zone, or
// "2026-12-01 09:30:00Z" with utc; "-" for 0.
std::string FormatTime(double epoch_seconds, bool utc);

// Time since `epoch_seconds` as 45s, 12m, 3.5h.
std::string Age(double epoch_seconds);

std::string Fixed(double v, int digits = 2);

}  // namespace aryl::cli
