// The gateway helpers of gateway.h.
#include "state/etcd/gateway.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "aryl/base64.h"

namespace aryl::etcd {

double MsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

// --- JSON field readers (the gateway writes int64 as strings, omits defaults) --------

std::int64_t Int64Field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get_ref<const std::string&>());
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

std::uint64_t Uint64Field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_number_integer()) return std::uint64_t(it->get<std::int64_t>());
  if (it->is_string()) {
    try {
      return std::stoull(it->get_ref<const std::string&>());
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

std::string StringField(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool BoolField(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

Status BytesField(const json& j, const char* name, std::string* out) {
  out->clear();
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_string() || !Base64Decode(it->get_ref<const std::string&>(), out))
    return Status::Corruption(std::string("etcd answer: field '") + name +
                              "' is not base64: " + it->dump().substr(0, 80));
  return Status::Ok();
}

Status ParseKeyValue(const json& j, KeyValue* kv) {
  ARYL_RETURN_IF_ERROR(BytesField(j, "key", &kv->key));
  ARYL_RETURN_IF_ERROR(BytesField(j, "value", &kv->value));
  kv->create_revision = Int64Field(j, "create_revision");
  kv->mod_revision = Int64Field(j, "mod_revision");
  kv->version = Int64Field(j, "version");
  kv->lease = Int64Field(j, "lease");
  return Status::Ok();
}

std::int64_t HeaderRevision(const json& j) {
  auto it = j.find("header");
  return it != j.end() && it->is_object() ? Int64Field(*it, "revision") : 0;
}

Result<RangeResult> ParseRange(const json& j) {
  RangeResult r;
  r.more = BoolField(j, "more");
  r.count = Int64Field(j, "count");
  r.revision = HeaderRevision(j);
  if (auto it = j.find("kvs"); it != j.end() && it->is_array()) {
    r.kvs.reserve(it->size());
    for (const json& e : *it) {
      KeyValue kv;
      ARYL_RETURN_IF_ERROR(ParseKeyValue(e, &kv));
      r.kvs.push_back(std::move(kv));
    }
  }
  return r;
}

std::string I64(std::int64_t v) { return std::to_string(v); }

// --- errors -------------------------------------------------------------------------

// The member cannot serve the request now; another member may.
bool MemberCannotServe(int code, const std::string& msg) {
  return code == 14 || code == 4 || msg.find("no leader") != std::string::npos ||
         msg.find("request timed out") != std::string::npos ||
         msg.find("leader changed") != std::string::npos;
}

Status FromGrpc(int code, const std::string& msg, const std::string& what) {
  std::string m = what + ": " + msg;
  if (msg.find("no leader") != std::string::npos ||
      msg.find("request timed out") != std::string::npos ||
      msg.find("leader changed") != std::string::npos)
    return Status::Unavailable(m);
  switch (code) {
    case 1:
      return Status::Cancelled(m);
    case 3:
      return Status::InvalidArgument(m);
    case 4:
      return Status::Timeout(m);
    case 5:
      return Status::NotFound(m);
    case 6:
      return Status::AlreadyExists(m);
    case 7:
    case 16:
      return Status::PermissionDenied(m);
    case 9:
      return Status::FailedPrecondition(m);
    case 11:
      return Status::OutOfRange(m);
    case 8:
    case 14:
      return Status::Unavailable(m);
    default:
      return Status::Internal(m + " (gRPC code " + std::to_string(code) + ")");
  }
}

// The gateway's unary error body {"error","message","code"} or a stream's
// {"error":{"grpc_code","message"}}.
bool ParseEtcdError(const json& j, EtcdError* e) {
  auto it = j.find("error");
  if (it == j.end()) return false;
  if (it->is_object()) {
    e->code = int(Int64Field(*it, "grpc_code"));
    e->message = StringField(*it, "message");
    return true;
  }
  e->code = int(Int64Field(j, "code"));
  e->message = StringField(j, "message");
  if (e->message.empty()) e->message = StringField(j, "error");
  return true;
}

// --- endpoints ----------------------------------------------------------------------

// Checks "host:port" (host may be "[v6]"); returns an error naming `what`.
Status CheckHostPort(std::string_view hp, const std::string& what) {
  if (hp.empty()) return Status::InvalidArgument(what + " is empty");
  std::size_t colon;
  if (hp.front() == '[') {
    auto close = hp.find(']');
    if (close == std::string_view::npos || close + 1 >= hp.size() || hp[close + 1] != ':')
      return Status::InvalidArgument(what + " '" + std::string(hp) + "' is not [v6-address]:port");
    colon = close + 1;
  } else {
    colon = hp.rfind(':');
    if (colon == std::string_view::npos)
      return Status::InvalidArgument(what + " '" + std::string(hp) + "' has no port (host:port)");
    if (colon == 0) return Status::InvalidArgument(what + " '" + std::string(hp) + "' has no host");
  }
  std::string_view port = hp.substr(colon + 1);
  bool digits = !port.empty() && port.size() <= 5 &&
                std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  int p = digits ? std::stoi(std::string(port)) : 0;
  if (p < 1 || p > 65535)
    return Status::InvalidArgument(what + " '" + std::string(hp) + "' has a bad port '" +
                                   std::string(port) + "' (1-65535)");
  if (hp.find_first_of("/?#@ ") != std::string_view::npos)
    return Status::InvalidArgument(what + " '" + std::string(hp) + "' is not host:port");
  return Status::Ok();
}

Status CheckEndpoint(const std::string& ep) {
  std::string_view rest;
  if (ep.rfind("http://", 0) == 0)
    rest = std::string_view(ep).substr(7);
  else if (ep.rfind("https://", 0) == 0)
    rest = std::string_view(ep).substr(8);
  else
    return Status::InvalidArgument("etcd endpoint '" + ep +
                                   "' must start with http:// or https://");
  return CheckHostPort(rest, "etcd endpoint");
}

// "Grpc-Timeout" in milliseconds: etcd gives up a little before the client does, so
// a request that cannot complete comes back with etcd's reason.
std::string GrpcTimeout(double request_timeout) {
  long ms = std::max(1L, std::lround(request_timeout * 1000 * 0.9));
  return std::to_string(ms) + "m";
}

std::chrono::microseconds Micros(double seconds) {
  return std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(seconds));
}

std::string TransportError(httplib::Error err, double seconds) {
  switch (err) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return "connect timed out after " + FormatSeconds(seconds);
    case httplib::Error::Read:
      return "no answer (read failed or timed out after " + FormatSeconds(seconds) + ")";
    case httplib::Error::Write:
      return "write failed";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLLoadingCerts:
      return "cannot load the TLS certificates";
    case httplib::Error::SSLServerVerification:
      return "TLS server certificate not verified";
    case httplib::Error::Canceled:
      return "cancelled";
    default:
      return httplib::to_string(err);
  }
}

// "a: why; b: why" for the Unavailable that names every endpoint tried.
void AppendError(std::string* list, const std::string& endpoint, const std::string& why) {
  if (!list->empty()) *list += "; ";
  *list += endpoint;
  *list += ": ";
  *list += why;
}

}  // namespace aryl::etcd
