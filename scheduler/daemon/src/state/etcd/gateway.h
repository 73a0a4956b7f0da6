// What the etcd client (etcd_client.cc, etcd_watch.cc) shares about etcd's
// HTTP/JSON gateway: reading its JSON (int64 as strings, defaults omitted),
// its errors, endpoints and timeouts. Internal to this folder.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "state/etcd/etcd_client.h"

namespace aryl::etcd {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

struct EtcdError {
  int code = 2;
  std::string message;
};

// The outcome of one HTTP exchange with one endpoint.
struct Exchange {
  bool answered = false;  // status line, headers and a whole JSON body arrived
  int http_status = 0;
  std::string body;
  std::string transport_error;  // when !answered
};

template <typename Duration>
void SetTimeouts(httplib::Client& c, Duration connect, Duration io) {
  c.set_connection_timeout(connect);
  c.set_read_timeout(io);
  c.set_write_timeout(io);
}

double MsSince(SteadyClock::time_point t0);

std::string FormatSeconds(double s);

std::int64_t Int64Field(const json& j, const char* name);

std::uint64_t Uint64Field(const json& j, const char* name);

std::string StringField(const json& j, const char* name);

bool BoolField(const json& j, const char* name);

Status BytesField(const json& j, const char* name, std::string* out);

Status ParseKeyValue(const json& j, KeyValue* kv);

std::int64_t HeaderRevision(const json& j);

Result<RangeResult> ParseRange(const json& j);

std::string I64(std::int64_t v);

// The member cannot serve the request now; another member may.
bool MemberCannotServe(int code, const std::string& msg);

Status FromGrpc(int code, const std::string& msg, const std::string& what);

// The gateway's unary error body {"error","message","code"} or a stream's
// {"error":{"grpc_code","message"}}.
bool ParseEtcdError(const json& j, EtcdError* e);

// Checks "host:port" (host may be "[v6]"); returns an error naming `what`.
Status CheckHostPort(std::string_view hp, const std::string& what);

Status CheckEndpoint(const std::string& ep);

// "Grpc-Timeout" in milliseconds: etcd gives up a little before the client does, so
// a request that cannot complete comes back with etcd's reason.
std::string GrpcTimeout(double request_timeout);

std::chrono::microseconds Micros(double seconds);

std::string TransportError(httplib::Error err, double seconds);

// "a: why; b: why" for the Unavailable that names every endpoint tried.
void AppendError(std::string* list, const std::string& endpoint, const std::string& why);

}  // namespace aryl::etcd
