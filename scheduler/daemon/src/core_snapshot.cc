// The core snapshot's record format (core_journal.h): one JSON object holding
// a Scheduler::Image. Numbers are written by nlohmann-json, whose doubles
// round-trip exactly; a value that is not finite is refused when writing, so a
// snapshot never holds a number JSON cannot say.
#include <cmath>
#include <nlohmann/json.hpp>

#include "core_journal.h"

namespace aryl::daemon {

namespace s = aryl::sched;
using json = nlohmann::json;

namespace {

struct NotFinite : std::runtime_error {
  using std::runtime_error::runtime_error;
};

double N(double v, const char* what) {
  if (!std::isfinite(v)) throw NotFinite(std::string(what) + " = " + std::to_string(v));
  return v;
}

json PlacementJson(const s::Placement& p) {
  json a = json::array();
  for (const auto& [sid, n] : p) a.push_back({sid, n});
  return a;
}

s::Placement PlacementFrom(const json& a) {
  s::Placement p;
  for (const auto& e : a) p[e.at(0).get<s::ServerId>()] = e.at(1).get<int>();
  return p;
}

json JobJson(const s::JobInfo& j) {
  const auto& sp = j.spec;
  json curves = json::array();
  for (const auto& c : j.curves) {
    json row = json::array();
    for (double v : c) row.push_back(N(v, "curve"));
    curves.push_back(row);
  }
  json out = {{"spec",
           {{"id", sp.id}, {"name", sp.name}, {"submit_time", N(sp.submit_time, "submit_time")},
            {"elastic", sp.kind == s::JobKind::kElastic}, {"min", sp.min_workers}, {"max", sp.max_workers},
            {"requested", sp.requested_workers}, {"granularity", static_cast<int>(sp.granularity.kind)},
            {"multiple", sp.granularity.multiple}, {"gpu_types", sp.gpu_types}, {"model", sp.model},
            {"total_work", N(sp.total_work, "total_work")}, {"state_bytes", N(sp.state_bytes, "state_bytes")},
            {"restart", sp.rescale == s::Rescale::kRestart}, {"queue", sp.queue}, {"priority", sp.priority}}},
          {"running", j.status == s::JobStatus::kRunning},
          {"placement", PlacementJson(j.placement)},
          {"workers", j.workers},
          {"base", j.base_workers},
          {"requested", j.requested_workers},
          {"remaining", N(j.remaining_work, "remaining_work")},
          {"paused_until", N(j.paused_until, "paused_until")},
          {"checkpoint_time", N(j.checkpoint_time, "checkpoint_time")},
          {"checkpoint_remaining", N(j.checkpoint_remaining, "checkpoint_remaining")},
          {"throughput", N(j.throughput, "throughput")},
          {"queued_since", N(j.queued_since, "queued_since")},
          {"suspended", j.suspended},
          {"stats",
           {N(j.stats.first_start, "first_start"), N(j.stats.finish_time, "finish_time"), j.stats.preemptions,
            j.stats.rescales, N(j.stats.gpu_seconds, "gpu_seconds"), N(j.stats.run_time, "run_time"),
            N(j.stats.lost_work, "lost_work")}},
          {"curves", curves}};
  // The resize rule's inputs (resize_rule.h); absent before the rule and
  // while unknown.
  if (std::isfinite(j.last_resize)) out["last_resize"] = N(j.last_resize, "last_resize");
  if (j.measured_pause >= 0) out["measured_pause"] = N(j.measured_pause, "measured_pause");
  if (std::isfinite(j.started_at)) out["started_at"] = N(j.started_at, "started_at");
  return out;
}

s::JobInfo JobFrom(const json& x) {
  s::JobInfo j;
  const json& sp = x.at("spec");
  j.spec.id = sp.at("id").get<s::JobId>();
  j.spec.name = sp.at("name").get<std::string>();
  j.spec.submit_time = sp.at("submit_time").get<double>();
  j.spec.kind = sp.at("elastic").get<bool>() ? s::JobKind::kElastic : s::JobKind::kInelastic;
  j.spec.min_workers = sp.at("min").get<int>();
  j.spec.max_workers = sp.at("max").get<int>();
  j.spec.requested_workers = sp.at("requested").get<int>();
  if (sp.at("restart").get<bool>()) j.spec.rescale = s::Rescale::kRestart;
  int g = sp.at("granularity").get<int>();
  if (g < 0 || g > static_cast<int>(s::Granularity::Kind::kMultiple))
    throw std::runtime_error("job " + std::to_string(j.spec.id) + ": granularity " + std::to_string(g));
  j.spec.granularity.kind = static_cast<s::Granularity::Kind>(g);
  j.spec.granularity.multiple = sp.at("multiple").get<int>();
  j.spec.gpu_types = sp.at("gpu_types").get<std::vector<std::string>>();
  j.spec.model = sp.at("model").get<std::string>();
  j.spec.total_work = sp.at("total_work").get<double>();
  j.spec.state_bytes = sp.at("state_bytes").get<double>();
  // Snapshots before teams: the default queue, normal priority.
  j.spec.queue = sp.value("queue", std::string());
  j.spec.priority = sp.value("priority", 1);
  j.status = x.at("running").get<bool>() ? s::JobStatus::kRunning : s::JobStatus::kQueued;
  j.placement = PlacementFrom(x.at("placement"));
  j.workers = x.at("workers").get<int>();
  j.base_workers = x.at("base").get<int>();
  j.requested_workers = x.at("requested").get<int>();
  j.remaining_work = x.at("remaining").get<double>();
  j.paused_until = x.at("paused_until").get<double>();
  j.checkpoint_time = x.at("checkpoint_time").get<double>();
  j.checkpoint_remaining = x.at("checkpoint_remaining").get<double>();
  j.throughput = x.at("throughput").get<double>();
  j.queued_since = x.at("queued_since").get<double>();
  j.suspended = x.at("suspended").get<bool>();
  const json& st = x.at("stats");
  j.stats.first_start = st.at(0).get<double>();
  j.stats.finish_time = st.at(1).get<double>();
  j.stats.preemptions = st.at(2).get<int>();
  j.stats.rescales = st.at(3).get<int>();
  j.stats.gpu_seconds = st.at(4).get<double>();
  j.stats.run_time = st.at(5).get<double>();
  j.stats.lost_work = st.at(6).get<double>();
  j.curves = x.at("curves").get<std::vector<std::vector<double>>>();
  if (x.contains("last_resize")) j.last_resize = x.at("last_resize").get<double>();
  if (x.contains("measured_pause")) j.measured_pause = x.at("measured_pause").get<double>();
  if (x.contains("started_at")) j.started_at = x.at("started_at").get<double>();
  return j;
}

json ServerJson(const s::ServerInfo& v) {
  json jobs = json::array();
  for (const auto& [id, n] : v.jobs) jobs.push_back({id, n});
  return {{"id", v.spec.id}, {"name", v.spec.name}, {"inference", v.spec.pool == s::Pool::kInference},
          {"gpu_type", v.spec.gpu_type}, {"gpus", v.spec.gpus}, {"state", static_cast<int>(v.state)},
          {"failed", v.failed}, {"used", v.used}, {"jobs", jobs},
          {"busy", N(v.busy_gpu_seconds, "busy_gpu_seconds")}, {"loaned", N(v.loaned_seconds, "loaned_seconds")},
          // kNever (infinity) is not JSON: a server that is not draining has no "return_by".
          {"return_by", v.draining() ? json(N(v.return_by, "return_by")) : json(nullptr)},
          {"reclaim_record", v.reclaim_record}, {"cordoned", v.cordoned}};
}

s::ServerInfo ServerFrom(const json& x) {
  s::ServerInfo v;
  v.spec.id = x.at("id").get<s::ServerId>();
  v.spec.name = x.at("name").get<std::string>();
  v.spec.pool = x.at("inference").get<bool>() ? s::Pool::kInference : s::Pool::kTraining;
  v.spec.gpu_type = x.at("gpu_type").get<std::string>();
  v.spec.gpus = x.at("gpus").get<int>();
  int st = x.at("state").get<int>();
  if (st < 0 || st > static_cast<int>(s::ServerState::kLoaned))
    throw std::runtime_error("server " + std::to_string(v.spec.id) + ": state " + std::to_string(st));
  v.state = static_cast<s::ServerState>(st);
  v.failed = x.at("failed").get<bool>();
  v.used = x.at("used").get<int>();
  for (const auto& e : x.at("jobs")) v.jobs.emplace_back(e.at(0).get<s::JobId>(), e.at(1).get<int>());
  v.busy_gpu_seconds = x.at("busy").get<double>();
  v.loaned_seconds = x.at("loaned").get<double>();
  if (!x.at("return_by").is_null()) v.return_by = x.at("return_by").get<double>();
  v.reclaim_record = x.at("reclaim_record").get<int>();
  v.cordoned = x.value("cordoned", false);  // absent in snapshots from before drains let jobs finish
  return v;
}

}  // namespace

Result<std::string> SnapshotToJson(const s::Scheduler::Image& image, const std::atomic<bool>* cancel) {
  auto cancelled = [cancel] { return cancel && cancel->load(std::memory_order_relaxed); };
  const Status kCancelled = Status::Cancelled("core snapshot: dropped while it was encoded");
  try {
    json servers = json::array(), jobs = json::array(), reclaims = json::array();
    for (const auto& v : image.state.servers) {
      if (cancelled()) return kCancelled;
      servers.push_back(ServerJson(v));
    }
    for (const auto& j : image.state.jobs) {
      if (cancelled()) return kCancelled;
      jobs.push_back(JobJson(j));
    }
    for (const auto& r : image.state.reclaims)
      reclaims.push_back({N(r.time, "reclaim time"), N(r.deadline, "deadline"), r.requested, r.returned,
                          r.preemptions, r.shrinks, N(r.met_time, "met_time"), r.left_to_finish});
    return json{{"now", N(image.state.now, "now")}, {"servers", servers},   {"jobs", jobs},
                {"reclaims", reclaims},             {"policy", image.policy_state},
                {"draining", image.state.draining}}
        .dump();
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("core snapshot: ") + e.what());
  }
}

std::string JoinSnapshot(std::string core, std::string_view models) {
  if (models.empty()) return core;
  core.reserve(core.size() + 1 + models.size());
  core += '\n';
  core += models;
  return core;
}

SnapshotParts SplitSnapshot(std::string_view text) {
  const auto nl = text.find('\n');
  if (nl == std::string_view::npos) return {text, std::nullopt};
  return {text.substr(0, nl), text.substr(nl + 1)};
}

Result<s::Scheduler::Image> SnapshotFromJson(std::string_view text) {
  try {
    // Each server and job is converted as soon as it is parsed and dropped
    // from the document, whose nodes are then reused while still in cache:
    // held whole, the document of 80,000 jobs was several times the text's
    // size and was built, walked and freed in three passes over memory.
    s::Scheduler::Image image;
    std::string member;  // the top-level member being parsed
    json::parser_callback_t one_at_a_time = [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key) member = parsed.get<std::string>();
      if (depth != 2 || event != json::parse_event_t::object_end) return true;
      if (member == "servers") image.state.servers.push_back(ServerFrom(parsed));
      else if (member == "jobs") image.state.jobs.push_back(JobFrom(parsed));
      else return true;
      return false;
    };
    json x = json::parse(text, one_at_a_time);
    image.state.now = x.at("now").get<double>();
    // What is left in these is not an object: a corrupt snapshot (this throws).
    for (const auto& v : x.at("servers")) image.state.servers.push_back(ServerFrom(v));
    for (const auto& j : x.at("jobs")) image.state.jobs.push_back(JobFrom(j));
    for (const auto& r : x.at("reclaims")) {
      s::ReclaimRecord rec;
      rec.time = r.at(0).get<double>();
      rec.deadline = r.at(1).get<double>();
      rec.requested = r.at(2).get<int>();
      rec.returned = r.at(3).get<std::vector<s::ServerId>>();
      rec.preemptions = r.at(4).get<int>();
      rec.shrinks = r.at(5).get<int>();
      rec.met_time = r.at(6).get<double>();
      rec.left_to_finish = r.at(7).get<int>();
      image.state.reclaims.push_back(std::move(rec));
    }
    image.policy_state = x.at("policy").get<std::string>();
    image.state.draining = x.at("draining").get<std::vector<s::ServerId>>();
    return image;
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("core snapshot: ") + e.what() + " in '" + std::string(text.substr(0, 120)) + "'");
  }
}

}  // namespace aryl::daemon
