// The serving side of loaned inference servers, as the scheduler drives it
// (protocol/serving.h, steps S1-S4): lend a server only once its serving side
// stopped, count a reclaim complete only once it is ready again.
#include <signal.h>

#include "daemon_impl.h"
#include "reclaim_record.h"

namespace aryl::daemon {

namespace {
constexpr double kHookSeconds = 10;  // --serving-hook runs at most this long
}  // namespace

double Daemon::Impl::WarmupOf(const Node& n) const {
  if (!n.serving) return 0;
  return n.serving->warmup_seconds >= 0 ? n.serving->warmup_seconds : opt.serving_warmup;
}

double Daemon::Impl::ServingBudget(const Node& n) const {
  return n.serving ? WarmupOf(n) * kServingWarmupFactor + kServingWarmupSlack : 0;
}

void Daemon::Impl::SendServing(const Node& n, bool lend) {
  p::ServingCommand c;
  c.lend = lend;
  c.term = term;
  Push(n.id, c);
}

Status Daemon::Impl::FinishLend(Node& n) {
  return Transaction("loan " + n.id, [&]() -> Status {
    ARYL_RETURN_IF_ERROR(Feed(s::ServersLoaned{{n.server_id}}, "pool offer"));
    n.loan_state = "loaned";
    ARYL_RETURN_IF_ERROR(SaveNode(n));
    return Journal(0, "loan", n.id + " (its serving side stopped)", json::object(), {n.id});
  });
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::ServingReport& m) {
  auto it = nodes.find(m.agent_id);
  if (it == nodes.end()) return std::nullopt;
  Node& n = it->second;
  const std::string before = n.serving ? n.serving->state : "";
  n.serving = m.status;
  const p::ServingStatus& s = m.status;
  const double now = WallNow();
  if (s.state != before) {
    std::string detail = n.id + ": " + s.state;
    json data = {{"lent", s.lent}};
    if (s.state == "ready" && s.warmup_seconds >= 0) {
      detail += " after " + FormatDuration(s.warmup_seconds);
      data["warmup_seconds"] = s.warmup_seconds;
      metrics.Observe("aryl_serving_warmup_seconds", s.warmup_seconds);
    }
    if (s.state == "failed") {
      detail += " at " + s.step + ": " + s.error;
      data["step"] = s.step;
      data["error"] = s.error;
      metrics.Inc("aryl_serving_failures_total", "step=\"" + s.step + "\"");
      spdlog::error("server {}: its serving side failed at {}: {}", n.id, s.step, s.error);
      ServingHook("serving_failed", n, s.step + ": " + s.error);
    }
    const std::string kind = "serving_" + s.state;  // one of kEventKinds (inspect.h)
    (void)Journal(0, kind, detail, data, {n.id});
    snapshot_dirty = true;
  }
  if (n.loan_state == "lending" && !s.lent) {
    SendServing(n, true);  // an older report, from before the command
  } else if (n.loan_state == "lending" && s.state == "stopped") {
    if (Status st = FinishLend(n); !st.ok()) {
      spdlog::error("loan of {}: {}", n.id, st.ToString());
    } else {
      spdlog::info("loaned {} to training (its serving side stopped)", n.id);
      ServingHook("loan_started", n, "");
    }
  } else if (n.loan_state == "lending" && s.state == "failed") {
    n.loan_state = "held";
    (void)SaveNode(n);
    spdlog::error("offer of {} ended: its serving side failed at {}; the server stays inference's", n.id, s.step);
  }
  for (auto r = reclaims.begin(); r != reclaims.end(); ++r) {
    if (r->node != n.id || !r->serving_started) continue;
    if (s.state == "ready") {
      const double latency = now - r->start;
      metrics.Observe("aryl_reclaim_latency_seconds", latency);
      metrics.Observe("aryl_reclaim_slack_seconds", r->ready_by - now);
      if (now > r->ready_by) metrics.Inc("aryl_reclaims_late_total");
      (void)Journal(0, "reclaimed",
                    n.id + " serving again " + FormatDuration(latency) + " after the reclaim" +
                        (now > r->ready_by ? ", " + FormatDuration(now - r->ready_by) + " late" : ""),
                    {{"latency_seconds", latency}, {"warmup_seconds", s.warmup_seconds},
                     {"late", now > r->ready_by}},
                    {n.id});
      spdlog::info("server {} serving again {:.2f} s after its reclaim", n.id, latency);
      ServingHook("reclaim_ready", n, FormatDuration(latency));
      ForgetReclaim(*store, n.id);
      reclaims.erase(r);
      break;
    }
    if (s.state == "failed") {
      spdlog::error("reclaim of {}: its serving side did not come back ({}: {}); the operator must look", n.id, s.step,
                    s.error);
      reclaims.erase(r);
      break;
    }
  }
  return std::nullopt;
}

void Daemon::Impl::ServingTick(double now) {
  for (const auto& id : serving_sync) {
    auto it = nodes.find(id);
    if (it == nodes.end() || !it->second.serving) continue;
    const Node& n = it->second;
    bool lend = n.loan_state == "loaned" || n.loan_state == "lending";
    for (const auto& r : reclaims)
      if (r.node == id && !r.serving_started) lend = true;  // training still leaves it
    if (auto d = draining.find(n.server_id); d != draining.end()) lend = true;
    SendServing(n, lend);
  }
  serving_sync.clear();
  if (!hooks) return;
  for (const auto& e : hooks->Poll()) {
    hook_deadlines.erase(e.pid);
    if (e.exit_code != 0) spdlog::warn("--serving-hook {}", e.Describe());
  }
  for (const auto& [pid, deadline] : hook_deadlines)
    if (now > deadline) hooks->Signal(pid, SIGKILL);
}

void Daemon::Impl::ServingHook(const std::string& event, const Node& n, const std::string& detail) {
  if (opt.serving_hook.empty()) return;
  if (!hooks) hooks = std::make_unique<agent::ProcessLauncher>();
  agent::LaunchSpec spec;
  spec.argv = {"/bin/sh", "-c", opt.serving_hook};
  spec.env = {{"ARYL_EVENT", event}, {"ARYL_NODE", n.id}, {"ARYL_DETAIL", detail}};
  auto pid = hooks->Launch(spec);
  if (!pid.ok()) {
    spdlog::warn("--serving-hook for {} of {}: {}", event, n.id, pid.status().ToString());
    return;
  }
  hook_deadlines[*pid] = WallNow() + kHookSeconds;
}

}  // namespace aryl::daemon
