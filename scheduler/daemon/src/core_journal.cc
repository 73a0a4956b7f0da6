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
          {"total_work", spec.total_work},
          {"restart", spec.rescale == s::Rescale::kRestart},
          {"queue", spec.queue},
          {"priority", spec.priority}};
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
  // Journals written before restart elasticity hold in-place jobs only.
  if (j.value("restart", false)) spec.rescale = s::Rescale::kRestart;
  // Journals before teams: the default queue, normal priority.
  spec.queue = j.value("queue", std::string());
  spec.priority = j.value("priority", 1);
  return spec;
}

}  // namespace

namespace {

json EventJson(const s::EventBody& body) {
  return std::visit(
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
        if constexpr (std::is_same_v<T, s::ServerFailed>) {
          json f{{"type", "failed"}, {"server", e.server}};
          if (e.cause != s::ServerFailed{}.cause) f["cause"] = e.cause;  // rows before causes have none
          return f;
        }
        if constexpr (std::is_same_v<T, s::ServerRecovered>) return {{"type", "recovered"}, {"server", e.server}};
        if constexpr (std::is_same_v<T, s::ServerCordoned>)
          return {{"type", "cordoned"}, {"server", e.server}, {"cordoned", e.cordoned}};
        if constexpr (std::is_same_v<T, s::Tick>) return {{"type", "tick"}};
        if constexpr (std::is_same_v<T, s::JobRescaleKnown>)
          return {{"type", "rescale_kind"}, {"job", e.job}, {"restart", e.rescale == s::Rescale::kRestart}};
        if constexpr (std::is_same_v<T, s::JobResizeMeasured>)
          return {{"type", "resize_pause"}, {"job", e.job}, {"pause", e.pause}};
      },
      body);
}

}  // namespace

std::string EventToJson(const s::EventBody& body) { return EventJson(body).dump(); }

namespace {

Result<s::EventBody> EventFromParsed(const json& j) {
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
  if (type == "failed") {
    s::ServerFailed f{j.at("server").get<s::ServerId>()};
    if (j.contains("cause")) f.cause = j.at("cause").get<std::string>();
    return s::EventBody(std::move(f));
  }
  if (type == "recovered") return s::EventBody(s::ServerRecovered{j.at("server").get<s::ServerId>()});
  if (type == "tick") return s::EventBody(s::Tick{});
  if (type == "cordoned")
    return s::EventBody(s::ServerCordoned{j.at("server").get<s::ServerId>(), j.at("cordoned").get<bool>()});
  if (type == "resize_pause")
    return s::EventBody(s::JobResizeMeasured{j.at("job").get<s::JobId>(), j.at("pause").get<double>()});
  if (type == "rescale_kind")
    return s::EventBody(s::JobRescaleKnown{j.at("job").get<s::JobId>(),
                                           j.at("restart").get<bool>() ? s::Rescale::kRestart : s::Rescale::kInPlace});
  return Status::Corruption("core journal: unknown event type '" + type + "'");
}

}  // namespace

Result<s::EventBody> EventFromJson(const std::string& text) {
  try {
    return EventFromParsed(json::parse(text));
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("core journal: ") + e.what());
  }
}

std::string ServerAddedToJson(const s::ServerSpec& spec) {
  return json{{"type", "server_added"},
              {"server", {{"id", spec.id},
                          {"name", spec.name},
                          {"inference", spec.pool == s::Pool::kInference},
                          {"gpu_type", spec.gpu_type},
                          {"gpus", spec.gpus}}}}
      .dump();
}

std::string AppliedToJson(const s::EventBody& body) {
  json j = EventJson(body);
  j["round"] = false;
  return j.dump();
}

std::string SpeedSampleToJson(const SpeedSampleRow& row) {
  const s::StepSample& x = row.sample;
  json j{{"type", "speed"},
         {"job", row.job},
         {"sample",
          {{"gpu_type", x.gpu_type},
           {"workers", x.workers},
           {"nodes", x.nodes},
           {"local_batch", x.local_batch},
           {"step_time", x.step_time},
           {"spread", x.spread},
           {"count", x.count}}}};
  if (row.deferred) j["deferred"] = true;
  return j.dump();
}

// Doubles print shortest-exact: the row gives back the very parameters.
std::string SpeedFitToJson(const SpeedFitRow& row) {
  return json{{"type", "speed_fit"},
              {"job", row.job},
              {"fit", json::parse(s::SpeedParamsToJson(row.fit.params))},
              {"fitted_count", row.fit.fitted_count}}
      .dump();
}

namespace {

SpeedFitRow SpeedFitFromJson(const json& j) {
  SpeedFitRow row;
  row.job = j.at("job").get<s::JobId>();
  auto params = s::SpeedParamsFromJson(j.at("fit").dump());
  if (!params.ok()) throw std::invalid_argument(params.status().message());
  row.fit.params = std::move(*params);
  row.fit.fitted_count = j.at("fitted_count").get<std::vector<int>>();
  return row;
}

}  // namespace

Result<JournalRow> RowFromJson(const std::string& text) {
  try {
    json j = json::parse(text);
    if (j.at("type").get<std::string>() == "speed") {
      SpeedSampleRow row;
      row.job = j.at("job").get<s::JobId>();
      const json& x = j.at("sample");
      row.sample.gpu_type = x.at("gpu_type").get<std::string>();
      row.sample.workers = x.at("workers").get<int>();
      row.sample.nodes = x.at("nodes").get<int>();
      row.sample.local_batch = x.at("local_batch").get<double>();
      row.sample.step_time = x.at("step_time").get<double>();
      row.sample.spread = x.at("spread").get<double>();
      row.sample.count = x.at("count").get<int>();
      row.deferred = j.value("deferred", false);
      Status valid = s::ValidateStepSample(row.sample, "core journal: speed row of job " + std::to_string(row.job));
      if (!valid.ok()) return Status::Corruption(valid.message());
      return JournalRow(std::move(row));
    }
    if (j.at("type").get<std::string>() == "speed_fit") {
      SpeedFitRow row = SpeedFitFromJson(j);
      const s::SpeedParams& q = row.fit.params;
      bool valid = std::all_of(row.fit.fitted_count.begin(), row.fit.fitted_count.end(), [](int c) { return c >= 0; });
      for (double v : {q.alpha_c, q.beta_c, q.alpha_r, q.beta_r, q.alpha_n, q.beta_n, q.gamma}) valid &= v > 0 && std::isfinite(v);
      for (const auto& [type, r] : q.type_speed) valid &= r > 0 && std::isfinite(r);
      if (!valid) return Status::Corruption("core journal: speed_fit row of job " + std::to_string(row.job) +
                                            ": a parameter not positive and finite, or a negative count");
      return JournalRow(std::move(row));
    }
    if (j.at("type").get<std::string>() != "server_added") {
      ARYL_ASSIGN_OR_RETURN(auto ev, EventFromParsed(j));
      if (!j.value("round", true)) return JournalRow(Applied{std::move(ev)});
      return JournalRow(std::move(ev));
    }
    const json& sv = j.at("server");
    s::ServerSpec spec;
    spec.id = sv.at("id").get<s::ServerId>();
    spec.name = sv.at("name").get<std::string>();
    spec.pool = sv.at("inference").get<bool>() ? s::Pool::kInference : s::Pool::kTraining;
    spec.gpu_type = sv.at("gpu_type").get<std::string>();
    spec.gpus = sv.at("gpus").get<int>();
    if (spec.gpus <= 0 || spec.gpu_type.empty())
      return Status::Corruption("core journal: server_added " + spec.name + " with gpus " +
                                std::to_string(spec.gpus) + ", gpu_type '" + spec.gpu_type + "'");
    return JournalRow(ServerAdded{spec});
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("core journal: ") + e.what());
  }
}

s::ServerSpec Daemon::Impl::CoreSpec(const Node& n) {
  return {n.server_id, n.id, n.pool == p::Pool::kInference ? s::Pool::kInference : s::Pool::kTraining, n.gpu_type,
          n.slots};
}

// A server joins `into` at core time t; the one code path of the live join and
// of its replay, so that both build the same core.
Status Daemon::Impl::JoinCore(std::unique_ptr<s::Scheduler>& into, const s::ServerSpec& spec, double t) {
  if (into) return into->AddServer(spec);
  if (!speed) ARYL_RETURN_IF_ERROR(ResetSpeed(false));
  ARYL_ASSIGN_OR_RETURN(into, s::Scheduler::Create(opt.policy, {spec}, Catalog(), CoreConfig()));
  return into->Handle({t, s::ServerFailed{spec.id}}).status();
}

s::SchedulerConfig Daemon::Impl::CoreConfig() const {
  s::SchedulerConfig cfg;
  cfg.rescale_pause = opt.rescale_pause;
  cfg.restart_pause = opt.restart_pause;
  cfg.checkpoint_interval = opt.checkpoint_interval;
  cfg.resize_horizon = opt.resize_horizon;
  cfg.resize_dwell = opt.resize_dwell;
  cfg.resize_margin = opt.resize_margin;
  // RoundTick runs a round at Scheduler::NextWakeup: a job left to finish on a
  // reclaimed server leaves by its deadline if it is not done.
  cfg.reclaim_lets_jobs_finish = opt.reclaim_lets_jobs_finish;
  cfg.speed = speed;
  cfg.queues = queues;
  cfg.quota_min_runtime = opt.quota_min_runtime;
  cfg.quota_reclaim_deadline = opt.quota_reclaim_deadline;
  return cfg;
}

// A new agent's server joins the core: one journaled row, the core as it is
// (no replay). A GPU type new to the cluster changes every job's curves: the
// core is snapshotted and restored with the new server (its jobs' curves built
// again, placements kept), without a row.
Status Daemon::Impl::AddServer(const Node& n) {
  s::ServerSpec spec = CoreSpec(n);
  bool new_type = core && core->state().type_index(n.gpu_type) < 0;
  if (new_type) {
    ARYL_RETURN_IF_ERROR(SnapshotCore());
    return RebuildCore(n.server_id);
  }
  double t = CoreNow();
  ARYL_RETURN_IF_ERROR(JoinCore(core, spec, t));
  last_core_time = t;
  ARYL_RETURN_IF_ERROR(AppendCoreRow(t, ServerAddedToJson(spec)));
  spdlog::info("core: server {} ({}) joined; {} servers", spec.id, spec.name, core->state().servers().size());
  return Feed(s::ServerRecovered{n.server_id}, "server recovered");
}

Status Daemon::Impl::AppendCoreRow(double t, const std::string& body) {
  ARYL_RETURN_IF_ERROR(store->AppendCoreEvent(t, body));
  ++journal_rows;
  return Status::Ok();
}

// The journal becomes one snapshot of the core as it is now; the live core is
// replaced by its restored copy, so that it is exactly what a restart builds
// (and ended jobs leave memory). O(servers + active jobs), all of it here.
Status Daemon::Impl::SnapshotCore() {
  if (!core) return Status::Ok();
  pending_snapshot.reset();  // older than this one: never to be saved over it
  auto image = core->Snapshot();
  ARYL_ASSIGN_OR_RETURN(std::string text, SnapshotToJson(image));
  ARYL_ASSIGN_OR_RETURN(auto restored, s::Scheduler::Restore(opt.policy, std::move(image), Catalog(), CoreConfig()));
  // The speed models in the snapshot's text (core_journal.h); the older
  // copy in meta is emptied after it (a crash between leaves both: the
  // snapshot's is read).
  if (speed) text = JoinSnapshot(std::move(text), speed->ToJson());
  ARYL_RETURN_IF_ERROR(store->SaveCoreSnapshot(text));
  if (speed) ARYL_RETURN_IF_ERROR(store->SetMeta("speed_models", ""));
  core = std::move(restored);
  journal_rows = 0;
  snapshot_bytes = text.size();
  return Status::Ok();
}

// Builds the core: from the journal's snapshot when there is one, else from the
// known nodes that joined without a journal row (present from time 0, failed
// until their journaled recovery); then replays the rows after it,
// server_added rows included. Nodes that neither the snapshot nor a row knows
// (a server of a new GPU type) join it failed. When `recovering` names a
// server, it is journaled as recovering now.
Status Daemon::Impl::RebuildCore(std::optional<s::ServerId> recovering) {
  if (nodes.empty()) return Status::Ok();
  ARYL_ASSIGN_OR_RETURN(auto snapshot_text, store->CoreSnapshot());
  ARYL_ASSIGN_OR_RETURN(auto journal, store->CoreEvents());
  std::vector<std::pair<double, JournalRow>> rows;
  rows.reserve(journal.size());
  std::set<s::ServerId> joined;
  for (const auto& [t, body] : journal) {
    auto row = RowFromJson(body);
    if (!row.ok()) {
      return Status::Corruption("state file: table core_events, row " + std::to_string(rows.size() + 1) + " (t=" +
                                std::to_string(t) + ") '" + body.substr(0, 200) + "': " + row.status().message());
    }
    if (auto* a = std::get_if<ServerAdded>(&*row)) joined.insert(a->spec.id);
    rows.emplace_back(t, std::move(*row));
  }
  std::optional<s::Scheduler::Image> image;
  std::optional<std::string_view> snapshot_models;
  if (snapshot_text) {
    const SnapshotParts parts = SplitSnapshot(*snapshot_text);
    auto im = SnapshotFromJson(parts.core);
    if (!im.ok()) return Status::Corruption("state file: table meta, key 'core_snapshot': " + im.status().message());
    image = std::move(*im);
    snapshot_models = parts.models;
    for (const auto& sv : image->state.servers) joined.insert(sv.spec.id);
  }
  // The speed models as the snapshot left them; the rows after it add to them.
  ARYL_RETURN_IF_ERROR(ResetSpeed(snapshot_text.has_value(), snapshot_models));
  std::vector<s::ServerSpec> servers;
  for (const auto& [id, n] : nodes)
    if (!joined.count(n.server_id)) servers.push_back(CoreSpec(n));
  std::sort(servers.begin(), servers.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  std::unique_ptr<s::Scheduler> fresh;
  double t_last = 0;
  if (image) {
    for (const auto& sv : servers) {
      s::ServerInfo info;
      info.spec = sv;
      info.state = sv.pool == s::Pool::kTraining ? s::ServerState::kAvailable : s::ServerState::kHeld;
      info.failed = true;
      image->state.servers.push_back(std::move(info));
    }
    t_last = image->state.now;
    auto restored = s::Scheduler::Restore(opt.policy, std::move(*image), Catalog(), CoreConfig());
    if (!restored.ok())
      return Status::Corruption("state file: table meta, key 'core_snapshot': " + restored.status().message());
    fresh = std::move(*restored);
  } else if (!servers.empty()) {
    ARYL_ASSIGN_OR_RETURN(fresh, s::Scheduler::Create(opt.policy, servers, Catalog(), CoreConfig()));
    // Every server starts failed at time 0; the journal says when each came up.
    for (const auto& sv : servers) {
      auto r = fresh->Handle({0.0, s::ServerFailed{sv.id}});
      if (!r.ok()) return r.status().WithContext("rebuild: fail server " + sv.name);
    }
  }
  for (const auto& [t, row] : rows) {
    Status st;
    if (const auto* a = std::get_if<ServerAdded>(&row)) {
      st = JoinCore(fresh, a->spec, t);
    } else if (!fresh) {
      st = Status::Corruption("core journal: an event before any server joined");
    } else if (const auto* x = std::get_if<SpeedSampleRow>(&row)) {
      st = x->deferred ? RecordSpeedSample(x->job, x->sample) : ApplySpeedSample(t, x->job, x->sample, *fresh);
    } else if (const auto* f = std::get_if<SpeedFitRow>(&row)) {
      st = ApplySpeedFit(t, f->job, f->fit, *fresh);
    } else if (const auto* e = std::get_if<Applied>(&row)) {
      st = CoreStep(*fresh, {t, e->body}, /*round=*/false).status();
    } else {
      st = CoreStep(*fresh, {t, std::get<s::EventBody>(row)}, /*round=*/true).status();
    }
    // A journaled row was valid when it was handled; the core is deterministic.
    if (!st.ok()) spdlog::warn("replay of a journal row at t={:.3f}: {}", t, st.ToString());
    t_last = std::max(t_last, t);
  }
  last_core_time = std::max(last_core_time, t_last);
  journal_rows = static_cast<std::int64_t>(rows.size());
  if (!fresh) return Status::Ok();
  core = std::move(fresh);
  spdlog::info("core: {} servers, {} active jobs, from {} and {} journaled rows", core->state().servers().size(),
               core->state().running().size() + core->state().queued().size(),
               snapshot_text ? "a snapshot" : "time 0", journal.size());
  // Fits that were due but not journaled (running when the scheduler stopped,
  // or dropped with the models this replaced) start again.
  SubmitDueFits();
  if (recovering) return Feed(s::ServerRecovered{*recovering}, "server recovered");
  return Status::Ok();
}

}  // namespace aryl::daemon
