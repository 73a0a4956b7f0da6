#include "daemon_impl.h"
#include "aryl/protocol/scheduler_client.h"

#include "aryl/protocol/env_policy.h"

namespace aryl::daemon {

std::optional<p::Message> Daemon::Impl::Handle(const p::ReplyTo& from, p::Message msg) {
  try {
    if (auto refused = Authorize(from, msg)) return refused;
    // Any authorized message from a connected agent's own key shows it is
    // alive, not only heartbeats; a user key that took the agent's routing id
    // keeps nothing alive.
    auto nit = nodes.find(from.peer.identity);
    if (nit != nodes.end() && nit->second.connected) {
      Identity who = Caller(from);
      if ((who.roles & kAgentRole) && (!who.agent_bound || who.name == nit->first)) Heard(nit->second);
    }
    if (Frozen()) return WhileFrozen(from, msg);
    const std::uint64_t failures_before = leadership ? leadership->write_failures() : 0;
    const std::uint64_t unavailable_before = unavailable_writes;
    auto reply = std::visit([&](auto& m) -> std::optional<p::Message> { return On(from, m); }, msg);
    // A request whose own write found etcd unavailable froze this leader
    // (leadership.h) and was not applied: it gets the frozen leader's answer,
    // which tells clients to retry here (scheduler_client.h), not the store's
    // error, even when the freeze has already lifted (a keep-alive sent after
    // the failure was answered: etcd elected a new raft leader meanwhile). A
    // SubmitJob's client token makes that retry land once.
    // The same for a write etcd refused as Unavailable without freezing this
    // leader (one of its earlier transactions landed late: the state is read
    // again before the next): not applied, so the client retries it.
    if (reply && leadership &&
        (leadership->write_failures() != failures_before || unavailable_writes != unavailable_before))
      if (const auto* e = std::get_if<p::Error>(&*reply); e && e->code == Status::Code::kUnavailable)
        return Frozen() ? WhileFrozen(from, msg)
                        : p::Message(p::FrozenError("a state write found etcd unavailable; retry"));
    return reply;
  } catch (const std::exception& e) {
    spdlog::error("handling {}: {}", p::TypeName(msg), e.what());
    return p::Message(p::Error::FromStatus(Status::Internal(e.what())));
  }
}

// Frozen (leadership.h): no decision, nothing journaled. Agents' heartbeats
// are acked so their workers keep training through an etcd outage (their
// lease); everything else is refused with a reason to retry.
std::optional<p::Message> Daemon::Impl::WhileFrozen(const p::ReplyTo& from, const p::Message& msg) {
  if (auto* hb = std::get_if<p::Heartbeat>(&msg); hb && !leadership->Deposed()) {
    auto it = nodes.find(hb->agent_id);
    if (it != nodes.end() && it->second.connected && from.peer.identity == it->second.route)
      SendNow(from.peer.identity, p::HeartbeatAck{hb->seq, opt.agent_lease, scheduler_epoch, term});
    return std::nullopt;
  }
  // Deposed: this scheduler is on its way to standby and knows no leader;
  // the standby reply sends the client on through its list.
  if (leadership->Deposed()) return p::Message(p::StandbyError("", leadership->term()));
  return p::Message(p::FrozenError(leadership->Why()));
}

std::optional<Status> Daemon::Impl::UserLimitRefusal(const std::string& owner) {
  if (opt.max_jobs_per_user > 0) {
    const auto& ids = table.OwnedBy(owner);
    if (static_cast<int>(ids.size()) >= opt.max_jobs_per_user)
      return Status::OutOfRange("user '" + owner + "' has " + std::to_string(ids.size()) +
                                " queued or running jobs, the most --max-jobs-per-user allows; retry once some end");
  }
  if (opt.submit_rate_per_user > 0) {
    Bucket& b = submit_buckets[owner];
    double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    const double burst = std::max(1, opt.submit_burst_per_user);
    b.tokens = b.at < 0 ? burst : std::min(burst, b.tokens + (now - b.at) * opt.submit_rate_per_user);
    b.at = now;
    if (b.tokens < 1)
      return Status::Unavailable("user '" + owner + "' submits faster than --submit-rate-per-user (" +
                                 fmt::format("{:g}", opt.submit_rate_per_user) + " a second, bursts of " +
                                 std::to_string(opt.submit_burst_per_user) + "); retry in " +
                                 FormatDuration((1 - b.tokens) / opt.submit_rate_per_user));
    b.tokens -= 1;
  }
  return std::nullopt;
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::SubmitJob& m) {
  Status v = m.Validate();
  if (v.ok()) v = p::EnvPolicy::FromFlags(opt.env_deny, opt.env_allow).Check(m.env);
  if (!v.ok()) {
    metrics.Inc("aryl_bad_requests_total");
    return Err(v);
  }
  if (!core) return Err(Status::Unavailable("no agent has registered yet; start an aryl-agent first"));
  // Tokens are the submitter's own: another owner's equal token neither finds
  // that owner's job nor blocks this submission (the stored key is scoped).
  const std::string token = m.client_token ? m.owner.value_or("local") + '\x1f' + *m.client_token : "";
  if (m.client_token) {
    // A retry of a submission that already landed: answer with that job.
    auto existing = store->FindJobByToken(token);
    if (!existing.ok()) return Err(existing.status());
    if (*existing) {
      p::SubmitReply reply;
      reply.job = **existing;
      auto it = jobs.find(reply.job);
      if (it != jobs.end()) reply.name = it->second.rec.name;
      return p::Message(reply);
    }
  }
  // Users (not operators) are held to the per-user limits; a retry of a
  // submission that landed is answered above and never counted.
  if (!Caller(from).Has(kOperatorRole)) {
    if (auto refusal = UserLimitRefusal(m.owner.value_or("local"))) {
      metrics.Inc("aryl_refused_requests_total", "type=\"submit_job\"");
      return Err(*refusal);
    }
  }
  if (m.stop_grace && *m.stop_grace > opt.max_stop_grace) {
    metrics.Inc("aryl_bad_requests_total");
    return Err(Status::InvalidArgument(fmt::format(
        "--stop-grace {:g} s is more than this scheduler allows (--max-stop-grace {:g} s)", *m.stop_grace,
        opt.max_stop_grace)));
  }
  JobRecord rec;
  rec.client_token = token;
  rec.name = m.name.empty() ? m.argv[0].substr(m.argv[0].find_last_of('/') + 1) : m.name;
  rec.spec_json = p::Encode(m);
  rec.submit_time = WallNow();
  // Validate against the core without keeping it: the core refuses impossible jobs.
  s::JobSpec spec;
  if (Status q = ResolveQueue(Caller(from), m, spec); !q.ok()) {
    metrics.Inc(q.IsPermissionDenied() ? "aryl_refused_requests_total" : "aryl_bad_requests_total",
                q.IsPermissionDenied() ? "type=\"submit_job\"" : "");
    return Err(q);
  }
  spec.name = rec.name;
  spec.submit_time = CoreNow();
  bool elastic = !m.workers.has_value();
  spec.kind = elastic ? s::JobKind::kElastic : s::JobKind::kInelastic;
  spec.min_workers = static_cast<int>(elastic ? *m.min_workers : *m.workers);
  spec.max_workers = static_cast<int>(elastic ? *m.max_workers : *m.workers);
  if (!m.gpu_type.empty()) spec.gpu_types = {m.gpu_type};
  spec.model = !m.model.empty() && measured && measured->HasModel(m.model) ? m.model : kLinearModel;
  spec.total_work = m.total_work > 0 ? m.total_work : kUnknownWork;
  // Until its program shows that it links the runtime, a job that did not say
  // resizes by a restart (Job::RestartsToResize) and is charged for one.
  if (m.elastic.value_or("restart") == "restart") spec.rescale = s::Rescale::kRestart;
  // Enough connected slots ends the walk: a submission costs the nodes it
  // needs to see, not every node of the cluster.
  int capacity = 0, returning = 0;
  for (auto it = nodes.begin(); it != nodes.end() && capacity < spec.min_workers; ++it) {
    const Node& n = it->second;
    if (n.drained || !(m.gpu_type.empty() || n.gpu_type == m.gpu_type)) continue;
    (n.connected ? capacity : returning) += n.slots;
  }
  if (spec.min_workers > capacity && spec.min_workers <= capacity + returning &&
      WallNow() - started_at < std::max(opt.restart_grace, opt.agent_timeout)) {
    // Just started (or took over): known agents are still coming back.
    return Err(Status::Unavailable("the scheduler started " + FormatDuration(WallNow() - started_at) +
                                   " ago and its agents are registering again; retry in a few seconds"));
  }
  if (spec.min_workers > capacity) {
    metrics.Inc("aryl_bad_requests_total");
    return Err(Status::InvalidArgument("job needs at least " + std::to_string(spec.min_workers) + " workers" +
                                       (m.gpu_type.empty() ? "" : " of type " + m.gpu_type) +
                                       " but the cluster's connected, undrained nodes have " + std::to_string(capacity)));
  }
  std::uint64_t id = 0;
  Status refused;
  Status st = Transaction("submit", [&]() -> Status {
    ARYL_ASSIGN_OR_RETURN(id, store->InsertJob(rec));
    ARYL_RETURN_IF_ERROR(store->AppendEvent(WallNow(), id, "submit", rec.name + ": " + SubmitSummary(m)));
    rec.id = id;
    spec.id = id;
    Job j;
    j.rec = rec;
    j.spec = m;
    table.Add(std::move(j));
    Status fed = Feed(s::JobSubmitted{spec}, "submit");
    if (fed.ok() || fed.IsIoError() || fed.IsCorruption()) return fed;
    // The core refused it (and did not change): the job fails at once with the reason.
    refused = fed;
    ARYL_RETURN_IF_ERROR(EndJob(jobs[id], JobState::kFailed, 2, "refused by the scheduler: " + fed.message()));
    table.Erase(id);
    return Status::Ok();
  });
  if (!st.ok()) return Err(st);
  if (!refused.ok()) return Err(refused);
  metrics.Inc("aryl_jobs_submitted_total");
  p::SubmitReply reply;
  reply.job = id;
  reply.name = rec.name;
  snapshot_dirty = true;
  return p::Message(reply);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::ListJobs& m) {
  // One page: the rows of a few thousand jobs stay far below the frame limit.
  // Users see their own jobs only; pages are filled with those.
  p::JobsReply reply;
  Identity who = Caller(from);
  auto visible = [&](const p::JobRow& r) { return who.Has(kOperatorRole) || r.owner == who.name; };
  int limit = static_cast<int>(m.limit > 0 ? m.limit : p::kDefaultJobsPage);
  if (m.include_finished) {
    for (p::JobId after = m.after;;) {
      auto page = store->ListJobs(false, after, limit + 1);
      if (!page.ok()) return Err(page.status());
      bool more = static_cast<int>(page->size()) > limit;
      if (more) page->pop_back();
      for (const auto& rec : *page) {
        after = rec.id;
        auto it = jobs.find(rec.id);
        p::JobRow row = it != jobs.end() ? Row(it->second.rec, &it->second) : Row(rec, nullptr);
        if (visible(row)) reply.jobs.push_back(std::move(row));
        if (static_cast<int>(reply.jobs.size()) == limit) break;
      }
      reply.more = more || (static_cast<int>(reply.jobs.size()) == limit && !page->empty() && after != page->back().id);
      if (!more || static_cast<int>(reply.jobs.size()) == limit) break;
    }
  } else if (who.Has(kOperatorRole)) {
    for (auto it = jobs.upper_bound(m.after); it != jobs.end(); ++it) {
      if (static_cast<int>(reply.jobs.size()) == limit) {
        reply.more = true;
        break;
      }
      reply.jobs.push_back(Row(it->second.rec, &it->second));
    }
  } else {
    // A user's own live jobs, from the per-owner index: the cost is the page's,
    // not the cluster's queue.
    const auto& own = table.OwnedBy(who.name);
    for (auto id = own.upper_bound(m.after); id != own.end(); ++id) {
      auto it = jobs.find(*id);
      if (it == jobs.end()) continue;
      if (static_cast<int>(reply.jobs.size()) == limit) {
        reply.more = true;
        break;
      }
      reply.jobs.push_back(Row(it->second.rec, &it->second));
    }
  }
  FillPendingReasons(reply.jobs);  // one core query for the page
  return reply;
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::JobStatus& m) {
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
  if (it != jobs.end()) reply.rank0_worker = RankZero(it->second);
  std::optional<p::SubmitJob> stored;
  if (const p::SubmitJob* spec = SpecOf(rec, it != jobs.end() ? &it->second : nullptr, stored)) {
    reply.argv = spec->argv;
    for (const auto& [name, value] : spec->env) reply.env_names.push_back(name);  // never the values
  }
  if (IsTerminal(rec.state)) reply.exit_code = std::clamp(rec.exit_code, 0, 255);
  reply.message = rec.message;
  if (it != jobs.end() && reply.row.state == p::JobState::kQueued && it->second.workers.empty())
    reply.row.pending_reason = reply.pending_reason = PendingReason(it->second);
  return p::Message(reply);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::CancelJob& m) {
  auto it = jobs.find(m.job);
  if (it == jobs.end()) {
    auto r = store->GetJob(m.job);
    if (!r.ok()) return Err(r.status());
    return Err(Status::FailedPrecondition("job " + std::to_string(m.job) + " is already " +
                                          std::string(JobStateName(r->state))));
  }
  Status st = Transaction("cancel", [&]() -> Status {
    ARYL_RETURN_IF_ERROR(Feed(s::JobCancelled{m.job}, "cancel"));
    auto live = jobs.find(m.job);
    if (live == jobs.end()) return Status::Ok();
    ARYL_RETURN_IF_ERROR(EndJob(live->second, JobState::kCancelled, 130, "cancelled by the user"));
    table.Erase(m.job);
    return Status::Ok();
  });
  if (!st.ok()) return Err(st);
  snapshot_dirty = true;
  p::Ok ok;
  ok.message = "job " + std::to_string(m.job) + " cancelled";
  return p::Message(ok);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::NodeCommand& m) {
  Status st = m.Validate();
  if (st.ok()) st = NodeCommandFor(m.node, m.action);
  if (!st.ok()) {
    metrics.Inc("aryl_bad_requests_total");
    return Err(st);
  }
  snapshot_dirty = true;
  p::Ok ok;
  ok.message = "node " + m.node + ": " + (m.action == "drain"       ? "draining (running jobs finish there)"
                                          : m.action == "drain-now" ? "draining (its workers move off now)"
                                                                    : m.action + "d");
  return p::Message(ok);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::ListNodes&) {
  p::NodesReply reply;
  reply.nodes = NodeRows();
  return p::Message(reply);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::PoolOffer& m) {
  Status st = Offer(m.servers);
  if (!st.ok()) {
    metrics.Inc("aryl_bad_requests_total");
    return Err(st);
  }
  snapshot_dirty = true;
  p::Ok ok;
  ok.message = std::to_string(m.servers.size()) + " server(s) loaned";
  return p::Message(ok);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::PoolReclaim& m) {
  Status v = m.Validate();
  if (!v.ok()) return Err(v);
  Status st = ReclaimServers(static_cast<int>(m.count), m.servers, m.deadline_seconds);
  if (!st.ok()) {
    metrics.Inc("aryl_bad_requests_total");
    return Err(st);
  }
  snapshot_dirty = true;
  p::Ok ok;
  ok.message = "reclaim accepted; servers are empty within " + FormatDuration(m.deadline_seconds);
  return p::Message(ok);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo& from, p::WatchJob& m) {
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
    if (ev.state == p::JobState::kFailed) {
      json w = json::parse(r->workers_json, nullptr, false);
      if (w.is_object() && w.contains("failure")) ev.failure = WorkerEndFromJson(w["failure"]);
    }
    Send(from.peer.identity, ev);
  } else {
    auto& w = it->second.watchers;
    if (std::find(w.begin(), w.end(), from.peer.identity) == w.end()) w.push_back(from.peer.identity);
    Notify(it->second, Row(it->second.rec, &it->second).state, it->second.rec.message);
  }
  p::Ok ok;
  ok.message = "watching job " + std::to_string(m.job);
  return p::Message(ok);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::StatusRequest&) {
  p::StatusReply reply;
  reply.summary = Summary();
  return p::Message(reply);
}

}  // namespace aryl::daemon
