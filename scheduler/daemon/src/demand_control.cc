#include "aryl/daemon/demand_control.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace aryl::daemon {

namespace {

constexpr const char* kPrefix = "prometheus:";

// ceil that forgives rounding: 30 / 10 is 3 servers, not 4.
int CeilServers(double x) { return static_cast<int>(std::ceil(x - 1e-9)); }

Result<double> SampleValue(const nlohmann::json& pair, const std::string& what) {
  if (!pair.is_array() || pair.size() != 2 || !pair[1].is_string())
    return Status::InvalidArgument("prometheus answer: " + what + " is not [time, \"value\"]: " + pair.dump());
  const std::string text = pair[1].get<std::string>();
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    return Status::InvalidArgument("prometheus answer: " + what + " value '" + text + "' is not a finite number");
  return v;
}

}  // namespace

DemandDecision DemandController::Decide(double now, const std::optional<DemandSample>& sample,
                                        const InferencePool& pool) {
  DemandDecision d;
  if (!sample || now - sample->time > config_.max_age || pool.servers <= 0) {
    low_since_.reset();  // a gap in the signal restarts the hold
    return d;
  }
  double servers = std::max(0.0, sample->load) / config_.per_server;
  auto clamp = [&](int n) { return std::clamp(n, 0, pool.servers); };
  d.required_up = clamp(CeilServers(servers) + config_.headroom);
  d.required_down = clamp(CeilServers(servers / (1 - config_.hysteresis)) + config_.headroom);
  if (d.required_up > pool.held) {
    d.reclaim = d.required_up - pool.held;
    low_since_.reset();
  } else if (d.required_down < pool.held) {
    if (!low_since_) low_since_ = now;
    if (now - *low_since_ >= config_.hold) d.offer = std::min(pool.held - d.required_down, pool.offerable);
  } else {
    low_since_.reset();
  }
  return d;
}

bool IsPrometheusDemand(const std::string& text) { return text.rfind(kPrefix, 0) == 0; }

Result<PrometheusDemandSpec> ParsePrometheusDemandSpec(const std::string& text) {
  if (!IsPrometheusDemand(text)) return Status::InvalidArgument("does not start with 'prometheus:'");
  std::string rest = text.substr(std::string(kPrefix).size());
  auto q = rest.find('?');
  if (q == std::string::npos || rest.compare(q + 1, 6, "query=") != 0)
    return Status::InvalidArgument("expected prometheus:http://HOST:PORT?query=PROMQL");
  PrometheusDemandSpec spec;
  spec.query = rest.substr(q + 7);
  if (spec.query.empty()) return Status::InvalidArgument("the query after 'query=' is empty");
  std::string url = rest.substr(0, q);
  if (url.rfind("https://", 0) == 0)
    return Status::InvalidArgument("https is not supported; reach Prometheus over http on a trusted network");
  if (url.rfind("http://", 0) != 0) return Status::InvalidArgument("the URL '" + url + "' must start with http://");
  url = url.substr(7);
  auto slash = url.find('/');
  std::string hostport = url.substr(0, slash);
  if (slash != std::string::npos) spec.path_prefix = url.substr(slash);
  while (!spec.path_prefix.empty() && spec.path_prefix.back() == '/') spec.path_prefix.pop_back();
  std::string port_text;
  if (!hostport.empty() && hostport[0] == '[') {  // [::1]:9090
    auto close = hostport.find(']');
    if (close == std::string::npos) return Status::InvalidArgument("unclosed '[' in host '" + hostport + "'");
    spec.host = hostport.substr(1, close - 1);
    if (close + 1 < hostport.size()) {
      if (hostport[close + 1] != ':') return Status::InvalidArgument("bad host '" + hostport + "'");
      port_text = hostport.substr(close + 2);
    }
  } else {
    auto colon = hostport.find(':');
    spec.host = hostport.substr(0, colon);
    if (colon != std::string::npos) port_text = hostport.substr(colon + 1);
  }
  if (spec.host.empty()) return Status::InvalidArgument("the URL has no host");
  if (!port_text.empty() || hostport.find(':') != std::string::npos) {
    bool digits = !port_text.empty() && port_text.size() <= 5 &&
                  std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; });
    int port = digits ? std::stoi(port_text) : 0;
    if (port < 1 || port > 65535) return Status::InvalidArgument("port '" + port_text + "' is not in 1..65535");
    spec.port = port;
  }
  return spec;
}

Result<double> ParsePrometheusQueryResponse(const std::string& body) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const std::exception& e) {
    return Status::InvalidArgument("prometheus answer is not JSON (" + std::string(e.what()) + "): " + body.substr(0, 200));
  }
  if (!j.is_object()) return Status::InvalidArgument("prometheus answer is not a JSON object: " + body.substr(0, 200));
  if (j.value("status", "") != "success")
    return Status::InvalidArgument("prometheus answered " + j.value("status", std::string("no status")) + ": " +
                                   j.value("errorType", std::string("")) + " " + j.value("error", std::string("")));
  if (!j.contains("data") || !j["data"].is_object())
    return Status::InvalidArgument("prometheus answer has no data object");
  const auto& data = j["data"];
  std::string type = data.value("resultType", "");
  const auto& result = data.contains("result") ? data["result"] : nlohmann::json();
  if (type == "scalar") return SampleValue(result, "scalar");
  if (type != "vector")
    return Status::InvalidArgument("prometheus answer is a " + (type.empty() ? std::string("result without a type") : type) +
                                   "; the query must give a scalar or an instant vector");
  if (!result.is_array() || result.empty())
    return Status::NotFound("prometheus answer is an empty vector (no series matched the query)");
  double sum = 0;
  for (const auto& s : result) {
    if (!s.is_object() || !s.contains("value")) return Status::InvalidArgument("prometheus answer: a sample has no value");
    ARYL_ASSIGN_OR_RETURN(double v, SampleValue(s["value"], "sample"));
    sum += v;
  }
  return sum;
}

std::string PrometheusQueryPath(const PrometheusDemandSpec& spec) {
  std::string out = spec.path_prefix + "/api/v1/query?query=";
  for (unsigned char c : spec.query) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace aryl::daemon
