#include "output.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <iomanip>
#include <sstream>

namespace aryl::cli {

Result<Format> ParseFormat(const std::string& text) {
  if (text == "table") return Format::kTable;
  if (text == "wide") return Format::kWide;
  if (text == "json") return Format::kJson;
  return Status::InvalidArgument("-o '" + text + "': expected table, wide or json");
}

bool StdoutIsTty() {
  const char* term = std::getenv("TERM");
  if (term && std::string(term) == "dumb") return false;
  return isatty(STDOUT_FILENO) == 1;
}

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::Add(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render(const OutputOptions& out) const {
  std::vector<size_t> shown;
  for (size_t i = 0; i < columns_.size(); ++i)
    if (!columns_[i].wide || out.format == Format::kWide) shown.push_back(i);
  std::vector<size_t> width(columns_.size(), 0);
  for (size_t i : shown) {
    if (out.headers) width[i] = columns_[i].name.size();
    for (const auto& r : rows_) width[i] = std::max(width[i], r[i].size());
  }
  std::ostringstream os;
  auto line = [&](auto cell) {
    for (size_t k = 0; k < shown.size(); ++k) {
      const std::string& c = cell(shown[k]);
      os << c;
      if (k + 1 < shown.size()) os << std::string(width[shown[k]] - c.size() + 2, ' ');
    }
    os << "\n";
  };
  if (out.headers) line([&](size_t i) -> const std::string& { return columns_[i].name; });
  for (const auto& r : rows_) line([&](size_t i) -> const std::string& { return r[i]; });
  return os.str();
}

std::string FormatTime(double epoch_seconds, bool utc) {
  if (!(epoch_seconds > 0)) return "-";
  std::time_t t = static_cast<std::time_t>(epoch_seconds);
  std::tm tm{};
  if (utc) gmtime_r(&t, &tm);
  else localtime_r(&t, &tm);
  std::ostringstream os;
  os << std::put_time(&tm, "%Y-%m-%d %H:%M:%S") << (utc ? "Z" : "");
  return os.str();
}

std::string Age(double epoch_seconds) {
  double d = std::max(0.0, static_cast<double>(std::time(nullptr)) - epoch_seconds);
  if (d < 120) return Fixed(d, 0) + "s";
  if (d < 7200) return Fixed(d / 60, 0) + "m";
  return Fixed(d / 3600, 1) + "h";
}

std::string Fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

}  // namespace aryl::cli
