// The value of one series on a scheduler's /metrics, for the live tests that
// scrape it (needs aryl_daemon_base for HttpGet).
#pragma once

#include <sstream>
#include <string>

#include "aryl/daemon/http_server.h"

namespace aryl::livetest {

// `series` is the name with its labels, as printed; -1 when the page cannot
// be read or has no such series.
inline double ScrapeValue(int http_port, const std::string& series) {
  auto got = daemon::HttpGet("127.0.0.1", http_port, "/metrics", 3);
  if (!got.ok()) return -1;
  std::istringstream in(got->second);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

}  // namespace aryl::livetest
