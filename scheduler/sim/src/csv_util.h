// Small CSV helpers shared by the trace and demand readers (internal).
#pragma once

#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/result.h"

namespace aryl::sim::internal {

inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Splits on `sep`; fields are trimmed. No quoting: for the small inline
// formats (cluster specs, gpu_type lists). CSV files go through SplitCsv.
inline std::vector<std::string_view> Split(std::string_view line, char sep = ',') {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    std::size_t pos = line.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(Trim(line.substr(start)));
      break;
    }
    out.push_back(Trim(line.substr(start, pos - start)));
    start = pos + 1;
  }
  return out;
}

inline std::optional<double> ParseDouble(std::string_view s) {
  s = Trim(s);
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

inline std::optional<long long> ParseInt(std::string_view s) {
  s = Trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  long long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

// One CSV record (RFC 4180) as its fields: separated by commas; a field in
// double quotes may hold commas, line breaks and "" for one quote, and keeps
// its spaces; unquoted fields are trimmed. A quote inside an unquoted field, or
// text after a closing quote, is an error naming the column.
inline Result<std::vector<std::string>> SplitCsv(std::string_view record) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (true) {
    while (i < record.size() && (record[i] == ' ' || record[i] == '\t')) ++i;
    std::string field;
    if (i < record.size() && record[i] == '"') {
      std::size_t open = i++;
      bool closed = false;
      while (i < record.size()) {
        if (record[i] == '"') {
          if (i + 1 < record.size() && record[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          closed = true;
          ++i;
          break;
        }
        field += record[i++];
      }
      if (!closed)
        return Status::InvalidArgument("column " + std::to_string(out.size() + 1) + ": the quote opened at character " +
                                       std::to_string(open + 1) + " is not closed");
      while (i < record.size() && (record[i] == ' ' || record[i] == '\t' || record[i] == '\r')) ++i;
      if (i < record.size() && record[i] != ',')
        return Status::InvalidArgument("column " + std::to_string(out.size() + 1) + ": text after the closing quote");
    } else {
      std::size_t end = record.find(',', i);
      std::string_view raw = record.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
      if (raw.find('"') != std::string_view::npos)
        return Status::InvalidArgument("column " + std::to_string(out.size() + 1) +
                                       ": a quote inside an unquoted field (quote the whole field and double inner quotes)");
      field = std::string(Trim(raw));
      i = end == std::string_view::npos ? record.size() : end;
    }
    out.push_back(std::move(field));
    if (i >= record.size()) break;
    ++i;  // the comma
  }
  return out;
}

// Calls fn(line_number, record) for each CSV record (line_number: its first
// line, 1-based), handling \n and \r\n. A record spans lines while a double
// quote is open (RFC 4180); a line starting with '#' is a comment and always
// ends at its line break.
template <typename Fn>
void ForEachLine(std::string_view text, Fn&& fn) {
  std::size_t start = 0;
  int line_no = 0;
  while (start < text.size()) {
    ++line_no;
    const int first_line = line_no;
    std::size_t pos = start;
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
    const bool comment = pos < text.size() && text[pos] == '#';
    bool quoted = false;
    std::size_t end = start;
    for (; end < text.size(); ++end) {
      char c = text[end];
      if (c == '"' && !comment) {
        quoted = !quoted;
      } else if (c == '\n') {
        if (!quoted) break;
        ++line_no;
      }
    }
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!fn(first_line, line)) return;
    start = end + 1;
  }
}

Result<std::string> ReadFileToString(const std::string& path);

}  // namespace aryl::sim::internal
