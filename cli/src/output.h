// How `aryl` prints: -o table|wide|json, --no-headers, times in the local zone
// (or UTC with --utc), and terminal control codes only when stdout is a TTY.
#pragma once

#include <string>
#include <vector>

#include "aryl/result.h"

namespace aryl::cli {

enum class Format { kTable, kWide, kJson };

struct OutputOptions {
  Format format = Format::kTable;
  bool headers = true;
  bool utc = false;
};

// "table", "wide" or "json"; anything else is an InvalidArgument naming it.
Result<Format> ParseFormat(const std::string& text);

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
