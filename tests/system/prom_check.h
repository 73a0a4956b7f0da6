// Helpers of the tests that check the scheduler's Prometheus output: promtool
// (Debian's prometheus package) and the metric families the Grafana dashboard
// queries.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>

namespace aryl::promcheck {

inline bool HavePromtool() { return std::system("command -v promtool >/dev/null 2>&1") == 0; }

// Runs `promtool check metrics` on `text`; returns its exit code and output.
inline std::pair<int, std::string> Promtool(const std::string& text) {
  namespace fs = std::filesystem;
  static int serial = 0;
  fs::path file = fs::temp_directory_path() /
                  ("aryl-metrics-" + std::to_string(::getpid()) + "-" + std::to_string(serial++) + ".txt");
  std::ofstream(file) << text;
  std::string cmd = "promtool check metrics < " + file.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while (p && (n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = p ? pclose(p) : -1;
  fs::remove(file);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// The aryl_* families deploy/grafana/aryl-cluster.json queries (histogram
// suffixes stripped); empty when the file cannot be read.
inline std::set<std::string> DashboardFamilies(const std::string& source_dir) {
  std::ifstream dash(source_dir + "/deploy/grafana/aryl-cluster.json");
  std::stringstream ds;
  ds << dash.rdbuf();
  const std::string json = ds.str();
  std::set<std::string> names;
  std::regex name_re("aryl_[a-z_]+");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), name_re); it != std::sregex_iterator(); ++it) {
    std::string name = it->str();
    for (std::string sfx : {"_bucket", "_sum", "_count"})
      if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0)
        name.resize(name.size() - sfx.size());
    names.insert(name);
  }
  return names;
}

}  // namespace aryl::promcheck
