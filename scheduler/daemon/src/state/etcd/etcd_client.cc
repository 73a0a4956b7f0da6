#include "state/etcd/etcd_client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <utility>

#include "aryl/base64.h"
#include "state/etcd/client_impl.h"

namespace aryl::etcd {

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

}  // namespace aryl::etcd
