#include "output.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace aryl::cli {

Result<Format> ParseFormat(const std::string& text) {
  if (text == "table") return Format::kTable;
  if (text == "wide") return Format::kWide;
  if (text == "json") return Format::kJson;
  if (text == "yaml") return Format::kYaml;
  if (text == "csv") return Format::kCsv;
  if (text == "name") return Format::kName;
  return Status::InvalidArgument("-o '" + text + "': expected table, wide, json, yaml, csv or name");
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

namespace {

std::string CsvCell(const std::string& c) {
  if (c.find_first_of(",\"\r\n") == std::string::npos) return c;
  std::string q = "\"";
  for (char ch : c) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

bool PlainKey(const std::string& k) {
  if (k.empty()) return false;
  for (char c : k)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return !std::isdigit(static_cast<unsigned char>(k[0]));
}

bool Leaf(const nlohmann::json& v) { return !v.is_structured() || v.empty(); }

std::string YamlScalar(const nlohmann::json& v) {
  if (v.is_object()) return "{}";
  if (v.is_array()) return "[]";
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void YamlBlock(const nlohmann::json& v, int indent, std::string& out) {
  const std::string pad(indent, ' ');
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) {
      out += pad + (PlainKey(k) ? k : nlohmann::json(k).dump()) + ":";
      if (Leaf(x)) {
        out += " " + YamlScalar(x) + "\n";
      } else {
        out += "\n";
        YamlBlock(x, indent + 2, out);
      }
    }
    return;
  }
  for (const auto& x : v) {
    if (Leaf(x)) {
      out += pad + "- " + YamlScalar(x) + "\n";
    } else if (x.is_object()) {
      // The object's first key goes on the dash's line.
      std::string inner;
      YamlBlock(x, indent + 2, inner);
      out += pad + "- " + inner.substr(indent + 2);
    } else {
      out += pad + "-\n";
      YamlBlock(x, indent + 2, out);
    }
  }
}

}  // namespace

std::string ToYaml(const nlohmann::json& doc) {
  if (Leaf(doc)) return YamlScalar(doc) + "\n";
  std::string out;
  YamlBlock(doc, 0, out);
  return out;
}

void PrintDocument(const nlohmann::json& doc, Format format, int indent) {
  if (format == Format::kYaml) std::cout << ToYaml(doc);
  else std::cout << doc.dump(indent) << "\n";
}

std::string Table::Render(const OutputOptions& out) const {
  if (out.format == Format::kCsv || out.format == Format::kName) {
    std::ostringstream os;
    if (out.format == Format::kCsv && out.headers)
      for (size_t i = 0; i < columns_.size(); ++i) os << (i ? "," : "") << CsvCell(columns_[i].name) << (i + 1 == columns_.size() ? "\n" : "");
    for (const auto& r : rows_) {
      if (out.format == Format::kName) {
        os << (r.empty() ? "" : r[0]) << "\n";
        continue;
      }
      for (size_t i = 0; i < r.size(); ++i) os << (i ? "," : "") << CsvCell(r[i]);
      os << "\n";
    }
    return os.str();
  }
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
    std::string text;
    for (size_t k = 0; k < shown.size(); ++k) {
      const std::string& c = cell(shown[k]);
      text += c;
      if (k + 1 < shown.size()) text += std::string(width[shown[k]] - c.size() + 2, ' ');
    }
    // No trailing blanks where the last cells are empty (REASON of a running job).
    text.erase(text.find_last_not_of(' ') + 1);
    os << text << "\n";
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
