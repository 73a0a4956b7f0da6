#include "daemon_impl.h"
#include "reclaim_record.h"

#include <charconv>
#include <thread>

#include "aryl/protocol/security.h"
#include "aryl/protocol/store.h"

namespace aryl::daemon {

std::string PlacementString(const std::map<std::string, int>& placement) {
  std::string out;
  for (const auto& [node, n] : placement) out += (out.empty() ? "" : ",") + node + ":" + std::to_string(n);
  return out.empty() ? "-" : out;
}

namespace {

// A number read back from the state file; a bad one names where it came from.
Result<double> ParseStoredNumber(const std::string& where, const std::string& text) {
  double v = 0;
  std::size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v))
    return Status::Corruption("state file: " + where + " = '" + text + "' is not a finite number");
  return v;
}

}  // namespace

Status Daemon::Impl::Init() {
  if (!store) {
    ARYL_RETURN_IF_ERROR(PrepareStateFile(opt.state_path));
    ARYL_ASSIGN_OR_RETURN(store, StateStore::Open(opt.state_path));
    ARYL_RETURN_IF_ERROR(RestrictStateFiles(opt.state_path));
  }
  ARYL_ASSIGN_OR_RETURN(auto sk, store->GetMeta("store_key"));
  if (sk) {
    store_key = *sk;
  } else {
    ARYL_ASSIGN_OR_RETURN(store_key, p::NewStoreKey());
    ARYL_RETURN_IF_ERROR(store->SetMeta("store_key", store_key));
  }
  ARYL_ASSIGN_OR_RETURN(auto ep, store->GetMeta("epoch"));
  if (ep) {
    ARYL_ASSIGN_OR_RETURN(epoch, ParseStoredNumber("table meta, key 'epoch'", *ep));
  } else {
    epoch = WallNow();
    ARYL_RETURN_IF_ERROR(store->SetMeta("epoch", std::to_string(epoch)));
  }
  scheduler_epoch = static_cast<std::uint64_t>(WallNow() * 1000);
  if (opt.term != 0) {
    term = opt.term;
  } else {
    ARYL_ASSIGN_OR_RETURN(auto stored, store->GetMeta("term"));
    std::uint64_t last = 0;
    if (stored) {
      auto [end, ec] = std::from_chars(stored->data(), stored->data() + stored->size(), last);
      if (stored->empty() || ec != std::errc() || end != stored->data() + stored->size())
        return Status::Corruption("table meta, key 'term' = '" + *stored + "' is not a whole number");
    }
    term = last + 1;
    ARYL_RETURN_IF_ERROR(store->SetMeta("term", std::to_string(term)));
  }
  if (!opt.throughput_dir.empty()) {
    ARYL_ASSIGN_OR_RETURN(auto cat, s::ThroughputCatalog::LoadCsvDir(opt.throughput_dir));
    measured = std::make_shared<s::ThroughputCatalog>(std::move(cat));
  }
  if (!opt.queues_file.empty()) {
    ARYL_ASSIGN_OR_RETURN(queues, ReadQueues());
    spdlog::info("queues {}: {} queues", opt.queues_file, queues->queues.size());
  }
  DeclareMetrics();
  ARYL_RETURN_IF_ERROR(StartDemandSource());
  const auto load_start = std::chrono::steady_clock::now();
  ARYL_RETURN_IF_ERROR(LoadState());
  const auto loaded = std::chrono::steady_clock::now();
  ARYL_RETURN_IF_ERROR(RebuildCore(std::nullopt));
  const auto rebuilt = std::chrono::steady_clock::now();
  // Reclaims under way when the last scheduler stopped (reclaim_record.h):
  // those of servers that still hold workers. O(nodes) reads, once.
  for (const auto& [id, on] : registry.workers_on())
    if (!on.empty())
      if (auto pr = LoadReclaim(*store, id)) {
        spdlog::warn("reclaim of {} under way: its deadline is {:.1f} s from now", id, pr->deadline - WallNow());
        reclaims.push_back(*pr);
      }
  started_at = WallNow();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  spdlog::info("state {}: {} nodes, {} live jobs; core {} (load {:.0f} ms, core {:.0f} ms)", store->location(),
               nodes.size(), jobs.size(), core ? "rebuilt from the journal" : "waits for the first agent",
               ms(load_start, loaded), ms(loaded, rebuilt));
  return Status::Ok();
}

Status Daemon::Impl::LoadState() {
  std::map<std::string, Node> loaded_nodes;
  std::map<s::ServerId, std::string> loaded_by_server;
  ARYL_ASSIGN_OR_RETURN(auto node_rows, store->ListNodes());
  for (const auto& r : node_rows) {
    std::string where = "table nodes, node '" + r.name + "'";
    Node n;
    auto old = nodes.find(r.name);
    if (old != nodes.end()) n = old->second;  // connection state lives in memory only
    else n.host = r.name;
    n.id = r.name;
    if (!p::FromString(r.pool, &n.pool)) return Status::Corruption("state file: " + where + ": pool '" + r.pool + "'");
    if (r.gpus < 1 || r.gpus > 4096)
      return Status::Corruption("state file: " + where + ": gpus " + std::to_string(r.gpus) + " outside 1..4096");
    if (r.loan_state != "available" && r.loan_state != "held" && r.loan_state != "loaned")
      return Status::Corruption("state file: " + where + ": loan_state '" + r.loan_state + "'");
    if (loaded_by_server.count(r.server_id))
      return Status::Corruption("state file: " + where + ": server_id " + std::to_string(r.server_id) +
                                " also used by '" + loaded_by_server[r.server_id] + "'");
    n.gpu_type = r.gpu_type;
    n.slots = r.gpus;
    n.server_id = r.server_id;
    n.loan_state = r.loan_state;
    ARYL_ASSIGN_OR_RETURN(auto drained, store->GetMeta("drained/" + r.name));
    ARYL_ASSIGN_OR_RETURN(auto removed, store->GetMeta("removed/" + r.name));
    // "1": drain --now (and drains from before drains let jobs finish); "wait": drain.
    n.drained = drained && (*drained == "1" || *drained == "wait");
    n.drain_now = drained && *drained == "1";
    n.removed = removed && *removed == "1";
    loaded_by_server[n.server_id] = n.id;
    loaded_nodes[n.id] = n;
  }
  std::map<s::JobId, Job> loaded_jobs;
  ARYL_ASSIGN_OR_RETURN(auto live, store->ListJobs(true));
  for (auto& rec : live) {
    std::string where = "table jobs, job " + std::to_string(rec.id);
    Job j;
    j.last_start = rec.start_time;  // a process of its own: the first start is as good as any
    auto old = jobs.find(rec.id);
    if (old != jobs.end()) {  // what only memory knows
      j.last_start = old->second.last_start;
      j.master_port = old->second.master_port;
      j.master_host = old->second.master_host;
      j.watchers = old->second.watchers;
      j.output = old->second.output;
      j.step = old->second.step;
      j.loss = old->second.loss;
      j.rate = old->second.rate;
      j.last_resize_pause = old->second.last_resize_pause;
      j.stray_nodes = old->second.stray_nodes;
      j.last_progress_event = old->second.last_progress_event;
      j.completing_since = old->second.completing_since;
      j.lease = old->second.lease;
    }
    j.rec = rec;
    auto spec_msg = p::DecodeAs<p::SubmitJob>(rec.spec_json);
    if (!spec_msg.ok()) return Status::Corruption("state file: " + where + ": spec: " + spec_msg.status().message());
    j.spec = *spec_msg;
    try {
      json w = json::parse(rec.workers_json);
      j.generation = w.value("generation", std::int64_t{0});
      j.next_worker = w.value("next_worker", p::WorkerId{0});
      j.starts = w.value("starts", 0);
      j.failures = w.value("failures", 0);
      j.rescales = w.value("rescales", std::int64_t{0});
      j.preemptions = w.value("preemptions", std::int64_t{0});
      j.home_store = w.value("home_store", std::string("none"));
      j.runtime = w.value("runtime", false);
      // The phase as the record implies it (a restore is not a transition).
      JobPhase phase = rec.state == JobState::kRunning ? JobPhase::kRunning : JobPhase::kQueued;
      if (w.value("restarting", false)) phase = JobPhase::kRestarting;
      if (w.value("completing", false)) phase = JobPhase::kCompleting;
      j.life.Restore(phase, j.generation, w.value("completing_step", std::int64_t{0}), WallNow());
      j.restarts = w.value("restarts", 0);
      const json waits = w.value("lease_waits", json::object());
      for (const auto& [node, until] : waits.items()) j.lease.Wait(node, until.get<double>());
      for (const auto& node : w.value("lease_unconfirmed", json::array()))
        if (node.is_string() && j.lease.WaitsOn(node.get<std::string>())) j.lease.unconfirmed.insert(node.get<std::string>());
      if (w.contains("lease_node"))  // a state file of a version with one wait per job
        j.lease.Wait(w["lease_node"].get<std::string>(), w.value("restart_not_before", 0.0));
      if (w.contains("first_end")) j.first_end = WorkerEndFromJson(w["first_end"]);
      if (w.contains("failure")) j.failure = WorkerEndFromJson(w["failure"]);
      for (const auto& x : w.value("workers", json::array())) {
        Worker wk;
        wk.id = x.at("id").get<p::WorkerId>();
        wk.agent = x.at("agent").get<std::string>();
        wk.rank = x.at("rank").get<int>();
        wk.slot = x.at("slot").get<int>();
        wk.generation = x.at("generation").get<std::int64_t>();
        wk.joined = wk.generation;
        wk.leaving = x.at("leaving").get<bool>();
        // An unconfirmed start stays unconfirmed (memory only). At a reload, a
        // worker that memory no longer held was given up (gone, its end not
        // yet durable): unconfirmed again, so that the agent must list it or
        // it is given up anew (ConfirmStarts). Read as confirmed, the job
        // waited for it for ever (aryl-simtest --daemon --replay 17).
        const Worker* ow = nullptr;
        if (old != jobs.end())
          if (auto it = old->second.workers.find(wk.id); it != old->second.workers.end()) ow = &it->second;
        if (ow) {
          wk.start_watch = ow->start_watch;
          wk.start_floor = ow->start_floor;
        } else if (started_at > 0) {
          // It may have ended, its exit on the way again: start_confirm.h, rule 0.
          wk.start_watch = registry.watch_now();
          wk.start_floor = kFloorByTime;
        }
        if (wk.id < 0 || wk.id >= j.next_worker || wk.rank < 0 || wk.slot < 0 || !loaded_nodes.count(wk.agent))
          return Status::Corruption("state file: " + where + ": workers_json: worker " + x.dump() +
                                    " (bad id, rank, slot or unknown node)");
        j.workers[wk.id] = wk;
      }
    } catch (const std::exception& e) {
      return Status::Corruption("state file: " + where + ": workers_json '" + rec.workers_json.substr(0, 200) +
                                "': " + e.what());
    }
    loaded_jobs[rec.id] = std::move(j);
  }
  registry.Replace(std::move(loaded_nodes), std::move(loaded_by_server));
  table.Replace(std::move(loaded_jobs));  // owners and the worker index rebuilt
  IndexWaits();
  return Status::Ok();
}

Status Daemon::Impl::Reload() {
  pending_snapshot.reset();  // taken from the memory being thrown away
  ARYL_RETURN_IF_ERROR(LoadState());
  core.reset();
  return RebuildCore(std::nullopt);
}

void Daemon::Impl::DeclareMetrics() {
  // Every live state's series exists from the start, at 0. Ended jobs are
  // not live: they are counted by aryl_jobs_finished_total, by their end.
  std::vector<std::string> states, ends;
  for (int st = 0; st <= static_cast<int>(p::JobState::kCancelled); ++st) {
    auto state = static_cast<p::JobState>(st);
    bool ended = state == p::JobState::kCompleted || state == p::JobState::kFailed || state == p::JobState::kCancelled;
    (ended ? ends : states).push_back("state=\"" + std::string(p::ToString(state)) + "\"");
  }
  metrics.DeclareGauge("aryl_jobs", "Live jobs by state (ended ones: aryl_jobs_finished_total)", states);
  metrics.DeclareGauge("aryl_gpus", "GPUs (slots) by pool and use",
                       {"pool=\"training\",use=\"used\"", "pool=\"training\",use=\"free\"",
                        "pool=\"inference\",use=\"used\"", "pool=\"inference\",use=\"free\""});
  metrics.DeclareGauge("aryl_loaned_servers", "Inference servers loaned to training");
  metrics.DeclareGauge("aryl_nodes_connected", "Agents connected");
  metrics.DeclareCounter("aryl_rescales_total", "Rescales executed");
  metrics.DeclareCounter("aryl_log_disk_full_total", "Times an agent's log directory filled (workers' output is cut)");
  metrics.DeclareCounter("aryl_checkpoint_failures_total",
                         "Checkpoints that failed (a full disk, an I/O error); the job keeps its last good one");
  metrics.DeclareCounter("aryl_preemptions_total", "Preemptions executed");
  metrics.DeclareCounter("aryl_speed_fits_total", "Refits of a job's speed model from its measured step times");
  metrics.DeclareHistogram("aryl_speed_fit_seconds", "One speed-model fit, on the fitting thread",
                           {0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05});
  metrics.DeclareCounter("aryl_jobs_submitted_total", "Jobs submitted");
  metrics.DeclareCounter("aryl_jobs_finished_total", "Jobs that ended, by how (completed, failed, cancelled)", ends);
  metrics.DeclareCounter("aryl_reclaims_total", "Servers reclaimed by inference");
  metrics.DeclareCounter("aryl_reclaims_late_total",
                         "Reclaimed servers emptied (serving again, with a serving side) after their deadline");
  metrics.DeclareCounter("aryl_serving_failures_total", "Serving-side steps that failed, by step (start, ready, drain, stop, serve)",
                         {"step=\"start\"", "step=\"ready\"", "step=\"drain\"", "step=\"stop\"", "step=\"serve\""});
  metrics.DeclareHistogram("aryl_serving_warmup_seconds", "A serving side's start to ready, on each return",
                           {1, 2, 5, 10, 20, 30, 60, 120, 300, 600});
  metrics.DeclareCounter("aryl_bad_requests_total", "Requests refused as invalid, undecodable frames included");
  metrics.DeclareCounter("aryl_state_write_failures_total", "State-file transactions that failed and were rolled back");
  metrics.DeclareCounter("aryl_refused_requests_total", "Requests refused by authorization, by message type");
  metrics.DeclareHistogram("aryl_reclaim_latency_seconds", "Time from a reclaim to its server being empty",
                           {0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300});
  metrics.DeclareHistogram("aryl_resize_pause_seconds", "Training pause of one resize, as the runtime measured it",
                           {0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10});
  metrics.DeclareHistogram("aryl_reclaim_slack_seconds",
                           "Deadline minus the time a reclaimed server was empty (negative: late)",
                           {-30, -10, -5, -1, 0, 1, 2, 5, 10, 30, 60, 120});
  metrics.DeclareCounter("aryl_demand_queries_total", "Queries of the Prometheus inference-demand source");
  metrics.DeclareCounter("aryl_demand_query_errors_total", "Failed queries of the Prometheus inference-demand source");
  metrics.DeclareGauge("aryl_demand_load", "Latest load the Prometheus inference-demand source answered");
  metrics.DeclareGauge("aryl_demand_required_servers", "Inference servers the demand source requires now");
  metrics.DeclareCounter("aryl_demand_offers_total", "Inference servers offered to training by the demand source");
  metrics.DeclareCounter("aryl_demand_reclaims_total", "Inference servers reclaimed by the demand source");
  std::vector<std::string> node_states;
  for (int st = 0; st <= static_cast<int>(p::NodeState::kDrained); ++st)
    node_states.emplace_back(p::ToString(static_cast<p::NodeState>(st)));
  cluster_series = std::make_unique<ClusterSeries>(metrics, node_states);
  if (leadership) {
    metrics.DeclareGauge("aryl_leader", "1 while this scheduler leads and may decide; 0 frozen (etcd unreachable)");
    metrics.DeclareGauge("aryl_leader_term", "The leader's term: the etcd leader key's create revision");
    metrics.DeclareCounter("aryl_leader_changes_total",
                           "Leader changes this scheduler has seen (as a standby, or by winning)");
    metrics.DeclareGauge("aryl_etcd_round_trip_seconds", "Round trip of the last successful etcd request");
  }
  metrics.DeclareHistogram("aryl_round_seconds", "Scheduling round time (core Handle + plan execution)",
                           {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5});
}

// Core time moves in steps of one tick (kCoreTimeStep): the events of one
// tick share a time, so the core advances its running jobs once per tick, not
// once per event.
double Daemon::Impl::CoreNow() {
  double t = std::floor((WallNow() - epoch) / kCoreTimeStep) * kCoreTimeStep;
  return std::max(t, last_core_time);
}

std::shared_ptr<const s::ThroughputCatalog> Daemon::Impl::Catalog() {
  auto cat = std::make_shared<s::ThroughputCatalog>(measured ? *measured : s::ThroughputCatalog());
  std::set<std::string> types;
  for (const auto& [id, n] : nodes) types.insert(n.gpu_type);
  for (const auto& t : types) {
    s::ThroughputCatalog::Table table{{1, 4096}, {1.0, 4096.0}};
    Status st = cat->AddTable(kLinearModel, t, table);
    if (!st.ok()) spdlog::warn("throughput table for {}: {}", t, st.ToString());
  }
  return cat;
}

// --- Daemon ----------------------------------------------------------------------

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() { Stop(); }

Result<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) { return Start(std::move(options), nullptr, nullptr); }

namespace {

// The binary's port: the ZeroMQ server. Its thread may tick before Start()
// has stored the server, so a port without one yet is an empty network.
class ServerPort final : public MessagePort {
 public:
  void Attach(p::Server* server) { server_.store(server); }
  const std::string& endpoint() const override {
    static const std::string kNone;
    p::Server* s = server_.load();
    return s ? s->endpoint() : kNone;
  }
  Status Reply(const p::ReplyTo& to, const p::Message& msg) override {
    p::Server* s = server_.load();
    return s ? s->Reply(to, msg) : Status::Unavailable("the scheduler's socket is not open yet");
  }
  Status Push(std::string_view identity, const p::Message& msg) override {
    p::Server* s = server_.load();
    return s ? s->Push(identity, msg) : Status::Unavailable("the scheduler's socket is not open yet");
  }
  bool drained() const override {
    p::Server* s = server_.load();
    return s && s->drained();
  }
  std::uint64_t rejected() const override {
    p::Server* s = server_.load();
    return s ? s->stats().rejected : 0;
  }

 private:
  std::atomic<p::Server*> server_{nullptr};
};

// What both ways of starting share: the options checked, the state loaded.
Result<std::unique_ptr<Daemon::Impl>> NewImpl(const DaemonOptions& options, std::unique_ptr<StateStore> store,
                                              std::shared_ptr<Leadership> leadership, MessagePort* port) {
  auto impl = std::make_unique<Daemon::Impl>();
  impl->opt = options;
  if (options.clock) impl->clock = options.clock;
  impl->store = std::move(store);
  impl->leadership = std::move(leadership);
  impl->port = port;
  auto ports = ParsePortRange(options.port_range);
  if (!ports.ok()) return Status::InvalidArgument("--port-range '" + options.port_range + "': " + ports.status().message());
  impl->ports = *ports;
  if (auto eph = EphemeralPortRange(); eph && eph->Overlaps(impl->ports))
    spdlog::warn("--port-range {} overlaps this host's ephemeral ports {} (net.ipv4.ip_local_port_range): "
                 "a job's MASTER_PORT may be taken by an outgoing connection",
                 impl->ports.ToString(), eph->ToString());
  ARYL_RETURN_IF_ERROR(impl->Init());
  return impl;
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options, std::unique_ptr<StateStore> store,
                                              std::shared_ptr<Leadership> leadership) {
  auto server_port = std::make_unique<ServerPort>();
  ServerPort* sp = server_port.get();
  ARYL_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, NewImpl(options, std::move(store), std::move(leadership), sp));
  impl->owned_port = std::move(server_port);
  p::Server::Options so;
  so.endpoint = options.endpoint;
  ARYL_RETURN_IF_ERROR(impl->SetUpCurve(so));
  so.tick = std::chrono::milliseconds(50);
  Impl* raw = impl.get();
  so.on_tick = [raw] { raw->Tick(); };
  ARYL_ASSIGN_OR_RETURN(impl->server,
                        p::Server::Start(so, [raw](const p::ReplyTo& from, p::Message msg) {
                          return raw->Handle(from, std::move(msg));
                        }));
  sp->Attach(impl->server.get());
  if (impl->peer_credentials) ARYL_RETURN_IF_ERROR(OpenIpcSocket(impl->server->endpoint()));
  if (options.http_port >= 0) {
    ARYL_ASSIGN_OR_RETURN(impl->http, HttpServer::Start(options.http_address, options.http_port,
                                                        [raw](const std::string& path) -> HttpResponse {
                                                          if (path == "/metrics")
                                                            return {200, "text/plain; version=0.0.4", raw->metrics.Render()};
                                                          if (path == "/healthz") return {200, "text/plain", "ok\n"};
                                                          if (path == "/readyz")
                                                            return raw->ready ? HttpResponse{200, "text/plain", "ready\n"}
                                                                              : HttpResponse{503, "text/plain", "starting\n"};
                                                          if (path == "/status" || path == "/") {
                                                            std::lock_guard lock(raw->snapshot_mu);
                                                            return {200, "application/json", raw->status_snapshot};
                                                          }
                                                          return {404, "text/plain", "not found: try /metrics, /status, /healthz or /readyz\n"};
                                                        }));
  }
  spdlog::info("aryl-scheduler listening on {}{}{}", impl->server->endpoint(),
               impl->http ? ", http on " + options.http_address + ":" + std::to_string(impl->http->port()) : "",
               so.curve ? " (CURVE)" : "");
  impl->ready = true;
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

Result<std::unique_ptr<Daemon>> Daemon::StartDriven(DaemonOptions options, MessagePort& port) {
  return StartDriven(std::move(options), port, nullptr);
}

Result<std::unique_ptr<Daemon>> Daemon::StartDriven(DaemonOptions options, MessagePort& port,
                                                    std::unique_ptr<StateStore> store) {
  if (options.http_port >= 0) return Status::InvalidArgument("a driven daemon has no HTTP endpoint (http_port must be -1)");
  if (!options.curve_secret_key.empty()) return Status::InvalidArgument("a driven daemon has no CURVE socket");
  ARYL_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, NewImpl(options, std::move(store), nullptr, &port));
  impl->ready = true;
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

std::optional<protocol::Message> Daemon::Deliver(const protocol::ReplyTo& from, protocol::Message msg) {
  return impl_->Handle(from, std::move(msg));
}

void Daemon::Tick() { impl_->Tick(); }

const std::string& Daemon::endpoint() const { return impl_->port->endpoint(); }
int Daemon::http_port() const { return impl_->http ? impl_->http->port() : -1; }
const std::string& Daemon::public_key() const { return impl_->public_key; }

void Daemon::Run(const std::atomic<bool>& stop) {
  while (!stop && impl_->server && !(impl_->leadership && impl_->leadership->Deposed()))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

void Daemon::Stop() {
  if (!impl_) return;
  if (impl_->http) impl_->http->Stop();
  if (impl_->server) {
    impl_->server->Close();
    impl_->server->Join();
  }
  if (impl_->fitter) impl_->fitter->Stop();  // after the server: no tick submits or polls
}

}  // namespace aryl::daemon
