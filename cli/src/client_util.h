// Shared by aryl and aryl-run: connecting to the scheduler (with CURVE when
// keys are given) and turning replies into exit codes.
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

// Exit codes of aryl: 0 ok, 1 the scheduler said no / not reachable (`code`;
// aryl-run has its own), 2 bad usage.
inline int Fail(const std::string& program, const Status& st, int code = 1) {
  std::cerr << program << ": error: " << st.ToString();
  if (st.IsTimeout()) std::cerr << " (is aryl-scheduler running and reachable? set --scheduler or $ARYL_SCHEDULER)";
  std::cerr << "\n";
  return code;
}

}  // namespace aryl::cli
