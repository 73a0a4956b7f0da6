#include "core_journal.h"

#include <nlohmann/json.hpp>

#include "daemon_impl.h"

namespace aryl::daemon {

namespace {

json SpecToJson(const s::JobSpec& spec) {
  return {{"id", spec.id},
          {"name", spec.name},
          {"submit_time", spec.submit_time},
          {"elastic", spec.kind == s::JobKind::kElastic},
          {"min", spec.min_workers},
          {"max", spec.max_workers},
          {"requested", spec.requested_workers},
          {"gpu_types", spec.gpu_types},
          {"model", spec.model},
          {"total_work", spec.total_work}};
}

s::JobSpec SpecFromJson(const json& j) {
  s::JobSpec spec;
  spec.id = j.at("id").get<s::JobId>();
  spec.name = j.at("name").get<std::string>();
  spec.submit_time = j.at("submit_time").get<double>();
  spec.kind = j.at("elastic").get<bool>() ? s::JobKind::kElastic : s::JobKind::kInelastic;
  spec.min_workers = j.at("min").get<int>();
  spec.max_workers = j.at("max").get<int>();
  spec.requested_workers = j.at("requested").get<int>();
  spec.gpu_types = j.at("gpu_types").get<std::vector<std::string>>();
  spec.model = j.at("model").get<std::string>();
  spec.total_work = j.at("total_work").get<double>();
  return spec;
}

}  // namespace

std::string EventToJson(const s::EventBody& body) {
  json j = std::visit(
      [](const auto& e) -> json {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, s::JobSubmitted>) return {{"type", "submit"}, {"spec", SpecToJson(e.spec)}};
        if constexpr (std::is_same_v<T, s::JobFinished>) return {{"type", "finished"}, {"job", e.job}};
        if constexpr (std::is_same_v<T, s::JobCancelled>) return {{"type", "cancelled"}, {"job", e.job}};
        if constexpr (std::is_same_v<T, s::JobProgress>)
          return {{"type", "progress"}, {"job", e.job}, {"remaining", e.remaining_work}};
        if constexpr (std::is_same_v<T, s::ServersLoaned>) return {{"type", "loaned"}, {"servers", e.servers}};
        if constexpr (std::is_same_v<T, s::Reclaim>)
          return {{"type", "reclaim"}, {"count", e.count}, {"servers", e.servers}, {"deadline", e.deadline}};
        if constexpr (std::is_same_v<T, s::ServerFailed>) return {{"type", "failed"}, {"server", e.server}};
        if constexpr (std::is_same_v<T, s::ServerRecovered>) return {{"type", "recovered"}, {"server", e.server}};
        if constexpr (std::is_same_v<T, s::Tick>) return {{"type", "tick"}};
      },
      body);
  return j.dump();
}

Result<s::EventBody> EventFromJson(const std::string& text) {
  try {
    json j = json::parse(text);
    std::string type = j.at("type").get<std::string>();
    if (type == "submit") return s::EventBody(s::JobSubmitted{SpecFromJson(j.at("spec"))});
    if (type == "finished") return s::EventBody(s::JobFinished{j.at("job").get<s::JobId>()});
    if (type == "cancelled") return s::EventBody(s::JobCancelled{j.at("job").get<s::JobId>()});
    if (type == "progress")
      return s::EventBody(s::JobProgress{j.at("job").get<s::JobId>(), j.at("remaining").get<double>()});
    if (type == "loaned") return s::EventBody(s::ServersLoaned{j.at("servers").get<std::vector<s::ServerId>>()});
    if (type == "reclaim")
      return s::EventBody(s::Reclaim{j.at("count").get<int>(), j.at("servers").get<std::vector<s::ServerId>>(),
                                     j.at("deadline").get<double>()});
    if (type == "failed") return s::EventBody(s::ServerFailed{j.at("server").get<s::ServerId>()});
    if (type == "recovered") return s::EventBody(s::ServerRecovered{j.at("server").get<s::ServerId>()});
    if (type == "tick") return s::EventBody(s::Tick{});
    return Status::Corruption("core journal: unknown event type '" + type + "'");
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("core journal: ") + e.what());
  }
}


// Builds the core from every known node and replays the journal. When
// `recovering` names a server, it is journaled as recovering now.
Status Daemon::Impl::RebuildCore(std::optional<s::ServerId> recovering) {
  if (nodes.empty()) return Status::Ok();
  std::vector<s::ServerSpec> servers;
  for (const auto& [id, n] : nodes) {
    servers.push_back({n.server_id, n.id, n.pool == p::Pool::kInference ? s::Pool::kInference : s::Pool::kTraining,
                       n.gpu_type, n.slots});
  }
  std::sort(servers.begin(), servers.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  s::SchedulerConfig cfg;
  cfg.rescale_pause = opt.rescale_pause;
  cfg.restart_pause = opt.restart_pause;
  cfg.checkpoint_interval = opt.checkpoint_interval;
  ARYL_ASSIGN_OR_RETURN(auto fresh, s::Scheduler::Create(opt.policy, servers, Catalog(), cfg));
  // Every server starts failed at time 0; the journal says when each came up.
  for (const auto& sv : servers) {
    auto r = fresh->Handle({0.0, s::ServerFailed{sv.id}});
    if (!r.ok()) return r.status().WithContext("rebuild: fail server " + sv.name);
  }
  ARYL_ASSIGN_OR_RETURN(auto journal, store->CoreEvents());
  double t_last = 0;
  std::size_t row = 0;
  for (const auto& [t, body] : journal) {
    ++row;
    auto ev = EventFromJson(body);
    if (!ev.ok()) {
      return Status::Corruption("state file: table core_events, row " + std::to_string(row) + " (t=" +
                                std::to_string(t) + ") '" + body.substr(0, 200) + "': " + ev.status().message());
    }
    auto r = fresh->Handle({t, *ev});
    // A journaled event was valid when it was handled; the core is deterministic.
    if (!r.ok()) spdlog::warn("replay of {} at t={:.3f}: {}", body, t, r.status().ToString());
    t_last = std::max(t_last, t);
  }
  last_core_time = std::max(last_core_time, t_last);
  core = std::move(fresh);
  spdlog::info("core: {} servers, replayed {} journaled events", servers.size(), journal.size());
  if (recovering) return Feed(s::ServerRecovered{*recovering}, "server recovered");
  return Status::Ok();
}

}  // namespace aryl::daemon
