#include "client_config.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "aryl/flags.h"
#include "aryl/protocol/scheduler_client.h"

namespace aryl::cli {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// A TOML basic string "..." with \" \\ \n \t escapes; returns nullopt if malformed.
// `rest` receives what follows the closing quote.
std::optional<std::string> ParseQuoted(const std::string& v, std::string& rest) {
  if (v.empty() || v[0] != '"') return std::nullopt;
  std::string out;
  for (size_t i = 1; i < v.size(); ++i) {
    char c = v[i];
    if (c == '"') {
      rest = v.substr(i + 1);
      return out;
    }
    if (c == '\\' && i + 1 < v.size()) {
      char n = v[++i];
      if (n == 'n') out += '\n';
      else if (n == 't') out += '\t';
      else if (n == '"' || n == '\\') out += n;
      else return std::nullopt;
    } else {
      out += c;
    }
  }
  return std::nullopt;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

Status ApplyConfigText(const std::string& text, const std::string& path, ClientSettings& s) {
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    std::string line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) return Status::InvalidArgument(where + "expected key = value, got '" + line + "'");
    std::string key = Trim(line.substr(0, eq));
    std::string value = Trim(line.substr(eq + 1));
    std::string rest;
    std::optional<std::string> str = ParseQuoted(value, rest);
    if (str) {
      rest = Trim(rest);
      if (!rest.empty() && rest[0] != '#') return Status::InvalidArgument(where + "text after the value of '" + key + "'");
    }
    if (key == "scheduler" || key == "curve_key" || key == "curve_server_key") {
      if (!str) return Status::InvalidArgument(where + key + ": expected a quoted string, got " + value);
      if (key == "scheduler") {
        auto list = protocol::ParseSchedulerEndpoints(*str);
        if (!list.ok()) return Status::InvalidArgument(where + "scheduler: " + list.status().message());
      }
      (key == "scheduler" ? s.scheduler : key == "curve_key" ? s.curve_key : s.curve_server_key) = *str;
    } else if (key == "timeout") {
      std::string num = Trim(value.substr(0, value.find('#')));
      char* end = nullptr;
      double t = std::strtod(num.c_str(), &end);
      if (num.empty() || *end != '\0' || !std::isfinite(t) || t <= 0)
        return Status::InvalidArgument(where + "timeout: expected a number of seconds > 0, got " + value);
      s.timeout = t;
    } else {
      return Status::InvalidArgument(where + "unknown key '" + key +
                                     "' (known: scheduler, curve_key, curve_server_key, timeout)");
    }
  }
  return Status::Ok();
}

Result<ClientSettings> LoadClientSettings() {
  ClientSettings s;
  std::vector<std::string> files;
  if (!Env("ARYL_CONFIG").empty()) {
    files.push_back(Env("ARYL_CONFIG"));
  } else {
    files.push_back("/etc/aryl/aryl.toml");
    if (!Env("XDG_CONFIG_HOME").empty()) files.push_back(Env("XDG_CONFIG_HOME") + "/aryl/config");
    else if (!Env("HOME").empty()) files.push_back(Env("HOME") + "/.config/aryl/config");
  }
  for (size_t i = 0; i < files.size(); ++i) {
    std::ifstream f(files[i]);
    if (!f) {
      // A missing default file is fine; a missing $ARYL_CONFIG is a mistake.
      if (!Env("ARYL_CONFIG").empty()) return Status::NotFound("$ARYL_CONFIG " + files[i] + ": cannot open");
      continue;
    }
    std::stringstream text;
    text << f.rdbuf();
    ARYL_RETURN_IF_ERROR(ApplyConfigText(text.str(), files[i], s));
  }
  if (!Env("ARYL_SCHEDULER").empty()) {
    s.scheduler = Env("ARYL_SCHEDULER");
    auto list = protocol::ParseSchedulerEndpoints(s.scheduler);
    if (!list.ok()) return Status::InvalidArgument("$ARYL_SCHEDULER: " + list.status().message());
  }
  if (!Env("ARYL_CURVE_KEY").empty()) s.curve_key = Env("ARYL_CURVE_KEY");
  if (!Env("ARYL_CURVE_SERVER_KEY").empty()) s.curve_server_key = Env("ARYL_CURVE_SERVER_KEY");
  return s;
}

const ClientSettings& ClientDefaultsOrExit(const std::string& program) {
  static const ClientSettings settings = [&] {
    auto s = LoadClientSettings();
    if (!s.ok()) UsageError(program, s.status().message());
    return *s;
  }();
  return settings;
}

}  // namespace aryl::cli
