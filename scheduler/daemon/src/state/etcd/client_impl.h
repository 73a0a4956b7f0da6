// Client::Impl: the etcd client's endpoints, its pool of HTTP connections
// and the one exchange every request goes through (etcd_client.cc, etcd_watch.cc).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "aryl/base64.h"
#include "state/etcd/etcd_client.h"
#include "state/etcd/gateway.h"

namespace aryl::etcd {

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

}  // namespace aryl::etcd
