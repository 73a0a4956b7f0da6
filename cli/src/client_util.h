// Shared by aryl and aryl-run: connecting to the scheduler (with CURVE when
// keys are given), tables, and turning replies into exit codes.
#pragma once

#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/security.h"
#include "aryl/protocol/transport.h"
#include "aryl/result.h"

namespace aryl::cli {

inline std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// A random token that makes a submission idempotent: resending the same SubmitJob
// after a timeout returns the job the first one created.
inline std::string NewClientToken() {
  std::random_device rd;
  std::ostringstream os;
  for (int i = 0; i < 4; ++i) os << std::hex << std::setw(8) << std::setfill('0') << rd();
  return os.str();
}

inline std::string DefaultScheduler() { return EnvOr("ARYL_SCHEDULER", "tcp://127.0.0.1:7117"); }

// Connects a DEALER to the scheduler; CURVE when both key files are given.
inline Result<std::unique_ptr<protocol::Client>> ConnectScheduler(const std::string& endpoint,
                                                                  const std::string& curve_key,
                                                                  const std::string& curve_server_key,
                                                                  const std::string& identity = {}) {
  protocol::Client::Options co;
  co.endpoint = endpoint;
  co.identity = identity;
  if (!curve_key.empty() || !curve_server_key.empty()) {
    if (curve_key.empty() || curve_server_key.empty())
      return Status::InvalidArgument("CURVE needs both --curve-key and --curve-server-key");
    ARYL_ASSIGN_OR_RETURN(auto kp, protocol::LoadKeyPair(curve_key));
    ARYL_ASSIGN_OR_RETURN(auto server_pub, protocol::LoadPublicKey(curve_server_key));
    co.curve = protocol::CurveClientKeys{kp.public_key, kp.secret_key, server_pub};
  }
  return protocol::Client::Connect(co);
}

// A plain text table: columns padded to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const {
    std::vector<size_t> width;
    for (const auto& r : rows_) {
      if (width.size() < r.size()) width.resize(r.size(), 0);
      for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
    }
    std::ostringstream os;
    for (const auto& r : rows_) {
      for (size_t i = 0; i < r.size(); ++i) {
        os << r[i];
        if (i + 1 < r.size()) os << std::string(width[i] - r[i].size() + 2, ' ');
      }
      os << "\n";
    }
    return os.str();
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

inline std::string Fixed(double v, int digits = 2) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

// Exit codes: 0 ok, 1 the scheduler said no / not reachable, 2 bad usage.
inline int Fail(const std::string& program, const Status& st) {
  std::cerr << program << ": error: " << st.ToString();
  if (st.IsTimeout()) std::cerr << " (is aryl-scheduler running and reachable? set --scheduler or $ARYL_SCHEDULER)";
  std::cerr << "\n";
  return 1;
}

}  // namespace aryl::cli
