// Shared by aryl and aryl-run: connecting to the scheduler, or to the leader
// of several (with CURVE when keys are given), and turning replies into exit
// codes.
#pragma once

#include <algorithm>
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
#include "aryl/protocol/scheduler_client.h"
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

// How long one try of a request may wait when `total` is the request's
// budget over `endpoints` schedulers: a share of it each, so that a dead
// first scheduler leaves time for the next (at least 1 s, at most `total`).
inline std::chrono::milliseconds PerTryTimeout(std::chrono::milliseconds total, std::size_t endpoints) {
  auto share = total / static_cast<long>(std::max<std::size_t>(1, endpoints));
  return std::min(total, std::max(share, std::chrono::milliseconds(1000)));
}

// Connects to the scheduler, or to whichever leads among a comma list of them
// ("tcp://a:7117,tcp://b:7117"; protocol/scheduler_client.h). A request tries
// for at most `total`, moving on from standbys and dead schedulers; CURVE
// when both key files are given (every scheduler has the same key).
inline Result<std::unique_ptr<protocol::SchedulerClient>> ConnectScheduler(const std::string& endpoints,
                                                                           const std::string& curve_key,
                                                                           const std::string& curve_server_key,
                                                                           std::chrono::milliseconds total,
                                                                           const std::string& identity = {}) {
  protocol::SchedulerClient::Options co;
  ARYL_ASSIGN_OR_RETURN(co.endpoints, protocol::ParseSchedulerEndpoints(endpoints));
  co.identity = identity;
  co.total_timeout = total;
  if (!curve_key.empty() || !curve_server_key.empty()) {
    if (curve_key.empty() || curve_server_key.empty())
      return Status::InvalidArgument("CURVE needs both --curve-key and --curve-server-key");
    ARYL_ASSIGN_OR_RETURN(auto kp, protocol::LoadKeyPair(curve_key));
    ARYL_ASSIGN_OR_RETURN(auto server_pub, protocol::LoadPublicKey(curve_server_key));
    co.curve = protocol::CurveClientKeys{kp.public_key, kp.secret_key, server_pub};
  }
  return protocol::SchedulerClient::Connect(co);
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
