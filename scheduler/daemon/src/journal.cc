// The event journal's rows as the daemon writes them (Journal: the nodes a row
// is about and its facts as JSON beside the text), and the inspection requests
// that read them back: describe job, describe node, list events, and the
// checkpoint reports describe shows (protocol/inspect.h, steps 1-3 and 8).
#include "aryl/protocol/generation.h"
#include "daemon_impl.h"

namespace aryl::daemon {
namespace {

json ParseData(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

p::EventRow ToRow(const EventRecord& e) {
  p::EventRow r;
  r.seq = e.seq;
  r.time = std::max(0.0, e.time);
  r.job = e.job;
  r.nodes = e.nodes;
  r.kind = e.kind;
  r.detail = e.detail;
  r.data = ParseData(e.data);
  return r;
}

std::vector<p::PlacementRow> PlacementRows(const json& placement) {
  std::vector<p::PlacementRow> rows;
  if (!placement.is_object()) return rows;
  for (auto it = placement.begin(); it != placement.end(); ++it)
    if (it.value().is_number_integer() && it.value().get<std::int64_t>() > 0)
      rows.push_back({it.key(), it.value().get<std::int64_t>()});
  return rows;
}

template <typename T>
T Get(const json& data, const char* key, T fallback) {
  auto it = data.find(key);
  if (it == data.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const std::exception&) {
    return fallback;
  }
}

// Keeps the newest `max` (the vector is oldest first); true when some were dropped.
template <typename T>
bool KeepNewest(std::vector<T>& v, std::size_t max) {
  if (v.size() <= max) return false;
  v.erase(v.begin(), v.end() - static_cast<std::ptrdiff_t>(max));
  return true;
}

}  // namespace

std::int64_t PlanOfStore(std::int64_t g) { return g >= p::kFaultsPerPlan ? p::PlanOf(g) : std::max<std::int64_t>(0, g); }

Status Daemon::Impl::Journal(std::uint64_t job, const std::string& kind, const std::string& detail, json data,
                             std::vector<std::string> nodes) {
  EventRecord e;
  e.time = WallNow();
  e.job = job;
  e.kind = kind;
  e.detail = detail;
  e.nodes = std::move(nodes);
  e.data = data.dump(-1, ' ', false, json::error_handler_t::replace);
  return store->AppendEvent(e);
}

Status Daemon::Impl::JournalPlacement(Job& j, const std::string& kind, const std::vector<p::WorkerId>& members,
                                       const std::string& reason) {
  std::map<std::string, int> placed;
  json ranks = json::array();
  for (auto id : members) {
    const Worker& w = j.workers[id];
    placed[w.agent]++;
    ranks.push_back({{"worker", id}, {"rank", w.rank}, {"node", w.agent}, {"slot", w.slot}});
  }
  std::vector<std::string> where;
  for (const auto& [node, n] : placed) where.push_back(node);
  return Journal(j.rec.id, kind,
                 "generation " + std::to_string(j.generation) + " on " + PlacementString(placed) + " (" + reason + ")",
                 {{"generation", j.generation}, {"placement", placed}, {"members", ranks}, {"reason", reason}},
                 std::move(where));
}

std::vector<std::string> Daemon::Impl::JobNodes(const Job& j) {
  std::set<std::string> s;
  for (const auto& [id, w] : j.workers) s.insert(w.agent);
  return {s.begin(), s.end()};
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::DescribeJob& m) {
  auto it = jobs.find(m.job);
  const Job* live = it != jobs.end() ? &it->second : nullptr;
  JobRecord rec;
  if (live) {
    rec = live->rec;
  } else {
    auto r = store->GetJob(m.job);
    if (!r.ok()) return Err(r.status());
    rec = *r;
  }
  p::JobDescription d;
  d.row = Row(rec, live);
  if (live && d.row.state == p::JobState::kQueued && live->workers.empty()) d.row.pending_reason = PendingReason(*live);
  if (auto spec = p::DecodeAs<p::SubmitJob>(rec.spec_json); spec.ok()) {
    d.argv = spec->argv;
    for (const auto& [name, value] : spec->env) d.env_names.push_back(name);  // never the values
    d.cwd = spec->cwd;
    d.checkpoint_dir = spec->checkpoint_dir;
    d.model = spec->model;
    d.total_work = spec->total_work;
    d.stop_grace = spec->stop_grace.value_or(opt.stop_grace);
  }
  d.start_time = std::max(0.0, rec.start_time);
  d.end_time = std::max(0.0, rec.end_time);
  if (IsTerminal(rec.state)) d.exit_code = std::clamp(rec.exit_code, 0, 255);
  d.message = rec.message;
  if (live) {
    std::map<std::string, int> placement;
    for (const auto& [id, w] : live->workers)
      if (!w.leaving) placement[w.agent]++;
    for (const auto& [node, n] : placement) d.placement.push_back({node, n});
    d.rank0_worker = RankZero(*live);
  }
  // Each kind's newest rows, read newest first and bounded, so a long history
  // costs the same as a short one.
  auto newest = [&](const std::string& kind) -> Result<std::vector<EventRecord>> {
    EventFilter f;
    f.job = m.job;
    f.kind = kind;
    f.newest_first = true;
    f.limit = static_cast<int>(p::kMaxDescribeRows) + 1;
    ARYL_ASSIGN_OR_RETURN(auto rows, store->Events(f));
    if (rows.size() > p::kMaxDescribeRows) d.history_truncated = true;
    std::reverse(rows.begin(), rows.end());
    return rows;
  };
  std::vector<EventRecord> placements;
  for (const char* kind : {"start", "resize"}) {
    auto rows = newest(kind);
    if (!rows.ok()) return Err(rows.status());
    placements.insert(placements.end(), rows->begin(), rows->end());
  }
  std::sort(placements.begin(), placements.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  for (const auto& e : placements) {
    json data = ParseData(e.data);
    d.history.push_back({std::max(0.0, e.time), e.kind, std::max<std::int64_t>(0, Get<std::int64_t>(data, "generation", 0)),
                         PlacementRows(data.value("placement", json::object())),
                         Get<std::string>(data, "reason", e.detail)});
  }
  d.history_truncated |= KeepNewest(d.history, p::kMaxDescribeRows);
  auto reports = newest("resize_report");
  if (!reports.ok()) return Err(reports.status());
  for (const auto& e : *reports) {
    json data = ParseData(e.data);
    if (!data.contains("phases")) continue;  // a row of an older version: no numbers
    p::Rescale r;
    r.time = std::max(0.0, e.time);
    r.store_generation = std::max<std::int64_t>(0, Get<std::int64_t>(data, "generation", 0));
    r.generation = PlanOfStore(r.store_generation);
    r.from_workers = std::max<std::int64_t>(0, Get<std::int64_t>(data, "from_workers", 0));
    r.to_workers = std::max<std::int64_t>(0, Get<std::int64_t>(data, "to_workers", 0));
    r.planned = Get<bool>(data, "planned", true);
    const json& ph = data["phases"];
    r.phases = {std::max(0.0, Get<double>(ph, "detect", 0)), std::max(0.0, Get<double>(ph, "agree", 0)),
                std::max(0.0, Get<double>(ph, "rendezvous", 0)), std::max(0.0, Get<double>(ph, "communicator", 0)),
                std::max(0.0, Get<double>(ph, "state_transfer", 0)), std::max(0.0, Get<double>(ph, "total", 0))};
    d.rescales.push_back(r);
  }
  // Restarts (restart-kind jobs, and restarts after failures): each stop row,
  // with the pause its restart_report measured (the report that follows it
  // before the next stop), else unknown; sizes from the report, else from
  // the stop and the next start.
  auto stops = newest("restart");
  if (!stops.ok()) return Err(stops.status());
  auto measured = newest("restart_report");
  if (!measured.ok()) return Err(measured.status());
  for (std::size_t i = 0; i < stops->size(); ++i) {
    const EventRecord& e = (*stops)[i];
    const std::int64_t next_stop = i + 1 < stops->size() ? (*stops)[i + 1].seq : INT64_MAX;
    json data = ParseData(e.data);
    p::Rescale r;
    r.kind = "restart";
    r.time = std::max(0.0, e.time);
    r.from_workers = std::max<std::int64_t>(0, Get<std::int64_t>(data, "workers", 0));
    r.planned = Get<bool>(data, "planned", true);
    r.pause_known = false;
    for (const auto& h : placements) {
      if (h.seq <= e.seq || h.seq >= next_stop || h.kind != "start") continue;
      json hd = ParseData(h.data);
      r.generation = std::max<std::int64_t>(0, Get<std::int64_t>(hd, "generation", 0));
      std::int64_t n = 0;
      for (const auto& pr : PlacementRows(hd.value("placement", json::object()))) n += pr.workers;
      r.to_workers = n;
      break;
    }
    for (const auto& m : *measured) {
      if (m.seq <= e.seq || m.seq >= next_stop) continue;
      json md = ParseData(m.data);
      r.generation = std::max<std::int64_t>(0, Get<std::int64_t>(md, "generation", r.generation));
      r.to_workers = std::max<std::int64_t>(0, Get<std::int64_t>(md, "to_workers", r.to_workers));
      r.phases.total = std::max(0.0, Get<double>(md, "pause", 0));
      r.pause_known = true;
      break;
    }
    r.store_generation = r.generation;
    d.rescales.push_back(r);
  }
  std::sort(d.rescales.begin(), d.rescales.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
  KeepNewest(d.rescales, p::kMaxDescribeRows);
  auto preempts = newest("preempt");
  if (!preempts.ok()) return Err(preempts.status());
  for (const auto& e : *preempts) d.preemptions.push_back({std::max(0.0, e.time), "", -1, e.detail});
  auto exits = newest("worker_exit");
  if (!exits.ok()) return Err(exits.status());
  for (const auto& e : *exits) {
    json data = ParseData(e.data);
    std::string error = Get<std::string>(data, "error", "");
    if (error.empty()) continue;
    d.exec_errors.push_back({std::max(0.0, e.time), Get<std::string>(data, "node", ""),
                             std::max<std::int64_t>(-1, Get<std::int64_t>(data, "worker", -1)), error});
  }
  if (live) d.speed = DescribeSpeed(*live);
  if (const p::CheckpointRow* c = table.LastCheckpoint(m.job)) {
    d.last_checkpoint = *c;
  } else {
    EventFilter f;
    f.job = m.job;
    f.kind = "checkpoint";
    f.newest_first = true;
    f.limit = 1;
    auto rows = store->Events(f);
    if (!rows.ok()) return Err(rows.status());
    if (!rows->empty()) {
      json data = ParseData(rows->front().data);
      p::CheckpointRow row;
      row.time = std::max(0.0, rows->front().time);
      row.generation = PlanOfStore(Get<std::int64_t>(data, "generation", 0));
      row.step = std::max<std::int64_t>(0, Get<std::int64_t>(data, "step", 0));
      row.path = Get<std::string>(data, "path", "");
      row.bytes = std::max<std::int64_t>(0, Get<std::int64_t>(data, "bytes", 0));
      row.seconds = std::max(0.0, Get<double>(data, "seconds", 0));
      row.node = Get<std::string>(data, "node", "");
      d.last_checkpoint = row;
    }
  }
  return p::Message(d);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::DescribeNode& m) {
  auto nit = nodes.find(m.node);
  if (nit == nodes.end() || nit->second.removed) return Err(Status::NotFound("no node named '" + m.node + "'"));
  const Node& n = nit->second;
  Identity who = Caller(from);
  auto visible = [&](p::JobId job) {
    if (job == 0 || who.Has(kOperatorRole)) return true;
    auto owner = JobOwner(job);
    return owner && *owner == who.name;
  };
  p::NodeDescription d;
  for (const auto& row : NodeRows())
    if (row.agent_id == n.id) d.row = row;
  d.liveness = !n.connected ? "dead" : n.drained ? (d.row.used_slots > 0 ? "draining" : "drained") : "live";
  d.loan_state = n.loan_state;
  for (const auto& pr : reclaims) {
    if (pr.node != n.id) continue;
    d.loan_state = "reclaiming";
    d.reclaim_deadline = std::max(0.0, pr.deadline);
  }
  if (auto dr = draining.find(n.server_id); dr != draining.end()) {  // jobs left to finish on it
    d.loan_state = "reclaiming";
    d.reclaim_deadline = std::max(0.0, dr->second.deadline);
  }
  d.store_endpoint = n.store_endpoint;
  d.serving = n.serving;
  for (const auto& [jid, j] : jobs) {
    if (!visible(jid)) continue;
    for (const auto& [wid, w] : j.workers) {
      if (w.agent != n.id) continue;
      d.workers.push_back({jid, j.rec.name, j.spec.owner.value_or("local"), wid, w.rank, w.slot,
                           std::max<std::int64_t>(0, w.generation), w.leaving});
    }
  }
  std::sort(d.workers.begin(), d.workers.end(),
            [](const auto& a, const auto& b) { return std::tie(a.job, a.rank, a.worker) < std::tie(b.job, b.rank, b.worker); });
  EventFilter f;
  f.node = n.id;
  f.newest_first = true;
  f.limit = static_cast<int>(p::kDescribeNodeEvents);
  auto rows = store->Events(f);
  if (!rows.ok()) return Err(rows.status());
  for (auto it = rows->rbegin(); it != rows->rend(); ++it)
    if (visible(it->job)) d.recent_events.push_back(ToRow(*it));
  return p::Message(d);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::ListEvents& m) {
  if (Status v = m.Validate(); !v.ok()) {
    metrics.Inc("aryl_bad_requests_total");
    return Err(v);
  }
  // A user sees cluster rows and their own jobs' rows; pages are filled with
  // those, scanning at most kMaxScanPages pages of the journal per request
  // (next_after says where the next request goes on).
  constexpr int kMaxScanPages = 20;
  Identity who = Caller(from);
  std::map<p::JobId, bool> mine;
  auto visible = [&](p::JobId job) {
    if (job == 0 || who.Has(kOperatorRole)) return true;
    auto [it, fresh] = mine.try_emplace(job, false);
    if (fresh) {
      auto owner = JobOwner(job);
      it->second = owner && *owner == who.name;
    }
    return it->second;
  };
  int limit = static_cast<int>(m.limit > 0 ? m.limit : p::kDefaultEventsPage);
  EventFilter f;
  f.job = m.job;
  f.node = m.node;
  f.kind = m.kind;
  f.since = m.since;
  f.limit = limit + 1;
  p::EventsReply reply;
  reply.next_after = m.after;
  for (int page = 0; page < kMaxScanPages; ++page) {
    f.after = reply.next_after;
    auto rows = store->Events(f);
    if (!rows.ok()) return Err(rows.status());
    for (const auto& e : *rows) {
      if (static_cast<int>(reply.events.size()) == limit) {
        reply.more = true;
        return p::Message(reply);
      }
      reply.next_after = e.seq;
      if (visible(e.job)) reply.events.push_back(ToRow(e));
    }
    if (static_cast<int>(rows->size()) <= limit) return p::Message(reply);  // the journal's end
  }
  reply.more = true;  // scanned enough for one request; the next one goes on
  return p::Message(reply);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::CheckpointReport& m) {
  auto jit = jobs.find(m.job);
  if (jit == jobs.end()) return std::nullopt;  // a late report of a job that is over
  // One checkpoint_failed row for `r` in checkpoint directory `dir`: the
  // failures it stands for, the newest one's step and error, and how many the
  // job has had in all. `then`: what followed (a recovery), or "".
  auto journal_failures = [&](const FailureTally::Row& r, const std::string& dir, const std::string& then) {
    std::string detail = "step " + std::to_string(r.last_step) + " in " + dir + " on " + m.agent_id + ": " +
                         r.last_error;
    if (r.failures > 1)
      detail += " (" + std::to_string(r.failures) + " failures since step " + std::to_string(r.first_step) + ", " +
                FormatDuration(WallNow() - r.first_time) + " ago)";
    Status st = Journal(m.job, "checkpoint_failed", detail + then,
                        {{"generation", m.generation}, {"step", r.last_step}, {"path", dir}, {"node", m.agent_id},
                         {"worker", m.worker}, {"error", r.last_error}, {"failures", r.failures},
                         {"first_step", r.first_step}, {"total_failures", table.CheckpointFailures(m.job)}},
                        {m.agent_id});
    if (!st.ok()) spdlog::warn("job {}: checkpoint failure not journaled: {}", m.job, st.ToString());
  };
  if (!m.error.empty()) {
    // The job keeps its last good checkpoint; the operator sees why the next
    // one is missing (aryl events, describe job, aryl_checkpoint_failures_total
    // and aryl_job_checkpoint_failures_total). Each failure is counted; one row
    // per kCheckpointJournalSeconds stands for those since the previous row.
    metrics.Inc("aryl_checkpoint_failures_total");
    auto due = table.CheckpointFailed(m.job, WallNow(), m.step, m.error, p::kCheckpointJournalSeconds);
    if (!due) return std::nullopt;
    spdlog::error("job {}: checkpoint at step {} failed on {}: {} ({} failure(s) since step {})", m.job, m.step,
                  m.agent_id, m.error, due->failures, due->first_step);
    journal_failures(*due, m.path, "");
    return std::nullopt;
  }
  // Checkpoints work again: the failures no row stood for yet get one now.
  if (auto left = table.CheckpointRecovered(m.job)) {
    std::string dir = m.path.substr(0, m.path.rfind('/'));  // a failure's path is the directory
    journal_failures(*left, dir, "; then step " + std::to_string(m.step) + " was checkpointed");
  }
  p::CheckpointRow row{WallNow(), PlanOfStore(m.generation), m.step, m.path, m.bytes, m.seconds, m.agent_id};
  if (!table.CheckpointSaved(m.job, row, p::kCheckpointJournalSeconds)) return std::nullopt;
  Status st = Journal(m.job, "checkpoint",
                      "step " + std::to_string(m.step) + " at " + m.path + " (" + std::to_string(m.bytes) + " bytes, " +
                          FormatDuration(m.seconds) + ") on " + m.agent_id,
                      {{"generation", m.generation}, {"step", m.step}, {"path", m.path}, {"bytes", m.bytes},
                       {"seconds", m.seconds}, {"node", m.agent_id}, {"worker", m.worker}},
                      {m.agent_id});
  if (!st.ok()) spdlog::warn("job {}: checkpoint not journaled: {}", m.job, st.ToString());
  return std::nullopt;
}

}  // namespace aryl::daemon
