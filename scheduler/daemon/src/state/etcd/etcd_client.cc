#include "state/etcd/etcd_client.h"

#include "aryl/base64.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

namespace aryl::etcd {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

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

struct EtcdError {
  int code = 2;
  std::string message;
};

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

template <typename Duration>
void SetTimeouts(httplib::Client& c, Duration connect, Duration io) {
  c.set_connection_timeout(connect);
  c.set_read_timeout(io);
  c.set_write_timeout(io);
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

// The outcome of one HTTP exchange with one endpoint.
struct Exchange {
  bool answered = false;  // status line, headers and a whole JSON body arrived
  int http_status = 0;
  std::string body;
  std::string transport_error;  // when !answered
};

}  // namespace

// --- public helpers -----------------------------------------------------------------

Result<EtcdUrl> ParseEtcdUrl(std::string_view url, bool tls) {
  constexpr std::string_view kScheme = "etcd://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    auto sep = url.find("://");
    std::string scheme = sep == std::string_view::npos ? "none" : std::string(url.substr(0, sep));
    return Status::InvalidArgument("etcd URL '" + std::string(url) + "': scheme '" + scheme +
                                   "' is not etcd:// (etcd://host:port,host:port/prefix)");
  }
  std::string_view rest = url.substr(kScheme.size());
  auto slash = rest.find('/');
  std::string_view hosts = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  EtcdUrl out;
  if (hosts.empty())
    return Status::InvalidArgument("etcd URL '" + std::string(url) + "' names no host:port");
  std::size_t pos = 0;
  while (pos <= hosts.size()) {
    auto comma = hosts.find(',', pos);
    std::string_view hp =
        hosts.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    Status s = CheckHostPort(hp, "etcd URL '" + std::string(url) + "': endpoint");
    if (!s.ok()) return s;
    out.endpoints.push_back((tls ? "https://" : "http://") + std::string(hp));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  std::string prefix(path);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.empty())
    return Status::InvalidArgument("etcd URL '" + std::string(url) +
                                   "' has an empty prefix (etcd://host:port/prefix)");
  if (prefix.find_first_of("?#") != std::string::npos)
    return Status::InvalidArgument("etcd URL '" + std::string(url) + "': prefix '" + prefix +
                                   "' holds '?' or '#'");
  out.prefix = prefix + "/";
  return out;
}

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

Op Op::Put(std::string k, std::string v, std::int64_t lease) {
  Op op;
  op.kind = Kind::kPut;
  op.key = std::move(k);
  op.value = std::move(v);
  op.lease = lease;
  return op;
}

Op Op::Delete(std::string k, std::string range_end) {
  Op op;
  op.kind = Kind::kDelete;
  op.key = std::move(k);
  op.range_end = std::move(range_end);
  return op;
}

Op Op::Get(std::string k, std::string range_end) {
  Op op;
  op.kind = Kind::kRange;
  op.key = std::move(k);
  op.range_end = std::move(range_end);
  return op;
}

// --- Client::Impl -------------------------------------------------------------------

struct Client::Impl {
  static constexpr std::size_t kMaxIdlePerEndpoint = 4;

  ClientOptions options;
  std::vector<std::string> endpoints;  // immutable after Connect
  std::atomic<std::size_t> preferred{0};
  std::atomic<double> last_rtt_ms{0};

  std::mutex pool_mu;
  std::vector<std::vector<std::unique_ptr<httplib::Client>>> idle;  // per endpoint

  std::unique_ptr<httplib::Client> NewHttp(std::size_t i, double io_timeout) const {
    const std::string& ep = endpoints[i];
    std::unique_ptr<httplib::Client> c;
    if (!options.cert_file.empty())
      c = std::make_unique<httplib::Client>(ep, options.cert_file, options.key_file);
    else
      c = std::make_unique<httplib::Client>(ep);
    if (ep.rfind("https://", 0) == 0) {
      if (!options.ca_file.empty()) c->set_ca_cert_path(options.ca_file);
      c->enable_server_certificate_verification(true);
    }
    SetTimeouts(*c, Micros(options.request_timeout), Micros(io_timeout));
    c->set_tcp_nodelay(true);
    return c;
  }

  std::unique_ptr<httplib::Client> TakeHttp(std::size_t i) {
    {
      std::lock_guard<std::mutex> lock(pool_mu);
      if (!idle[i].empty()) {
        auto c = std::move(idle[i].back());
        idle[i].pop_back();
        return c;
      }
    }
    auto c = NewHttp(i, options.request_timeout);
    c->set_keep_alive(true);
    return c;
  }

  void GiveBack(std::size_t i, std::unique_ptr<httplib::Client> c) {
    std::lock_guard<std::mutex> lock(pool_mu);
    if (idle[i].size() < kMaxIdlePerEndpoint) idle[i].push_back(std::move(c));
  }

  // One POST (or GET when body is null) to one endpoint. The body is read through a
  // content receiver: etcd's error answers end in an HTTP trailer that cpp-httplib
  // 0.11 reports as a read error, after the whole JSON body has arrived.
  Exchange Send(httplib::Client& http, const char* method, const std::string& path,
                const std::string& body, bool require_leader, bool stream) const {
    Exchange ex;
    httplib::Request req;
    req.method = method;
    req.path = path;
    if (require_leader) req.headers.emplace("Grpc-Metadata-Hasleader", "true");
    req.headers.emplace("Grpc-Timeout", GrpcTimeout(options.request_timeout));
    if (req.method == "POST") {
      req.headers.emplace("Content-Type", "application/json");
      req.body = body;
    }
    req.response_handler = [&](const httplib::Response& r) {
      ex.http_status = r.status;
      return true;
    };
    req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
      ex.body.append(data, n);
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    auto t0 = SteadyClock::now();
    bool ok = http.send(req, res, err);
    if (ok || (ex.http_status != 0 && WholeJson(ex.body, stream))) {
      ex.answered = true;
      return ex;
    }
    ex.transport_error = TransportError(err, MsSince(t0) / 1000);
    return ex;
  }

  // The body holds one whole JSON document (stream answers: its first line does).
  static bool WholeJson(const std::string& body, bool stream) {
    std::string_view text = body;
    if (stream) text = text.substr(0, text.find('\n'));
    return json::accept(text);
  }

  // POSTs `body` to `path`, failing over across endpoints as the header describes.
  // For a stream RPC the answer is the first response line's "result".
  Result<json> Call(const std::string& path, const json& body, bool require_leader = true,
                    bool stream = false) {
    const std::string text = body.dump();
    const std::size_t n = endpoints.size();
    const std::size_t first = preferred.load();
    std::string errors;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = (first + k) % n;
      auto http = TakeHttp(i);
      auto t0 = SteadyClock::now();
      Exchange ex = Send(*http, "POST", path, text, require_leader, stream);
      double rtt = MsSince(t0);
      if (!ex.answered) {
        AppendError(&errors, endpoints[i], ex.transport_error);
        continue;  // the connection is dropped with `http`
      }
      if (ex.http_status == 200 && !stream) GiveBack(i, std::move(http));
      std::string_view first_line = ex.body;
      if (stream) first_line = first_line.substr(0, first_line.find('\n'));
      json j = json::parse(first_line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded())
        return Status::Corruption("etcd " + endpoints[i] + path + " answered HTTP " +
                                  std::to_string(ex.http_status) +
                                  " with a body that is not JSON: " + ex.body.substr(0, 200));
      EtcdError e;
      if (ex.http_status != 200 || (stream && j.contains("error"))) {
        if (!ParseEtcdError(j, &e)) {
          e.code = 2;
          e.message = "HTTP " + std::to_string(ex.http_status) + ": " + ex.body.substr(0, 200);
        }
        if (MemberCannotServe(e.code, e.message)) {
          if (e.code == 4)  // the Grpc-Timeout deadline: say what it means
            e.message += " (etcd could not complete it within " +
                         GrpcTimeout(options.request_timeout) + "s: no leader or no quorum?)";
          AppendError(&errors, endpoints[i], e.message);
          continue;
        }
        preferred.store(i);
        return FromGrpc(e.code, e.message, "etcd " + path + " on " + endpoints[i]);
      }
      preferred.store(i);
      last_rtt_ms.store(rtt);
      if (stream) {
        auto it = j.find("result");
        if (it == j.end() || !it->is_object())
          return Status::Corruption("etcd " + endpoints[i] + path +
                                    ": stream answer without result: " + ex.body.substr(0, 200));
        return json(*it);
      }
      return j;
    }
    return Status::Unavailable("etcd " + path + ": no endpoint answered (" + errors + ")");
  }

  json RangeBody(const std::string& key, const std::string& range_end,
                 const RangeOptions& o) const {
    json b = {{"key", Base64Encode(key)}};
    if (!range_end.empty()) b["range_end"] = Base64Encode(range_end);
    if (o.limit) b["limit"] = I64(o.limit);
    if (o.revision) b["revision"] = I64(o.revision);
    if (o.min_mod_revision) b["min_mod_revision"] = I64(o.min_mod_revision);
    if (o.keys_only) b["keys_only"] = true;
    if (o.count_only) b["count_only"] = true;
    return b;
  }
};

// --- Client -------------------------------------------------------------------------

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  if (options.endpoints.empty()) return Status::InvalidArgument("etcd client: no endpoints");
  for (auto& ep : options.endpoints) {
    while (!ep.empty() && ep.back() == '/') ep.pop_back();
    ARYL_RETURN_IF_ERROR(CheckEndpoint(ep));
  }
  if (!(options.request_timeout > 0) || !std::isfinite(options.request_timeout))
    return Status::InvalidArgument("etcd client: request_timeout " +
                                   std::to_string(options.request_timeout) +
                                   " must be a positive number of seconds");
  if (options.cert_file.empty() != options.key_file.empty())
    return Status::InvalidArgument("etcd client: cert_file and key_file go together (cert_file '" +
                                   options.cert_file + "', key_file '" + options.key_file + "')");
  for (const std::string* f : {&options.ca_file, &options.cert_file, &options.key_file}) {
    std::error_code ec;
    if (!f->empty() && !std::filesystem::is_regular_file(*f, ec))
      return Status::InvalidArgument("etcd client: TLS file '" + *f + "' does not exist");
  }
  auto impl = std::make_unique<Impl>();
  impl->endpoints = options.endpoints;
  impl->idle.resize(impl->endpoints.size());
  impl->options = std::move(options);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Result<RangeResult> Client::Range(const std::string& key, const std::string& range_end,
                                  const RangeOptions& o) {
  ARYL_ASSIGN_OR_RETURN(json j, impl_->Call("/v3/kv/range", impl_->RangeBody(key, range_end, o)));
  return ParseRange(j);
}

Result<std::int64_t> Client::Put(const std::string& key, const std::string& value,
                                 std::int64_t lease) {
  json b = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease) b["lease"] = I64(lease);
  ARYL_ASSIGN_OR_RETURN(json j, impl_->Call("/v3/kv/put", b));
  return HeaderRevision(j);
}

Result<std::int64_t> Client::Delete(const std::string& key, const std::string& range_end) {
  json b = {{"key", Base64Encode(key)}};
  if (!range_end.empty()) b["range_end"] = Base64Encode(range_end);
  ARYL_ASSIGN_OR_RETURN(json j, impl_->Call("/v3/kv/deleterange", b));
  return Int64Field(j, "deleted");
}

namespace {

json CompareJson(const Compare& c) {
  static constexpr const char* kTargets[] = {"VERSION", "CREATE", "MOD", "VALUE", "LEASE"};
  static constexpr const char* kResults[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
  json j = {{"key", Base64Encode(c.key)},
            {"target", kTargets[int(c.target)]},
            {"result", kResults[int(c.result)]}};
  switch (c.target) {
    case Compare::Target::kVersion:
      j["version"] = I64(c.number);
      break;
    case Compare::Target::kCreate:
      j["create_revision"] = I64(c.number);
      break;
    case Compare::Target::kMod:
      j["mod_revision"] = I64(c.number);
      break;
    case Compare::Target::kValue:
      j["value"] = Base64Encode(c.value);
      break;
    case Compare::Target::kLease:
      j["lease"] = I64(c.number);
      break;
  }
  return j;
}

json OpJson(const Op& op) {
  json r = {{"key", Base64Encode(op.key)}};
  switch (op.kind) {
    case Op::Kind::kPut:
      r["value"] = Base64Encode(op.value);
      if (op.lease) r["lease"] = I64(op.lease);
      return {{"request_put", r}};
    case Op::Kind::kDelete:
      if (!op.range_end.empty()) r["range_end"] = Base64Encode(op.range_end);
      return {{"request_delete_range", r}};
    case Op::Kind::kRange:
      if (!op.range_end.empty()) r["range_end"] = Base64Encode(op.range_end);
      return {{"request_range", r}};
  }
  return r;
}

}  // namespace

Result<TxnResult> Client::Txn(const TxnRequest& txn) {
  json b = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const Compare& c : txn.compare) b["compare"].push_back(CompareJson(c));
  for (const Op& op : txn.success) b["success"].push_back(OpJson(op));
  for (const Op& op : txn.failure) b["failure"].push_back(OpJson(op));
  ARYL_ASSIGN_OR_RETURN(json j, impl_->Call("/v3/kv/txn", b));
  TxnResult r;
  r.succeeded = BoolField(j, "succeeded");
  r.revision = HeaderRevision(j);
  const std::vector<Op>& ops = r.succeeded ? txn.success : txn.failure;
  const json responses = j.value("responses", json::array());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != Op::Kind::kRange) continue;
    if (i >= responses.size())
      return Status::Corruption("etcd txn answered " + std::to_string(responses.size()) +
                                " responses for " + std::to_string(ops.size()) + " ops");
    ARYL_ASSIGN_OR_RETURN(RangeResult rr,
                          ParseRange(responses[i].value("response_range", json::object())));
    r.ranges.push_back(std::move(rr));
  }
  return r;
}

Result<std::int64_t> Client::LeaseGrant(std::int64_t ttl_seconds) {
  if (ttl_seconds <= 0)
    return Status::InvalidArgument("etcd lease TTL " + std::to_string(ttl_seconds) +
                                   " must be positive");
  ARYL_ASSIGN_OR_RETURN(json j, impl_->Call("/v3/lease/grant", {{"TTL", I64(ttl_seconds)}}));
  if (std::string e = StringField(j, "error"); !e.empty())
    return Status::FailedPrecondition("etcd /v3/lease/grant: " + e);
  std::int64_t id = Int64Field(j, "ID");
  if (id == 0) return Status::Corruption("etcd /v3/lease/grant answered no lease id: " + j.dump());
  return id;
}

Result<std::int64_t> Client::LeaseKeepAlive(std::int64_t lease) {
  ARYL_ASSIGN_OR_RETURN(json j,
                        impl_->Call("/v3/lease/keepalive", {{"ID", I64(lease)}}, true, true));
  std::int64_t ttl = Int64Field(j, "TTL");
  if (ttl <= 0)
    return Status::NotFound("etcd lease " + std::to_string(lease) + " has expired or is unknown");
  return ttl;
}

Status Client::LeaseRevoke(std::int64_t lease) {
  auto r = impl_->Call("/v3/lease/revoke", {{"ID", I64(lease)}});
  return r.ok() ? Status::Ok() : r.status();
}

Result<std::vector<Member>> Client::MemberList() {
  ARYL_ASSIGN_OR_RETURN(json j, impl_->Call("/v3/cluster/member/list", json::object(), false));
  std::vector<Member> out;
  for (const json& m : j.value("members", json::array())) {
    Member mem;
    mem.id = Uint64Field(m, "ID");
    mem.name = StringField(m, "name");
    for (const json& u : m.value("clientURLs", json::array()))
      if (u.is_string()) mem.client_urls.push_back(u.get<std::string>());
    out.push_back(std::move(mem));
  }
  return out;
}

std::vector<EndpointHealth> Client::Health() {
  std::vector<EndpointHealth> out(impl_->endpoints.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < out.size(); ++i) {
    threads.emplace_back([this, i, &out] {
      EndpointHealth& h = out[i];
      h.endpoint = impl_->endpoints[i];
      auto http = impl_->NewHttp(i, impl_->options.request_timeout);
      Exchange hx = impl_->Send(*http, "GET", "/health", {}, false, false);
      bool said_healthy = false;
      if (!hx.answered) {
        h.error = "/health: " + hx.transport_error;
      } else {
        json j = json::parse(hx.body, nullptr, false);
        said_healthy = !j.is_discarded() && j.is_object() && StringField(j, "health") == "true";
        if (!said_healthy)
          h.error = "/health answered HTTP " + std::to_string(hx.http_status) + ": " +
                    hx.body.substr(0, 200);
      }
      auto t0 = SteadyClock::now();
      Exchange sx = impl_->Send(*http, "POST", "/v3/maintenance/status", "{}", false, false);
      h.round_trip_ms = MsSince(t0);
      if (!sx.answered) {
        if (h.error.empty()) h.error = "/v3/maintenance/status: " + sx.transport_error;
      } else {
        json j = json::parse(sx.body, nullptr, false);
        EtcdError e;
        if (j.is_discarded() || sx.http_status != 200) {
          if (h.error.empty())
            h.error =
                "/v3/maintenance/status answered HTTP " + std::to_string(sx.http_status) + ": " +
                (!j.is_discarded() && ParseEtcdError(j, &e) ? e.message : sx.body.substr(0, 200));
        } else {
          h.leader = Uint64Field(j, "leader");
          h.raft_term = Uint64Field(j, "raftTerm");
          if (h.leader == 0 && h.error.empty()) h.error = "the member knows no leader";
        }
      }
      h.healthy = said_healthy && h.leader != 0 && h.error.empty();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

double Client::last_round_trip_ms() const { return impl_->last_rtt_ms.load(); }

const std::string& Client::current_endpoint() const {
  return impl_->endpoints[impl_->preferred.load() % impl_->endpoints.size()];
}

// --- Watch --------------------------------------------------------------------------

namespace {

// How one watch stream (one HTTP request to one endpoint) ended.
enum class StreamEnd {
  kStop,        // `stop` or max_seconds: Watch returns Ok
  kCallerDone,  // on_batch returned false: Watch returns Ok
  kStatus,      // a final error (compacted, refused): Watch returns it
  kIdle,        // silent for the idle window after it was created: re-open
  kFailed,      // the endpoint could not open or keep the stream: try the next
};

}  // namespace

Status Client::Watch(
    const std::string& key, const std::string& range_end, std::int64_t start_revision,
    const std::function<bool(const std::vector<WatchEvent>&, std::int64_t)>& on_batch,
    const std::atomic<bool>& stop, double max_seconds) {
  if (!(max_seconds > 0))
    return Status::InvalidArgument("etcd watch: max_seconds " + std::to_string(max_seconds) +
                                   " must be positive");
  const auto deadline = SteadyClock::now() + Micros(std::min(max_seconds, 1e9));
  const double open_timeout = impl_->options.request_timeout;
  const double idle_timeout = 2 * impl_->options.request_timeout;
  const std::size_t n = impl_->endpoints.size();
  std::size_t ep = impl_->preferred.load() % n;
  std::size_t failures_in_row = 0;
  std::string errors;
  // Every endpoint failing in turn is given up on only once such failures have
  // lasted ride_out: members that lost their leader refuse at once until they
  // elect a new one (about an election timeout, 1 s by default).
  const auto ride_out = Micros(std::max(2 * impl_->options.request_timeout, 3.0));
  auto failing_since = SteadyClock::now();
  bool riding_out = false;
  std::int64_t next_rev = start_revision;  // 0 until the first stream says where "now" is
  const std::string what = "etcd watch of '" + key + "'";

  for (;;) {
    if (stop.load() || SteadyClock::now() >= deadline) return Status::Ok();
    auto http =
        impl_->NewHttp(ep, idle_timeout + open_timeout);  // backstop; the watchdog is tighter

    json create = {{"key", Base64Encode(key)}, {"progress_notify", true}};
    if (!range_end.empty()) create["range_end"] = Base64Encode(range_end);
    if (next_rev > 0) create["start_revision"] = I64(next_rev);
    const std::string body = json{{"create_request", create}}.dump();

    std::atomic<bool> created{false}, done{false};
    std::atomic<int> watchdog_end{-1};  // a StreamEnd the watchdog forced
    std::atomic<std::int64_t> last_data_us{0};
    const auto t_open = SteadyClock::now();
    auto since_open_us = [&] {
      return std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - t_open)
          .count();
    };

    // The watchdog: the only way to end a blocking read early is httplib's stop()
    // from another thread; it is repeated because a stop() that lands before the
    // socket exists does nothing.
    std::thread watchdog([&] {
      while (!done.load()) {
        int end = -1;
        if (stop.load() || SteadyClock::now() >= deadline)
          end = int(StreamEnd::kStop);
        else if (!created.load() && since_open_us() > open_timeout * 1e6)
          end = int(StreamEnd::kFailed);
        else if (created.load() && since_open_us() - last_data_us.load() > idle_timeout * 1e6)
          end = int(StreamEnd::kIdle);
        if (end >= 0) {
          int expected = -1;
          watchdog_end.compare_exchange_strong(expected, end);
          http->stop();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });

    StreamEnd ended = StreamEnd::kFailed;
    bool decided = false;  // the receiver decided `ended`
    Status final_status;
    std::string fail_reason;
    std::string buffer;
    int http_status = 0;

    // Handles one response line; false ends the stream.
    auto on_line = [&](std::string_view line) -> bool {
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        decided = true;
        ended = StreamEnd::kStatus;
        final_status = Status::Corruption(
            what + ": a stream line that is not JSON: " + std::string(line.substr(0, 200)));
        return false;
      }
      EtcdError e;
      if (http_status != 200 || j.contains("error")) {
        if (!ParseEtcdError(j, &e))
          e.message = "HTTP " + std::to_string(http_status) + ": " + std::string(line);
        decided = true;
        if (MemberCannotServe(e.code, e.message)) {
          ended = StreamEnd::kFailed;
          fail_reason = e.message;
        } else {
          ended = StreamEnd::kStatus;
          final_status = FromGrpc(e.code, e.message, what + " on " + impl_->endpoints[ep]);
        }
        return false;
      }
      const json r = j.value("result", json::object());
      const std::int64_t header_rev = HeaderRevision(r);
      if (BoolField(r, "canceled")) {
        decided = true;
        std::int64_t compact = Int64Field(r, "compact_revision");
        std::string reason = StringField(r, "cancel_reason");
        if (compact > 0) {
          ended = StreamEnd::kStatus;
          final_status = Status::OutOfRange(what + " from revision " + std::to_string(next_rev) +
                                            ": that revision is compacted; compact revision " +
                                            std::to_string(compact) +
                                            " (read the state again and watch from there)");
        } else if (MemberCannotServe(0, reason)) {
          ended = StreamEnd::kFailed;
          fail_reason = "watch canceled: " + reason;
        } else {
          ended = StreamEnd::kStatus;
          final_status = Status::FailedPrecondition(
              what + ": etcd canceled the watch: " + (reason.empty() ? "no reason given" : reason));
        }
        return false;
      }
      if (BoolField(r, "created")) {
        created.store(true);
        if (next_rev == 0) next_rev = header_rev + 1;
        impl_->preferred.store(ep);
      }
      std::vector<WatchEvent> events;
      for (const json& ev : r.value("events", json::array())) {
        WatchEvent we;
        we.type = StringField(ev, "type") == "DELETE" ? WatchEvent::Type::kDelete
                                                      : WatchEvent::Type::kPut;
        Status s = ParseKeyValue(ev.value("kv", json::object()), &we.kv);
        if (!s.ok()) {
          decided = true;
          ended = StreamEnd::kStatus;
          final_status = s;
          return false;
        }
        events.push_back(std::move(we));
      }
      if (!events.empty()) {
        next_rev = events.back().kv.mod_revision + 1;
        if (!on_batch(events, header_rev)) {
          decided = true;
          ended = StreamEnd::kCallerDone;
          return false;
        }
      } else if (!BoolField(r, "created") && created.load() && header_rev + 1 > next_rev) {
        // A progress notification: etcd sends it only to a watcher that has caught
        // up, so every event up to header_rev has been delivered.
        next_rev = header_rev + 1;
      }
      return !stop.load();
    };

    httplib::Request req;
    req.method = "POST";
    req.path = "/v3/watch";
    req.headers.emplace("Grpc-Metadata-Hasleader", "true");
    req.headers.emplace("Content-Type", "application/json");
    req.body = body;
    req.response_handler = [&](const httplib::Response& res) {
      http_status = res.status;
      return true;
    };
    req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
      last_data_us.store(since_open_us());
      buffer.append(data, len);
      std::size_t start = 0;
      for (std::size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1) {
        std::string_view line(buffer.data() + start, nl - start);
        if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
        if (!on_line(line)) return false;
      }
      buffer.erase(0, start);
      // An error answer is one JSON document that may not end in a newline.
      if (http_status != 200 && json::accept(buffer)) {
        std::string doc = std::move(buffer);
        buffer.clear();
        return on_line(doc);
      }
      last_data_us.store(since_open_us());
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    http->send(req, res, err);
    done.store(true);
    watchdog.join();

    if (!decided) {
      int forced = watchdog_end.load();
      if (stop.load() || SteadyClock::now() >= deadline)
        ended = StreamEnd::kStop;
      else if (forced == int(StreamEnd::kIdle))
        ended = StreamEnd::kIdle;
      else {
        ended = StreamEnd::kFailed;
        if (forced == int(StreamEnd::kFailed))
          fail_reason = "the watch was not created within " + FormatSeconds(open_timeout);
        else if (created.load())
          fail_reason =
              "the watch stream ended (" + TransportError(err, since_open_us() / 1e6) + ")";
        else
          fail_reason = TransportError(err, since_open_us() / 1e6);
      }
    }
    switch (ended) {
      case StreamEnd::kStop:
      case StreamEnd::kCallerDone:
        return Status::Ok();
      case StreamEnd::kStatus:
        return final_status;
      case StreamEnd::kIdle:
        failures_in_row = 0;
        errors.clear();
        riding_out = false;
        continue;  // the same endpoint, from next_rev
      case StreamEnd::kFailed:
        if (created.load()) {  // it worked for a while: count from here
          failures_in_row = 0;
          errors.clear();
          riding_out = false;
        }
        if (failures_in_row == 0 && !riding_out) failing_since = SteadyClock::now();
        AppendError(&errors, impl_->endpoints[ep], fail_reason);
        ep = (ep + 1) % n;
        if (++failures_in_row >= n) {
          if (SteadyClock::now() - failing_since >= ride_out)
            return Status::Unavailable(what + ": no endpoint can serve the watch (" + errors + ")");
          // Round again after a pause; the error names the last round's.
          riding_out = true;
          failures_in_row = 0;
          errors.clear();
          for (int i = 0; i < 4 && !stop.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        continue;
    }
  }
}

}  // namespace aryl::etcd
