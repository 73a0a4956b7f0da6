#include "aryl/daemon/daemon.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "aryl/daemon/http_server.h"
#include "aryl/daemon/metrics.h"
#include "aryl/daemon/state_store.h"
#include "aryl/protocol/messages.h"
#include "aryl/protocol/security.h"
#include "aryl/sched/scheduler.h"
#include "aryl/sched/state.h"
#include "aryl/sched/throughput.h"
#include "aryl/sim/demand.h"

namespace aryl::daemon {

namespace p = aryl::protocol;
namespace s = aryl::sched;
using json = nlohmann::json;

namespace {

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr const char* kLinearModel = "linear";
constexpr double kUnknownWork = 1e6;  // steps assumed for a job that does not say

// --- core events <-> JSON (the replay journal) ------------------------------------

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

std::string PlacementString(const std::map<std::string, int>& placement) {
  std::string out;
  for (const auto& [node, n] : placement) out += (out.empty() ? "" : ",") + node + ":" + std::to_string(n);
  return out.empty() ? "-" : out;
}

}  // namespace

// --- Daemon::Impl ------------------------------------------------------------------

class Daemon::Impl {
 public:
  struct Node {
    std::string id;
    std::string host;
    p::Pool pool = p::Pool::kTraining;
    std::string gpu_type;
    int slots = 0;
    s::ServerId server_id = 0;
    bool connected = false;
    double last_heartbeat = 0;  // wall
    std::string store_endpoint;
    std::string loan_state = "available";  // available | held | loaned
  };
  struct Worker {
    p::WorkerId id = 0;
    std::string agent;
    int rank = 0;
    int slot = 0;
    std::int64_t generation = 0;
    bool leaving = false;  // asked to leave (resize, preempt, cancel, reclaim)
  };
  struct Job {
    JobRecord rec;
    p::SubmitJob spec;
    std::map<p::WorkerId, Worker> workers;  // live workers
    std::int64_t generation = 0;
    p::WorkerId next_worker = 0;
    int starts = 0;
    int failures = 0;
    std::string home_store = "none";  // rendezvous store of this start ("host:port"), "none" without one
    bool completing = false;  // a worker exited 0 on its own: the job is done
    double completing_since = 0;
    std::int64_t step = 0;
    double loss = 0, rate = 0;
    std::int64_t rescales = 0;
    double last_progress_event = 0;
    std::vector<std::string> watchers;  // client identities
    std::deque<std::string> output;
  };
  struct PendingReclaim {
    std::string node;
    double start = 0;     // wall
    double deadline = 0;  // wall
    bool forced = false;
  };

  DaemonOptions opt;
  std::unique_ptr<StateStore> store;
  std::unique_ptr<p::Server> server;
  std::unique_ptr<HttpServer> http;
  Metrics metrics;
  std::string public_key;

  double epoch = 0;              // wall time of core time 0
  double last_core_time = 0;
  std::unique_ptr<s::Scheduler> core;
  std::shared_ptr<s::ThroughputCatalog> measured;  // optional tables
  std::map<std::string, Node> nodes;
  std::map<s::ServerId, std::string> node_by_server;
  std::map<s::JobId, Job> jobs;  // live jobs (queued or running)
  std::vector<PendingReclaim> reclaims;
  double started_at = 0;
  double last_tick = 0;
  double last_demand_check = 0;
  std::optional<sim::DemandCurve> demand;
  int demand_servers = -1;
  std::uint64_t scheduler_epoch = 0;

  std::mutex snapshot_mu;
  std::string status_snapshot = "{}";

  // --- setup ---------------------------------------------------------------------

  Status Init() {
    ARYL_ASSIGN_OR_RETURN(store, StateStore::Open(opt.state_path));
    ARYL_ASSIGN_OR_RETURN(auto ep, store->GetMeta("epoch"));
    if (ep) {
      epoch = std::stod(*ep);
    } else {
      epoch = WallNow();
      ARYL_RETURN_IF_ERROR(store->SetMeta("epoch", std::to_string(epoch)));
    }
    scheduler_epoch = static_cast<std::uint64_t>(WallNow() * 1000);
    if (!opt.throughput_dir.empty()) {
      ARYL_ASSIGN_OR_RETURN(auto cat, s::ThroughputCatalog::LoadCsvDir(opt.throughput_dir));
      measured = std::make_shared<s::ThroughputCatalog>(std::move(cat));
    }
    DeclareMetrics();
    // Nodes and live jobs from the state file.
    ARYL_ASSIGN_OR_RETURN(auto node_rows, store->ListNodes());
    for (const auto& r : node_rows) {
      Node n;
      n.id = r.name;
      n.host = r.name;
      if (!p::FromString(r.pool, &n.pool)) return Status::Corruption("node " + r.name + ": bad pool " + r.pool);
      n.gpu_type = r.gpu_type;
      n.slots = r.gpus;
      n.server_id = r.server_id;
      n.loan_state = r.loan_state;
      node_by_server[n.server_id] = n.id;
      nodes[n.id] = n;
    }
    ARYL_ASSIGN_OR_RETURN(auto live, store->ListJobs(true));
    for (auto& rec : live) {
      Job j;
      j.rec = rec;
      auto spec_msg = p::DecodeAs<p::SubmitJob>(rec.spec_json);
      if (!spec_msg.ok()) return Status::Corruption("job " + std::to_string(rec.id) + ": " + spec_msg.status().message());
      j.spec = *spec_msg;
      try {
        json w = json::parse(rec.workers_json);
        j.generation = w.value("generation", std::int64_t{0});
        j.next_worker = w.value("next_worker", p::WorkerId{0});
        j.starts = w.value("starts", 0);
        j.failures = w.value("failures", 0);
        j.rescales = w.value("rescales", std::int64_t{0});
        j.home_store = w.value("home_store", std::string("none"));
        for (const auto& x : w.value("workers", json::array())) {
          Worker wk;
          wk.id = x.at("id").get<p::WorkerId>();
          wk.agent = x.at("agent").get<std::string>();
          wk.rank = x.at("rank").get<int>();
          wk.slot = x.at("slot").get<int>();
          wk.generation = x.at("generation").get<std::int64_t>();
          wk.leaving = x.at("leaving").get<bool>();
          j.workers[wk.id] = wk;
        }
      } catch (const std::exception& e) {
        return Status::Corruption("job " + std::to_string(rec.id) + " workers: " + e.what());
      }
      jobs[rec.id] = std::move(j);
    }
    ARYL_RETURN_IF_ERROR(RebuildCore(std::nullopt));
    started_at = WallNow();
    spdlog::info("state {}: {} nodes, {} live jobs; core {}", opt.state_path, nodes.size(), jobs.size(),
                 core ? "rebuilt from the journal" : "waits for the first agent");
    return Status::Ok();
  }

  void DeclareMetrics() {
    metrics.DeclareGauge("aryl_jobs", "Jobs by state");
    metrics.DeclareGauge("aryl_gpus", "GPUs (slots) by pool and use");
    metrics.DeclareGauge("aryl_loaned_servers", "Inference servers loaned to training");
    metrics.DeclareGauge("aryl_nodes_connected", "Agents connected");
    metrics.DeclareCounter("aryl_rescales_total", "Rescales executed");
    metrics.DeclareCounter("aryl_preemptions_total", "Preemptions executed");
    metrics.DeclareCounter("aryl_jobs_submitted_total", "Jobs submitted");
    metrics.DeclareCounter("aryl_jobs_finished_total", "Jobs that reached a terminal state, by state");
    metrics.DeclareCounter("aryl_reclaims_total", "Servers reclaimed by inference");
    metrics.DeclareCounter("aryl_reclaims_late_total", "Reclaimed servers emptied after their deadline");
    metrics.DeclareCounter("aryl_bad_requests_total", "Requests refused as invalid");
    metrics.DeclareHistogram("aryl_reclaim_latency_seconds", "Time from a reclaim to its server being empty",
                             {0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300});
    metrics.DeclareHistogram("aryl_resize_pause_seconds", "Training pause of one resize, as the runtime measured it",
                             {0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10});
    metrics.DeclareHistogram("aryl_round_seconds", "Scheduling round time (core Handle + plan execution)",
                             {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5});
  }

  double CoreNow() {
    double t = std::max(WallNow() - epoch, last_core_time);
    return t;
  }

  std::shared_ptr<const s::ThroughputCatalog> Catalog() {
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

  // Builds the core from every known node and replays the journal. When
  // `recovering` names a server, it is journaled as recovering now.
  Status RebuildCore(std::optional<s::ServerId> recovering) {
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
    for (const auto& [t, body] : journal) {
      ARYL_ASSIGN_OR_RETURN(auto ev, EventFromJson(body));
      auto r = fresh->Handle({t, ev});
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

  // --- the one path from an event to executed actions ---------------------------

  Status Feed(s::EventBody body, const std::string& why) {
    if (!core) return Status::FailedPrecondition("no agent has registered yet");
    auto t0 = std::chrono::steady_clock::now();
    double t = CoreNow();
    std::string text = EventToJson(body);
    // Validate before journaling: a bad event must not poison the replay.
    auto plan = core->Handle({t, body});
    if (!plan.ok()) return plan.status();
    last_core_time = t;
    Status st = store->Batch([&]() -> Status {
      ARYL_RETURN_IF_ERROR(store->AppendCoreEvent(t, text));
      for (const auto& a : plan->actions) ARYL_RETURN_IF_ERROR(Execute(a));
      return Status::Ok();
    });
    if (!st.ok()) {
      // The core moved but the journal did not: rebuild the core from disk so the two agree.
      spdlog::error("persisting {} failed: {}; rebuilding the core", why, st.ToString());
      (void)RebuildCore(std::nullopt);
      return st;
    }
    metrics.Observe("aryl_round_seconds",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return Status::Ok();
  }

  std::map<std::string, int> ToNodePlacement(const s::Placement& placement) {
    std::map<std::string, int> out;
    for (const auto& [sid, n] : placement) {
      auto it = node_by_server.find(sid);
      if (it != node_by_server.end() && n > 0) out[it->second] = n;
    }
    return out;
  }

  Status Execute(const s::Action& a) {
    switch (a.type) {
      case s::ActionType::kStart:
      case s::ActionType::kResize: {
        auto it = jobs.find(a.job);
        if (it == jobs.end()) return Status::Ok();
        // A job whose workers are finishing keeps them until they are gone.
        if (it->second.completing) return Status::Ok();
        if (a.type == s::ActionType::kResize) {
          it->second.rescales++;
          metrics.Inc("aryl_rescales_total");
        }
        return Converge(it->second, ToNodePlacement(a.placement), a.reason);
      }
      case s::ActionType::kPreempt: {
        auto it = jobs.find(a.job);
        if (it == jobs.end()) return Status::Ok();
        metrics.Inc("aryl_preemptions_total");
        Job& j = it->second;
        StopJobWorkers(j, /*checkpoint_first=*/true, "preempted: " + a.reason);
        j.rec.state = JobState::kQueued;
        j.rec.placement.clear();
        j.rec.message = "preempted: " + a.reason;
        ARYL_RETURN_IF_ERROR(store->AppendEvent(WallNow(), j.rec.id, "preempt", a.reason));
        Notify(j, p::JobState::kPreempted, j.rec.message);
        return SaveJob(j);
      }
      case s::ActionType::kReturnServer: {
        auto nit = node_by_server.find(a.server);
        if (nit == node_by_server.end()) return Status::Ok();
        Node& n = nodes[nit->second];
        n.loan_state = "held";
        ARYL_RETURN_IF_ERROR(SaveNode(n));
        metrics.Inc("aryl_reclaims_total");
        ARYL_RETURN_IF_ERROR(store->AppendEvent(WallNow(), 0, "return", n.id + ": " + a.reason));
        PendingReclaim pr{n.id, WallNow(), WallNow() + current_reclaim_deadline};
        reclaims.push_back(pr);
        return Status::Ok();
      }
    }
    return Status::Ok();
  }
  double current_reclaim_deadline = 120;

  Status SaveNode(const Node& n) {
    return store->UpsertNode({n.id, std::string(p::ToString(n.pool)), n.gpu_type, n.slots, n.loan_state, n.server_id});
  }

  Status SaveJob(Job& j) {
    json w;
    w["generation"] = j.generation;
    w["next_worker"] = j.next_worker;
    w["starts"] = j.starts;
    w["failures"] = j.failures;
    w["rescales"] = j.rescales;
    w["home_store"] = j.home_store;
    json arr = json::array();
    j.rec.placement.clear();
    for (const auto& [id, wk] : j.workers) {
      arr.push_back({{"id", wk.id}, {"agent", wk.agent}, {"rank", wk.rank}, {"slot", wk.slot},
                     {"generation", wk.generation}, {"leaving", wk.leaving}});
      if (!wk.leaving) j.rec.placement[wk.agent]++;
    }
    w["workers"] = arr;
    j.rec.workers_json = w.dump();
    j.rec.generation = static_cast<std::uint64_t>(j.generation);
    return store->UpdateJob(j.rec);
  }

  // Slots not held by a worker that stays. A leaver's slot counts as free: the
  // core gave it away with the plan, and the leaver goes at its next step
  // boundary (or is stopped), so the joiner shares it only briefly.
  std::set<int> FreeSlots(const Node& n) {
    std::set<int> used;
    for (const auto& [jid, j] : jobs)
      for (const auto& [wid, w] : j.workers)
        if (w.agent == n.id && !w.leaving) used.insert(w.slot);
    std::set<int> free;
    for (int i = 0; i < n.slots; ++i)
      if (!used.count(i)) free.insert(i);
    return free;
  }

  // Makes the job's live workers match `desired` (node -> count): starts joiners
  // where there are too few, marks leavers where there are too many, and
  // announces the new generation to every agent involved.
  Status Converge(Job& j, const std::map<std::string, int> desired, const std::string& reason) {
    std::map<std::string, std::vector<p::WorkerId>> actual;
    for (const auto& [id, w] : j.workers)
      if (!w.leaving) actual[w.agent].push_back(id);
    std::map<std::string, int> have;
    for (const auto& [node, ids] : actual) have[node] = static_cast<int>(ids.size());
    if (have == desired && !desired.empty()) return Status::Ok();
    bool fresh = have.empty();
    std::vector<p::WorkerId> leavers;
    std::map<std::string, std::vector<p::WorkerPlacement>> joiners;
    for (auto& [node, ids] : actual) {
      int want = desired.count(node) ? desired.at(node) : 0;
      // Leave the highest ranks first.
      std::sort(ids.begin(), ids.end(), [&](auto a, auto b) { return j.workers[a].rank < j.workers[b].rank; });
      while (static_cast<int>(ids.size()) > want) {
        leavers.push_back(ids.back());
        j.workers[ids.back()].leaving = true;
        ids.pop_back();
      }
    }
    std::set<std::string> existing_agents;
    for (const auto& [id, w] : j.workers) existing_agents.insert(w.agent);
    // Training servers first: their workers get the lowest ranks, so rank 0 (and
    // the job's rendezvous store) stays off loaned servers that may be reclaimed.
    std::vector<std::pair<std::string, int>> order(desired.begin(), desired.end());
    std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
      auto rank_of = [&](const std::string& n) {
        auto it = nodes.find(n);
        return it == nodes.end() || it->second.pool != p::Pool::kTraining ? 1 : 0;
      };
      return rank_of(a.first) < rank_of(b.first);
    });
    for (const auto& [node, want] : order) {
      int got = have.count(node) ? have.at(node) : 0;
      if (got >= want) continue;
      auto nit = nodes.find(node);
      if (nit == nodes.end()) continue;
      auto free = FreeSlots(nit->second);
      if (static_cast<int>(free.size()) < want - got) {
        spdlog::error("job {}: {} needs {} more slots but has {} free; the scheduler's view and the agent disagree",
                      j.rec.id, node, want - got, free.size());
        pending_converge.insert(j.rec.id);
      }
      for (int k = got; k < want && !free.empty(); ++k) {
        Worker w;
        w.id = j.next_worker++;
        w.agent = node;
        w.slot = *free.begin();
        free.erase(free.begin());
        joiners[node].push_back({w.id, 0, w.slot});
        j.workers[w.id] = w;
      }
    }
    j.generation++;
    // Ranks: stayers keep their order, joiners follow.
    std::vector<p::WorkerId> members;
    std::vector<std::pair<int, p::WorkerId>> stayers;
    for (const auto& [id, w] : j.workers)
      if (!w.leaving && w.generation != 0) stayers.push_back({w.rank, id});
    std::sort(stayers.begin(), stayers.end());
    for (auto& [r, id] : stayers) members.push_back(id);
    for (const auto& [node, want] : order)
      if (joiners.count(node))
        for (auto& wp : joiners[node]) members.push_back(wp.worker);
    for (size_t r = 0; r < members.size(); ++r) {
      auto& w = j.workers[members[r]];
      w.rank = static_cast<int>(r);
      w.generation = j.generation;
    }
    for (auto& [node, list] : joiners)
      for (auto& wp : list) wp.rank = j.workers[wp.worker].rank;

    if (fresh) {
      j.starts++;
      j.completing = false;
      j.rec.start_time = WallNow();
    }
    std::string master_node = members.empty() ? "" : j.workers[members[0]].agent;
    std::string master_host = nodes.count(master_node) ? nodes[master_node].host : "127.0.0.1";
    int master_port = 20000 + static_cast<int>((j.rec.id * 131 + j.starts * 7) % 20000);
    // Every agent hosting stayers or leavers learns the new generation; the
    // agent relays it to its workers and makes leavers go at the switch.
    std::map<std::string, std::vector<p::WorkerId>> leaving_by_agent;
    for (auto id : leavers) leaving_by_agent[j.workers[id].agent].push_back(id);
    if (fresh) {
      // The agent of rank 0 hosts this start's rendezvous (when it has a store).
      j.home_store = nodes.count(master_node) && !nodes[master_node].store_endpoint.empty()
                         ? nodes[master_node].store_endpoint
                         : "none";
    }
    std::string store_ep = j.home_store;
    std::string store_key = std::to_string(j.rec.id) + "-" + std::to_string(j.starts);
    if (!fresh && store_ep != "none") {
      for (const auto& [id, n] : nodes)
        if (n.store_endpoint == store_ep && n.connected) existing_agents.insert(id);
    }
    if (!fresh) {
      for (const auto& agent : existing_agents) {
        p::NewGeneration ng;
        ng.job = j.rec.id;
        ng.generation = j.generation;
        ng.members = members;
        ng.leaving = leaving_by_agent.count(agent) ? leaving_by_agent[agent] : std::vector<p::WorkerId>{};
        ng.store_endpoint = store_ep;
        ng.store_prefix = store_key;
        if (members.empty()) {
          p::StopWorkers sw;
          sw.job = j.rec.id;
          sw.workers = ng.leaving;
          sw.grace_seconds = opt.stop_grace;
          sw.reason = reason;
          Push(agent, sw);
        } else {
          Push(agent, ng);
        }
      }
    }
    for (const auto& [agent, list] : joiners) {
      p::StartWorkers sw;
      sw.job = j.rec.id;
      sw.generation = j.generation;
      sw.workers = list;
      sw.members = members;
      sw.argv = j.spec.argv;
      sw.env = j.spec.env;
      sw.env["ARYL_JOB_ID"] = store_key;
      sw.env["ARYL_MIN_WORKERS"] = std::to_string(j.spec.min_workers.value_or(j.spec.workers.value_or(1)));
      sw.env["ARYL_MAX_WORKERS"] = std::to_string(j.spec.max_workers.value_or(j.spec.workers.value_or(1)));
      sw.env["ARYL_MASTER_ADDR"] = master_host;
      sw.env["ARYL_MASTER_PORT"] = std::to_string(master_port);
      sw.cwd = j.spec.cwd;
      sw.checkpoint_dir = j.spec.checkpoint_dir;
      sw.store_endpoint = store_ep;
      sw.store_prefix = store_key;
      Push(agent, sw);
    }
    int size = static_cast<int>(members.size());
    j.rec.state = size > 0 ? JobState::kRunning : j.rec.state;
    j.rec.message = reason;
    std::string kind = fresh ? "start" : "resize";
    std::map<std::string, int> placed;
    for (auto id : members) placed[j.workers[id].agent]++;
    ARYL_RETURN_IF_ERROR(store->AppendEvent(WallNow(), j.rec.id, kind,
                                            "generation " + std::to_string(j.generation) + " on " +
                                                PlacementString(placed) + " (" + reason + ")"));
    Notify(j, fresh ? p::JobState::kRunning : p::JobState::kResizing,
           kind + " to " + std::to_string(size) + " workers on " + PlacementString(placed) + ": " + reason);
    spdlog::info("job {} {}: generation {} on {} ({})", j.rec.id, kind, j.generation, PlacementString(placed), reason);
    return SaveJob(j);
  }

  void StopJobWorkers(Job& j, bool checkpoint_first, const std::string& reason) {
    std::map<std::string, std::vector<p::WorkerId>> by_agent;
    for (auto& [id, w] : j.workers) {
      w.leaving = true;
      by_agent[w.agent].push_back(id);
    }
    for (const auto& [agent, ids] : by_agent) {
      p::StopWorkers sw;
      sw.job = j.rec.id;
      sw.workers = ids;
      sw.grace_seconds = opt.stop_grace;
      sw.checkpoint_first = checkpoint_first;
      sw.reason = reason;
      Push(agent, sw);
    }
  }

  void Push(const std::string& agent, const p::Message& msg) {
    auto n = nodes.find(agent);
    if (n == nodes.end() || !n->second.connected) return;  // reconciled when it comes back
    Status st = server->Push(agent, msg);
    if (!st.ok()) spdlog::warn("push {} to {}: {}", p::TypeName(msg), agent, st.ToString());
  }

  void Notify(Job& j, p::JobState state, const std::string& message, bool final = false,
              std::vector<std::string> output = {}) {
    if (j.watchers.empty()) return;
    p::JobEvent ev;
    ev.job = j.rec.id;
    ev.time = WallNow();
    ev.state = state;
    int size = 0;
    for (const auto& [id, w] : j.workers)
      if (!w.leaving) size++;
    ev.workers = size;
    ev.message = message;
    ev.output = std::move(output);
    ev.final = final;
    if (final) ev.exit_code = std::clamp(j.rec.exit_code, 0, 255);
    for (const auto& watcher : j.watchers) (void)server->Push(watcher, ev);
  }

  // --- job end ----------------------------------------------------------------------

  Status EndJob(Job& j, JobState state, int exit_code, const std::string& message) {
    j.rec.state = state;
    j.rec.exit_code = exit_code;
    j.rec.message = message;
    j.rec.end_time = WallNow();
    StopJobWorkers(j, false, message);
    j.workers.clear();
    ARYL_RETURN_IF_ERROR(store->AppendEvent(WallNow(), j.rec.id, std::string(JobStateName(state)), message));
    ARYL_RETURN_IF_ERROR(SaveJob(j));
    metrics.Inc("aryl_jobs_finished_total", "state=\"" + std::string(JobStateName(state)) + "\"");
    p::JobState ps = state == JobState::kFinished ? p::JobState::kCompleted
                     : state == JobState::kFailed ? p::JobState::kFailed
                                                  : p::JobState::kCancelled;
    Notify(j, ps, message, true);
    spdlog::info("job {} {}: {}", j.rec.id, JobStateName(state), message);
    return Status::Ok();
  }

  // --- request handlers ---------------------------------------------------------------

  std::optional<p::Message> Handle(const p::ReplyTo& from, p::Message msg) {
    try {
      return std::visit([&](auto& m) -> std::optional<p::Message> { return On(from, m); }, msg);
    } catch (const std::exception& e) {
      spdlog::error("handling {}: {}", p::TypeName(msg), e.what());
      return p::Message(p::Error::FromStatus(Status::Internal(e.what())));
    }
  }

  static p::Message Err(const Status& st) { return p::Error::FromStatus(st); }

  template <typename T>
  std::optional<p::Message> On(const p::ReplyTo&, T&) {
    metrics.Inc("aryl_bad_requests_total");
    return Err(Status::InvalidArgument(std::string("the scheduler does not accept '") + std::string(T::kType) + "'"));
  }

  std::optional<p::Message> On(const p::ReplyTo& from, p::AgentRegister& m) {
    if (from.peer.identity != m.agent_id) {
      return Err(Status::InvalidArgument("agent_register: agent_id '" + m.agent_id +
                                         "' differs from the connection's identity"));
    }
    auto it = nodes.find(m.agent_id);
    bool is_new = it == nodes.end();
    if (!is_new && (it->second.pool != m.pool || it->second.gpu_type != m.gpu_type || it->second.slots != m.slots)) {
      return Err(Status::FailedPrecondition(
          "agent " + m.agent_id + " registered before as " + std::string(p::ToString(it->second.pool)) + "/" +
          it->second.gpu_type + "/" + std::to_string(it->second.slots) + " slots; use a new agent id for a changed server"));
    }
    Node& n = nodes[m.agent_id];
    bool was_connected = n.connected;
    if (is_new) {
      n.id = m.agent_id;
      n.pool = m.pool;
      n.gpu_type = m.gpu_type;
      n.slots = static_cast<int>(m.slots);
      s::ServerId next = 0;
      for (const auto& [sid, name] : node_by_server) next = std::max(next, sid + 1);
      n.server_id = next;
      n.loan_state = m.pool == p::Pool::kInference ? "held" : "available";
      node_by_server[n.server_id] = n.id;
    }
    n.host = m.host;
    n.store_endpoint = m.store_endpoint;
    n.connected = true;
    n.last_heartbeat = WallNow();
    Status st = SaveNode(n);
    if (!st.ok()) return Err(st);
    (void)store->AppendEvent(WallNow(), 0, "register", n.id + " " + std::string(p::ToString(n.pool)) + " " +
                                                          n.gpu_type + " x" + std::to_string(n.slots));
    spdlog::info("agent {} registered ({} {} x{}, {} workers running)", n.id, p::ToString(n.pool), n.gpu_type, n.slots,
                 m.workers.size());
    Reconcile(n, m.workers);
    if (is_new) {
      st = RebuildCore(n.server_id);
    } else if (core && !was_connected) {
      const auto* info = core->state().server(n.server_id);
      if (info && info->failed) st = Feed(s::ServerRecovered{n.server_id}, "agent back");
    }
    if (!st.ok()) spdlog::error("agent {}: {}", n.id, st.ToString());
    p::AgentRegistered reply;
    reply.agent_id = n.id;
    reply.heartbeat_interval_seconds = opt.heartbeat_interval;
    reply.scheduler_epoch = scheduler_epoch;
    PublishSnapshot();
    return p::Message(reply);
  }

  // What an agent runs vs what the daemon believes it runs there.
  void Reconcile(Node& n, const std::vector<p::RunningWorker>& running) {
    std::set<std::pair<p::JobId, p::WorkerId>> reported;
    for (const auto& rw : running) {
      reported.insert({rw.job, rw.worker});
      auto jit = jobs.find(rw.job);
      bool known = jit != jobs.end() && jit->second.workers.count(rw.worker) &&
                   jit->second.workers[rw.worker].agent == n.id;
      if (!known) {
        spdlog::warn("agent {} runs worker {} of job {} that the scheduler does not expect: stopping it", n.id,
                     rw.worker, rw.job);
        p::StopWorkers sw;
        sw.job = rw.job;
        sw.workers = {rw.worker};
        sw.grace_seconds = opt.stop_grace;
        sw.reason = "not expected by the scheduler";
        (void)server->Push(n.id, sw);
      }
    }
    // Workers the daemon expected there but the agent no longer runs: they exited while we were apart.
    for (auto& [jid, j] : jobs) {
      std::vector<p::WorkerId> gone;
      for (const auto& [wid, w] : j.workers)
        if (w.agent == n.id && !reported.count({jid, wid})) gone.push_back(wid);
      for (auto wid : gone) {
        bool leaving = j.workers[wid].leaving;
        j.workers.erase(wid);
        spdlog::info("job {} worker {} on {} is gone ({})", jid, wid, n.id, leaving ? "was leaving" : "lost");
        if (!leaving) j.failures++;
      }
      if (!gone.empty()) pending_converge.insert(jid);
    }
  }
  std::set<p::JobId> pending_converge;

  std::optional<p::Message> On(const p::ReplyTo& from, p::Heartbeat& m) {
    auto it = nodes.find(m.agent_id);
    if (it == nodes.end() || !it->second.connected || from.peer.identity != m.agent_id) {
      // A scheduler that restarted or timed the agent out: ask it to register again.
      p::Error e;
      e.code = Status::Code::kFailedPrecondition;
      e.message = "unknown agent " + m.agent_id + ": register again";
      (void)server->Push(from.peer.identity, e);
      return std::nullopt;
    }
    it->second.last_heartbeat = WallNow();
    return std::nullopt;
  }

  std::optional<p::Message> On(const p::ReplyTo& from, p::WorkerExited& m) {
    auto jit = jobs.find(m.job);
    if (jit == jobs.end()) return std::nullopt;
    Job& j = jit->second;
    auto wit = j.workers.find(m.worker);
    if (wit == j.workers.end() || wit->second.agent != m.agent_id) return std::nullopt;
    bool leaving = wit->second.leaving;
    int code = m.exit_code ? static_cast<int>(*m.exit_code) : 128 + static_cast<int>(m.signal.value_or(9));
    j.workers.erase(wit);
    (void)store->AppendEvent(WallNow(), j.rec.id, "worker_exit",
                             "worker " + std::to_string(m.worker) + " on " + m.agent_id + ": " +
                                 (m.exit_code ? "exit " + std::to_string(*m.exit_code)
                                              : "signal " + std::to_string(m.signal.value_or(0))) +
                                 (leaving ? " (asked to leave)" : ""));
    if (leaving) {
      if (j.completing && j.workers.empty()) FinishJob(j, j.rec.exit_code);
      else (void)SaveJob(j);
      return std::nullopt;
    }
    if (code == 0 || j.completing) {
      if (!j.completing) {
        j.completing = true;
        j.completing_since = WallNow();
      }
      if (code != 0 && j.rec.exit_code == 0) j.rec.exit_code = code;
      if (j.workers.empty()) FinishJob(j, j.rec.exit_code);
      else (void)SaveJob(j);
      return std::nullopt;
    }
    if (m.exit_code) {
      // A worker that exits with an error code failed on purpose: so does the job.
      FailJob(j, code, "worker " + std::to_string(m.worker) + " on " + m.agent_id + " exited with " +
                           std::to_string(code));
      return std::nullopt;
    }
    // Killed by a signal (OOM killer, an operator, a crash): replace it, within limits.
    j.failures++;
    if (j.failures > opt.max_worker_failures) {
      FailJob(j, code, "worker " + std::to_string(m.worker) + " on " + m.agent_id + " was killed by signal " +
                           std::to_string(m.signal.value_or(0)) + " (" + std::to_string(j.failures) +
                           " workers lost; giving up)");
      return std::nullopt;
    }
    spdlog::warn("job {}: worker {} on {} died ({}); replacing it", j.rec.id, m.worker, m.agent_id, code);
    pending_converge.insert(j.rec.id);
    (void)SaveJob(j);
    return std::nullopt;
  }

  void FinishJob(Job& j, int exit_code) {
    s::JobId id = j.rec.id;
    Status st = Feed(s::JobFinished{id}, "job finished");
    if (!st.ok()) spdlog::error("job {} finished: {}", id, st.ToString());
    auto it = jobs.find(id);
    if (it == jobs.end()) return;
    (void)EndJob(it->second, exit_code == 0 ? JobState::kFinished : JobState::kFailed, exit_code,
                 exit_code == 0 ? "completed" : "a worker exited with " + std::to_string(exit_code));
    jobs.erase(id);
  }

  void FailJob(Job& j, int code, const std::string& why) {
    s::JobId id = j.rec.id;
    Status st = Feed(s::JobFinished{id}, "job failed");
    if (!st.ok()) spdlog::error("job {} failed: {}", id, st.ToString());
    auto it = jobs.find(id);
    if (it == jobs.end()) return;
    (void)EndJob(it->second, JobState::kFailed, code, why);
    jobs.erase(id);
  }

  std::optional<p::Message> On(const p::ReplyTo&, p::ResizeReport& m) {
    auto jit = jobs.find(m.job);
    if (jit == jobs.end()) return std::nullopt;
    (void)store->AppendEvent(WallNow(), m.job, "resize_report",
                             "generation " + std::to_string(m.generation) + " " + std::to_string(m.from_workers) +
                                 "->" + std::to_string(m.to_workers) + " pause " +
                                 std::to_string(m.phases.total) + " s" + (m.planned ? "" : " (fault)"));
    metrics.Observe("aryl_resize_pause_seconds", m.phases.total);
    return std::nullopt;
  }

  std::optional<p::Message> On(const p::ReplyTo&, p::JobProgress& m) {
    auto jit = jobs.find(m.job);
    if (jit == jobs.end()) return std::nullopt;
    Job& j = jit->second;
    j.step = m.step;
    j.loss = std::isnan(m.loss) ? 0 : m.loss;
    j.rate = m.steps_per_second;
    // The core hears about progress at most every 5 s per job (it is journaled).
    if (m.remaining_work > 0 && WallNow() - j.last_progress_event > 5) {
      j.last_progress_event = WallNow();
      (void)Feed(s::JobProgress{m.job, m.remaining_work}, "progress");
    }
    return std::nullopt;
  }

  std::optional<p::Message> On(const p::ReplyTo&, p::SubmitJob& m) {
    Status v = m.Validate();
    if (!v.ok()) {
      metrics.Inc("aryl_bad_requests_total");
      return Err(v);
    }
    if (!core) return Err(Status::Unavailable("no agent has registered yet; start an aryl-agent first"));
    if (m.client_token) {
      // A retry of a submission that already landed: answer with that job.
      auto existing = store->FindJobByToken(*m.client_token);
      if (!existing.ok()) return Err(existing.status());
      if (*existing) {
        p::SubmitReply reply;
        reply.job = **existing;
        auto it = jobs.find(reply.job);
        if (it != jobs.end()) reply.name = it->second.rec.name;
        return p::Message(reply);
      }
    }
    JobRecord rec;
    rec.client_token = m.client_token.value_or("");
    rec.name = m.name.empty() ? m.argv[0].substr(m.argv[0].find_last_of('/') + 1) : m.name;
    rec.spec_json = p::Encode(m);
    rec.submit_time = WallNow();
    // Validate against the core without keeping it: the core refuses impossible jobs.
    s::JobSpec spec;
    spec.name = rec.name;
    spec.submit_time = CoreNow();
    bool elastic = !m.workers.has_value();
    spec.kind = elastic ? s::JobKind::kElastic : s::JobKind::kInelastic;
    spec.min_workers = static_cast<int>(elastic ? *m.min_workers : *m.workers);
    spec.max_workers = static_cast<int>(elastic ? *m.max_workers : *m.workers);
    if (!m.gpu_type.empty()) spec.gpu_types = {m.gpu_type};
    spec.model = !m.model.empty() && measured && measured->HasModel(m.model) ? m.model : kLinearModel;
    spec.total_work = m.total_work > 0 ? m.total_work : kUnknownWork;
    int capacity = 0;
    for (const auto& [id, n] : nodes)
      if (m.gpu_type.empty() || n.gpu_type == m.gpu_type) capacity += n.slots;
    if (spec.min_workers > capacity) {
      metrics.Inc("aryl_bad_requests_total");
      return Err(Status::InvalidArgument("job needs at least " + std::to_string(spec.min_workers) + " workers" +
                                         (m.gpu_type.empty() ? "" : " of type " + m.gpu_type) +
                                         " but the cluster has " + std::to_string(capacity)));
    }
    std::uint64_t id = 0;
    Status st = store->Batch([&]() -> Status {
      ARYL_ASSIGN_OR_RETURN(id, store->InsertJob(rec));
      ARYL_RETURN_IF_ERROR(store->AppendEvent(WallNow(), id, "submit", rec.name + ": " + p::Encode(m)));
      return Status::Ok();
    });
    if (!st.ok()) return Err(st);
    rec.id = id;
    spec.id = id;
    Job j;
    j.rec = rec;
    j.spec = m;
    jobs[id] = std::move(j);
    metrics.Inc("aryl_jobs_submitted_total");
    st = Feed(s::JobSubmitted{spec}, "submit");
    if (!st.ok()) {
      // The core refused it: the job fails at once with the reason.
      (void)EndJob(jobs[id], JobState::kFailed, 2, "refused by the scheduler: " + st.message());
      jobs.erase(id);
      return Err(st);
    }
    p::SubmitReply reply;
    reply.job = id;
    reply.name = rec.name;
    PublishSnapshot();
    return p::Message(reply);
  }

  p::JobRow Row(const JobRecord& rec, const Job* live) {
    p::JobRow r;
    r.job = rec.id;
    r.name = rec.name;
    auto spec = p::DecodeAs<p::SubmitJob>(rec.spec_json);
    if (spec.ok()) {
      r.min_workers = spec->workers.value_or(spec->min_workers.value_or(1));
      r.max_workers = spec->workers.value_or(spec->max_workers.value_or(1));
      r.gpu_type = spec->gpu_type;
    }
    r.submit_time = std::max(0.0, rec.submit_time);
    r.generation = static_cast<std::int64_t>(rec.generation);
    switch (rec.state) {
      case JobState::kQueued: r.state = p::JobState::kQueued; break;
      case JobState::kRunning: r.state = p::JobState::kRunning; break;
      case JobState::kFinished: r.state = p::JobState::kCompleted; break;
      case JobState::kFailed: r.state = p::JobState::kFailed; break;
      case JobState::kCancelled: r.state = p::JobState::kCancelled; break;
    }
    if (!live) {
      try {
        r.rescales = json::parse(rec.workers_json).value("rescales", std::int64_t{0});
      } catch (const std::exception&) {
      }
    }
    if (live) {
      for (const auto& [id, w] : live->workers)
        if (!w.leaving) r.workers++;
      r.step = live->step;
      r.steps_per_second = live->rate;
      r.rescales = live->rescales;
      r.generation = live->generation;
      if (rec.state == JobState::kQueued && !live->workers.empty()) r.state = p::JobState::kPreempted;
    }
    return r;
  }

  std::optional<p::Message> On(const p::ReplyTo&, p::ListJobs& m) {
    p::JobsReply reply;
    if (m.include_finished) {
      auto all = store->ListJobs(false);
      if (!all.ok()) return Err(all.status());
      for (const auto& rec : *all) {
        auto it = jobs.find(rec.id);
        reply.jobs.push_back(it != jobs.end() ? Row(it->second.rec, &it->second) : Row(rec, nullptr));
      }
    } else {
      for (const auto& [id, j] : jobs) reply.jobs.push_back(Row(j.rec, &j));
    }
    return p::Message(reply);
  }

  std::optional<p::Message> On(const p::ReplyTo&, p::JobStatus& m) {
    auto it = jobs.find(m.job);
    JobRecord rec;
    if (it != jobs.end()) {
      rec = it->second.rec;
    } else {
      auto r = store->GetJob(m.job);
      if (!r.ok()) return Err(r.status());
      rec = *r;
    }
    p::JobStatusReply reply;
    reply.row = Row(rec, it != jobs.end() ? &it->second : nullptr);
    std::map<std::string, int> placement;
    if (it != jobs.end()) {
      for (const auto& [id, w] : it->second.workers)
        if (!w.leaving) placement[w.agent]++;
    }
    for (const auto& [node, n] : placement) reply.placement.push_back({node, n});
    auto spec = p::DecodeAs<p::SubmitJob>(rec.spec_json);
    if (spec.ok()) reply.argv = spec->argv;
    if (IsTerminal(rec.state)) reply.exit_code = std::clamp(rec.exit_code, 0, 255);
    reply.message = rec.message;
    return p::Message(reply);
  }

  std::optional<p::Message> On(const p::ReplyTo&, p::CancelJob& m) {
    auto it = jobs.find(m.job);
    if (it == jobs.end()) {
      auto r = store->GetJob(m.job);
      if (!r.ok()) return Err(r.status());
      return Err(Status::FailedPrecondition("job " + std::to_string(m.job) + " is already " +
                                            std::string(JobStateName(r->state))));
    }
    Status st = Feed(s::JobCancelled{m.job}, "cancel");
    if (!st.ok()) return Err(st);
    it = jobs.find(m.job);
    if (it != jobs.end()) {
      (void)EndJob(it->second, JobState::kCancelled, 130, "cancelled by the user");
      jobs.erase(it);
    }
    PublishSnapshot();
    p::Ok ok;
    ok.message = "job " + std::to_string(m.job) + " cancelled";
    return p::Message(ok);
  }

  std::vector<p::NodeRow> NodeRows() {
    std::vector<p::NodeRow> rows;
    for (const auto& [id, n] : nodes) {
      p::NodeRow r;
      r.agent_id = n.id;
      r.host = n.host;
      r.pool = n.pool;
      r.gpu_type = n.gpu_type;
      r.slots = n.slots;
      r.used_slots = n.slots - static_cast<int>(FreeSlots(n).size());
      r.connected = n.connected;
      r.last_heartbeat_age = n.last_heartbeat > 0 ? std::max(0.0, WallNow() - n.last_heartbeat) : 0;
      if (!n.connected) r.state = p::NodeState::kDisconnected;
      else if (n.loan_state == "loaned") r.state = p::NodeState::kLoaned;
      else if (n.loan_state == "held") {
        bool reclaiming = std::any_of(reclaims.begin(), reclaims.end(), [&](auto& pr) { return pr.node == n.id; });
        r.state = reclaiming ? p::NodeState::kReclaiming : p::NodeState::kHeld;
      } else r.state = p::NodeState::kAvailable;
      rows.push_back(r);
    }
    return rows;
  }

  std::optional<p::Message> On(const p::ReplyTo&, p::ListNodes&) {
    p::NodesReply reply;
    reply.nodes = NodeRows();
    return p::Message(reply);
  }

  Status Offer(const std::vector<std::string>& names) {
    std::vector<s::ServerId> ids;
    for (const auto& name : names) {
      auto it = nodes.find(name);
      if (it == nodes.end()) return Status::NotFound("no agent named '" + name + "'");
      if (it->second.pool != p::Pool::kInference)
        return Status::InvalidArgument("'" + name + "' is a training server; only inference servers can be offered");
      if (it->second.loan_state == "loaned") return Status::FailedPrecondition("'" + name + "' is already loaned");
      if (!it->second.connected) return Status::Unavailable("'" + name + "' is not connected");
      ids.push_back(it->second.server_id);
    }
    ARYL_RETURN_IF_ERROR(Feed(s::ServersLoaned{ids}, "pool offer"));
    for (const auto& name : names) {
      nodes[name].loan_state = "loaned";
      // A server offered again before its reclaim completed is no longer pending.
      reclaims.erase(std::remove_if(reclaims.begin(), reclaims.end(), [&](auto& pr) { return pr.node == name; }),
                     reclaims.end());
      ARYL_RETURN_IF_ERROR(SaveNode(nodes[name]));
      ARYL_RETURN_IF_ERROR(store->AppendEvent(WallNow(), 0, "loan", name));
    }
    spdlog::info("loaned {} server(s) to training", names.size());
    return Status::Ok();
  }

  Status ReclaimServers(int count, const std::vector<std::string>& names, double deadline_s) {
    std::vector<s::ServerId> ids;
    for (const auto& name : names) {
      auto it = nodes.find(name);
      if (it == nodes.end()) return Status::NotFound("no agent named '" + name + "'");
      if (it->second.loan_state != "loaned") return Status::FailedPrecondition("'" + name + "' is not loaned");
      ids.push_back(it->second.server_id);
    }
    current_reclaim_deadline = deadline_s;
    ARYL_RETURN_IF_ERROR(store->AppendEvent(WallNow(), 0, "reclaim",
                                            std::to_string(names.empty() ? count : static_cast<int>(names.size())) +
                                                " server(s) within " + std::to_string(deadline_s) + " s"));
    Status st = Feed(s::Reclaim{names.empty() ? count : 0, ids, CoreNow() + deadline_s}, "pool reclaim");
    current_reclaim_deadline = 120;
    return st;
  }

  std::optional<p::Message> On(const p::ReplyTo&, p::PoolOffer& m) {
    Status st = Offer(m.servers);
    if (!st.ok()) {
      metrics.Inc("aryl_bad_requests_total");
      return Err(st);
    }
    PublishSnapshot();
    p::Ok ok;
    ok.message = std::to_string(m.servers.size()) + " server(s) loaned";
    return p::Message(ok);
  }

  std::optional<p::Message> On(const p::ReplyTo&, p::PoolReclaim& m) {
    Status v = m.Validate();
    if (!v.ok()) return Err(v);
    Status st = ReclaimServers(static_cast<int>(m.count), m.servers, m.deadline_seconds);
    if (!st.ok()) {
      metrics.Inc("aryl_bad_requests_total");
      return Err(st);
    }
    PublishSnapshot();
    p::Ok ok;
    ok.message = "reclaim accepted; servers are empty within " + std::to_string(m.deadline_seconds) + " s";
    return p::Message(ok);
  }

  std::optional<p::Message> On(const p::ReplyTo& from, p::WatchJob& m) {
    auto it = jobs.find(m.job);
    if (it == jobs.end()) {
      auto r = store->GetJob(m.job);
      if (!r.ok()) return Err(r.status());
      // Already over: one final event.
      p::JobEvent ev;
      ev.job = m.job;
      ev.time = WallNow();
      ev.state = Row(*r, nullptr).state;
      ev.message = r->message;
      ev.exit_code = std::clamp(r->exit_code, 0, 255);
      ev.final = true;
      (void)server->Push(from.peer.identity, ev);
    } else {
      auto& w = it->second.watchers;
      if (std::find(w.begin(), w.end(), from.peer.identity) == w.end()) w.push_back(from.peer.identity);
      Notify(it->second, Row(it->second.rec, &it->second).state, it->second.rec.message);
    }
    p::Ok ok;
    ok.message = "watching job " + std::to_string(m.job);
    return p::Message(ok);
  }

  json Summary() {
    json j;
    j["epoch"] = scheduler_epoch;
    j["policy"] = opt.policy;
    j["uptime_seconds"] = WallNow() - started_at;
    json pools = json::object();
    int loaned = 0;
    for (const auto& row : NodeRows()) {
      std::string pool(p::ToString(row.pool));
      auto& pj = pools[pool];
      if (pj.is_null()) pj = json::object();
      pj["servers"] = pj.value("servers", 0) + 1;
      pj["slots"] = pj.value("slots", 0) + row.slots;
      pj["used_slots"] = pj.value("used_slots", 0) + row.used_slots;
      if (row.state == p::NodeState::kLoaned) {
        loaned++;
        pj["loaned_servers"] = pj.value("loaned_servers", 0) + 1;
        pj["loaned_slots"] = pj.value("loaned_slots", 0) + row.slots;
      }
      if (row.connected) pj["connected"] = pj.value("connected", 0) + 1;
    }
    j["pools"] = pools;
    j["loaned_servers"] = loaned;
    json counts = json::object();
    json jobs_arr = json::array();
    for (const auto& [id, job] : jobs) {
      auto row = Row(job.rec, &job);
      std::string st(p::ToString(row.state));
      counts[st] = counts.value(st, 0) + 1;
      jobs_arr.push_back({{"job", id}, {"name", row.name}, {"state", st}, {"workers", row.workers},
                          {"min", row.min_workers}, {"max", row.max_workers}, {"step", row.step},
                          {"loss", job.loss}, {"steps_per_second", row.steps_per_second},
                          {"rescales", row.rescales}, {"generation", row.generation}});
    }
    j["jobs_by_state"] = counts;
    j["jobs"] = jobs_arr;
    j["rescales"] = metrics.Value("aryl_rescales_total");
    j["preemptions"] = metrics.Value("aryl_preemptions_total");
    j["reclaims"] = metrics.Value("aryl_reclaims_total");
    j["reclaims_late"] = metrics.Value("aryl_reclaims_late_total");
    auto round = metrics.Histogram("aryl_round_seconds");
    j["rounds"] = {{"count", round.count}, {"max_seconds", round.max},
                   {"mean_seconds", round.count ? round.sum / round.count : 0.0}};
    auto lat = metrics.Histogram("aryl_reclaim_latency_seconds");
    j["reclaim_latency"] = {{"count", lat.count}, {"max_seconds", lat.max}};
    j["pending_reclaims"] = reclaims.size();
    return j;
  }

  std::optional<p::Message> On(const p::ReplyTo&, p::StatusRequest&) {
    p::StatusReply reply;
    reply.summary = Summary();
    return p::Message(reply);
  }

  void PublishSnapshot() {
    json j = Summary();
    // Gauges.
    metrics.ClearGauge("aryl_jobs");
    for (auto& [state, n] : j["jobs_by_state"].items()) metrics.Set("aryl_jobs", "state=\"" + state + "\"", n.get<double>());
    metrics.ClearGauge("aryl_gpus");
    for (auto& [pool, pj] : j["pools"].items()) {
      int used = pj.value("used_slots", 0), total = pj.value("slots", 0);
      metrics.Set("aryl_gpus", "pool=\"" + pool + "\",use=\"used\"", used);
      metrics.Set("aryl_gpus", "pool=\"" + pool + "\",use=\"free\"", total - used);
    }
    metrics.Set("aryl_loaned_servers", "", j["loaned_servers"].get<double>());
    int connected = 0;
    for (const auto& [id, n] : nodes) connected += n.connected;
    metrics.Set("aryl_nodes_connected", "", connected);
    std::lock_guard lock(snapshot_mu);
    status_snapshot = j.dump(2);
  }

  // --- periodic work ----------------------------------------------------------------

  void Tick() {
    double now = WallNow();
    // Agents that stopped heartbeating have failed: their workers are gone.
    bool after_restart_grace = now - started_at > std::max(opt.restart_grace, opt.agent_timeout);
    for (auto& [id, n] : nodes) {
      bool timed_out = n.connected && now - n.last_heartbeat > opt.agent_timeout;
      bool never_came_back = !n.connected && after_restart_grace && core;
      if (!timed_out && !never_came_back) continue;
      if (never_came_back) {
        const auto* info = core->state().server(n.server_id);
        if (!info || info->failed) continue;
      }
      spdlog::warn("agent {} {}: its workers are lost", id, timed_out ? "stopped heartbeating" : "did not come back");
      n.connected = false;
      for (auto& [jid, j] : jobs) {
        std::vector<p::WorkerId> gone;
        for (const auto& [wid, w] : j.workers)
          if (w.agent == id) gone.push_back(wid);
        for (auto wid : gone) j.workers.erase(wid);
        if (!gone.empty()) pending_converge.insert(jid);
      }
      (void)store->AppendEvent(now, 0, "node_failed", id);
      if (core) {
        Status st = Feed(s::ServerFailed{n.server_id}, "agent lost");
        if (!st.ok()) spdlog::error("server {} failed: {}", id, st.ToString());
      }
    }
    // Jobs whose workers changed outside a plan converge to the core's placement.
    auto pending = std::move(pending_converge);
    pending_converge.clear();
    for (auto jid : pending) {
      auto it = jobs.find(jid);
      if (it == jobs.end() || !core) continue;
      Job& j = it->second;
      if (j.completing) {
        if (j.workers.empty()) FinishJob(j, j.rec.exit_code);
        continue;
      }
      const auto* info = core->state().job(jid);
      if (!info || info->status != s::JobStatus::kRunning) {
        (void)SaveJob(j);
        continue;
      }
      (void)store->Batch([&] { return Converge(j, ToNodePlacement(info->placement), "replace lost workers"); });
    }
    // Jobs whose workers said they are done but some linger: stop the rest.
    for (auto& [jid, j] : jobs) {
      if (j.completing && now - j.completing_since > opt.stop_grace) {
        StopJobWorkers(j, false, "the job completed");
        j.completing_since = now + 3600;  // once
      }
    }
    // Reclaims: met when the server holds no worker; enforced at the deadline.
    for (auto it = reclaims.begin(); it != reclaims.end();) {
      bool busy = false;
      for (auto& [jid, j] : jobs)
        for (auto& [wid, w] : j.workers)
          if (w.agent == it->node) busy = true;
      if (!busy) {
        double latency = now - it->start;
        metrics.Observe("aryl_reclaim_latency_seconds", latency);
        if (now > it->deadline) metrics.Inc("aryl_reclaims_late_total");
        (void)store->AppendEvent(now, 0, "reclaimed", it->node + " empty after " + std::to_string(latency) + " s");
        spdlog::info("server {} returned to inference after {:.2f} s", it->node, latency);
        it = reclaims.erase(it);
        continue;
      }
      if (!it->forced && now > it->deadline - 1.0) {
        spdlog::warn("reclaim of {}: deadline near, killing the workers still there", it->node);
        for (auto& [jid, j] : jobs) {
          std::vector<p::WorkerId> ids;
          for (auto& [wid, w] : j.workers)
            if (w.agent == it->node) ids.push_back(wid);
          if (ids.empty()) continue;
          p::StopWorkers sw;
          sw.job = jid;
          sw.workers = ids;
          sw.grace_seconds = 0;
          sw.reason = "reclaim deadline";
          Push(it->node, sw);
        }
        it->forced = true;
      }
      ++it;
    }
    DemandTick(now);
    if (now - last_tick > 0.5) {
      last_tick = now;
      PublishSnapshot();
    }
  }

  void DemandTick(double now) {
    if (opt.inference_demand.empty() || !core || now - last_demand_check < 0.5) return;
    last_demand_check = now;
    std::vector<std::string> inference;
    for (const auto& [id, n] : nodes)
      if (n.pool == p::Pool::kInference && n.connected) inference.push_back(id);
    if (static_cast<int>(inference.size()) != demand_servers) {
      auto curve = sim::ParseDemand(opt.inference_demand, static_cast<int>(inference.size()), 1);
      if (!curve.ok()) {
        spdlog::error("--inference-demand: {}", curve.status().ToString());
        opt.inference_demand.clear();
        return;
      }
      demand = *curve;
      demand_servers = static_cast<int>(inference.size());
    }
    int need = demand->At((now - started_at) * opt.demand_time_scale);
    std::vector<std::string> held, loaned;
    for (const auto& id : inference) {
      if (nodes[id].loan_state == "loaned") loaned.push_back(id);
      else held.push_back(id);
    }
    int held_n = static_cast<int>(held.size());
    if (need < held_n) {
      std::vector<std::string> offer(held.begin(), held.begin() + (held_n - need));
      // Only servers whose previous reclaim is complete.
      offer.erase(std::remove_if(offer.begin(), offer.end(), [&](const std::string& n) {
                    return std::any_of(reclaims.begin(), reclaims.end(), [&](auto& pr) { return pr.node == n; });
                  }), offer.end());
      if (!offer.empty()) {
        Status st = Offer(offer);
        if (!st.ok()) spdlog::warn("demand offer: {}", st.ToString());
      }
    } else if (need > held_n && !loaned.empty()) {
      int k = std::min(need - held_n, static_cast<int>(loaned.size()));
      Status st = ReclaimServers(k, {}, demand_reclaim_deadline);
      if (!st.ok()) spdlog::warn("demand reclaim: {}", st.ToString());
      else spdlog::info("inference demand {} > {} held: reclaiming {}", need, held_n, k);
    }
  }
  double demand_reclaim_deadline = 10;
};

// --- Daemon ----------------------------------------------------------------------

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() { Stop(); }

Result<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->opt = options;
  ARYL_RETURN_IF_ERROR(impl->Init());
  p::Server::Options so;
  so.endpoint = options.endpoint;
  if (!options.curve_secret_key.empty()) {
    ARYL_ASSIGN_OR_RETURN(auto kp, p::LoadKeyPair(options.curve_secret_key));
    p::CurveServerKeys keys;
    keys.public_key = kp.public_key;
    keys.secret_key = kp.secret_key;
    if (options.curve_allow.empty()) return Status::InvalidArgument("--curve-key needs --curve-allow");
    ARYL_ASSIGN_OR_RETURN(keys.allowed_clients, p::LoadAllowList(options.curve_allow));
    impl->public_key = kp.public_key;
    so.curve = keys;
  }
  so.tick = std::chrono::milliseconds(50);
  Impl* raw = impl.get();
  so.on_tick = [raw] { raw->Tick(); };
  ARYL_ASSIGN_OR_RETURN(impl->server,
                        p::Server::Start(so, [raw](const p::ReplyTo& from, p::Message msg) {
                          return raw->Handle(from, std::move(msg));
                        }));
  if (options.http_port >= 0) {
    ARYL_ASSIGN_OR_RETURN(impl->http, HttpServer::Start(options.http_address, options.http_port,
                                                        [raw](const std::string& path) -> HttpResponse {
                                                          if (path == "/metrics")
                                                            return {200, "text/plain; version=0.0.4", raw->metrics.Render()};
                                                          if (path == "/status" || path == "/") {
                                                            std::lock_guard lock(raw->snapshot_mu);
                                                            return {200, "application/json", raw->status_snapshot};
                                                          }
                                                          return {404, "text/plain", "not found: try /metrics or /status\n"};
                                                        }));
  }
  spdlog::info("aryl-scheduler listening on {}{}{}", impl->server->endpoint(),
               impl->http ? ", http on " + options.http_address + ":" + std::to_string(impl->http->port()) : "",
               so.curve ? " (CURVE)" : "");
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

const std::string& Daemon::endpoint() const { return impl_->server->endpoint(); }
int Daemon::http_port() const { return impl_->http ? impl_->http->port() : -1; }
const std::string& Daemon::public_key() const { return impl_->public_key; }

void Daemon::Run(const std::atomic<bool>& stop) {
  while (!stop && impl_->server) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

void Daemon::Stop() {
  if (!impl_) return;
  if (impl_->http) impl_->http->Stop();
  if (impl_->server) {
    impl_->server->Close();
    impl_->server->Join();
  }
}

}  // namespace aryl::daemon
