#include "aryl/env_file.h"

#include <fstream>
#include <sstream>

namespace aryl {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool IsName(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<std::map<std::string, std::string>> ParseEnvFile(std::string_view text, std::string_view source) {
  std::map<std::string, std::string> env;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = std::string(source) + ":" + std::to_string(line_no) + ": ";
    if (line.substr(0, 7) == "export ") line = Trim(line.substr(7));
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos)
      return Status::InvalidArgument(where + "expected KEY=VALUE, got '" + std::string(line) + "'");
    std::string_view key = Trim(line.substr(0, eq));
    std::string_view value = Trim(line.substr(eq + 1));
    if (!IsName(key))
      return Status::InvalidArgument(where + "'" + std::string(key) +
                                     "' is not a variable name (letters, digits and _, not starting with a digit)");
    if (!value.empty() && (value.front() == '"' || value.front() == '\'')) {
      if (value.size() < 2 || value.back() != value.front())
        return Status::InvalidArgument(where + "unterminated quote in the value of " + std::string(key));
      value = value.substr(1, value.size() - 2);
    }
    env[std::string(key)] = std::string(value);
  }
  return env;
}

Result<std::map<std::string, std::string>> ReadEnvFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("--env-file '" + path + "': cannot open it");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError("--env-file '" + path + "': read error");
  return ParseEnvFile(ss.str(), path);
}

}  // namespace aryl
