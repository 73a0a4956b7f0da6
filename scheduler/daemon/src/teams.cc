// Teams: a submission's queue and priority (protocol/queues.h, Q1), the
// queues' listing (Q2) and their Prometheus series. The rules themselves are
// the core's (sched/queues.h); this file only names, checks and reports.
#include <fmt/format.h>

#include "aryl/sched/queue_usage.h"
#include "daemon_impl.h"
#include "usage.h"

namespace aryl::daemon {

Status Daemon::Impl::ResolveQueue(const Identity& who, const p::SubmitJob& m, s::JobSpec& spec) const {
  const std::string asked = m.queue.value_or("");
  const std::string priority = m.priority.value_or("normal");
  if (!queues) {
    if (!asked.empty() && asked != "default")
      return Status::InvalidArgument("--queue " + asked + ": this scheduler runs without queues (no --queues file)");
    if (priority != "normal")
      return Status::InvalidArgument("--priority " + priority +
                                     ": this scheduler runs without queues (no --queues file); every job is normal");
    return Status::Ok();
  }
  const int q = queues->Find(asked);
  if (q < 0) {
    std::string known;
    for (const auto& spec_q : queues->queues) known += (known.empty() ? "" : ", ") + spec_q.name;
    return Status::InvalidArgument("--queue " + asked + ": no such queue (queues: " + known + ")");
  }
  auto cls = s::ParsePriority(priority);
  if (!cls.ok()) return Status::InvalidArgument("--" + cls.status().message());
  const s::QueueSpec& chosen = queues->queues[q];
  if (!who.Has(kOperatorRole) && !chosen.MayUse(who.name))
    return Status::PermissionDenied("user '" + who.name + "' may not submit to queue '" + chosen.name +
                                    "' (its users: " + fmt::format("{}", fmt::join(chosen.users, ", ")) + ")");
  spec.queue = chosen.name;
  spec.priority = *cls;
  return Status::Ok();
}

std::string Daemon::Impl::QueueOf(const p::SubmitJob& m) const {
  if (!queues) return "";
  const int q = queues->Find(m.queue.value_or(""));
  return q < 0 ? queues->queues[queues->Find("")].name : queues->queues[q].name;
}

namespace {

std::vector<p::TypeCount> Counts(const std::map<std::string, int>& by_type) {
  std::vector<p::TypeCount> out;
  for (const auto& [type, n] : by_type) out.push_back({type, n});
  return out;
}

int Sum(const std::vector<p::TypeCount>& counts) {
  std::int64_t n = 0;
  for (const auto& c : counts) n += c.gpus;
  return static_cast<int>(n);
}

}  // namespace

std::vector<p::QueueRow> Daemon::Impl::QueueRows() const {
  std::vector<p::QueueRow> rows;
  if (!queues) return rows;
  std::vector<s::QueueUsage> usage;
  // Elastic jobs' flexible workers are spare capacity under every elastic policy.
  if (core) usage = s::UsageByQueue(core->state(), *queues, /*elastic=*/true);
  for (std::size_t i = 0; i < queues->queues.size(); ++i) {
    const s::QueueSpec& q = queues->queues[i];
    p::QueueRow r;
    r.queue = q.name;
    r.cohort = q.cohort;
    r.weight = q.weight;
    r.borrow_limit = q.borrow_limit;
    r.lend_limit = q.lend_limit;
    r.users = q.users;
    r.quota = Counts(q.quota);
    if (i < usage.size()) {
      const s::QueueUsage& u = usage[i];
      r.used = Counts(u.used);
      r.borrowed = Counts(u.borrowed);
      r.lent = Counts(u.lent);
      r.loaned = u.loaned;
      r.flexible = u.flexible;
      r.running = u.running;
      r.pending = u.pending;
      r.share = u.share;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

// The series are the rows of `aryl queues`, GPU types summed.
std::vector<QueueSeries> Daemon::Impl::QueueSeriesNow() const {
  std::vector<QueueSeries> out;
  for (const p::QueueRow& r : QueueRows()) {
    out.push_back({r.queue, Sum(r.quota), Sum(r.used), Sum(r.borrowed), Sum(r.lent), static_cast<int>(r.loaned),
                   static_cast<int>(r.running), static_cast<int>(r.pending)});
  }
  return out;
}

Result<std::shared_ptr<const s::QueueConfig>> Daemon::Impl::ReadQueues() const {
  s::QueueCluster live;
  live.open = true;  // agents register after the file is read: types and sizes are theirs
  ARYL_ASSIGN_OR_RETURN(auto q, s::ReadQueuesFile(opt.queues_file, live));
  return std::make_shared<const s::QueueConfig>(std::move(q));
}

// Q3: the new queues replace the old at once; the core is rebuilt from a
// snapshot of itself under them (as for a new GPU type), so running jobs keep
// their placements and the next round applies the rules.
std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::ReloadQueues&) {
  if (opt.queues_file.empty())
    return Err(Status::InvalidArgument("this scheduler runs without queues: start it with --queues FILE"));
  auto fresh = ReadQueues();
  if (!fresh.ok()) {
    metrics.Inc("aryl_bad_requests_total");
    return Err(fresh.status().WithContext("queues not reloaded, the old ones stay in force"));
  }
  std::string names;
  for (const auto& q : (*fresh)->queues) names += (names.empty() ? "" : ", ") + q.name;
  const std::shared_ptr<const s::QueueConfig> old = queues;
  queues = *fresh;
  Status st = Transaction("reload queues", [&]() -> Status {
    ARYL_RETURN_IF_ERROR(Journal(0, "queues", "reloaded " + opt.queues_file + ": " + names,
                                 {{"file", opt.queues_file}, {"queues", (*fresh)->queues.size()}}, {}));
    if (!core) return Status::Ok();
    ARYL_RETURN_IF_ERROR(SnapshotCore());
    return RebuildCore(std::nullopt);
  });
  if (!st.ok()) {
    queues = old;
    return Err(st);
  }
  round_due = true;
  snapshot_dirty = true;
  spdlog::info("queues {} reloaded: {}", opt.queues_file, names);
  p::QueuesReply reply;
  reply.queues = QueueRows();
  return p::Message(reply);
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::ListQueues&) {
  p::QueuesReply reply;
  reply.queues = QueueRows();
  return p::Message(reply);
}

// Q4: one pass over the journal's rows from `since` (oldest first, in pages);
// each job's queue or owner read once from its stored submission.
std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::UsageRequest& m) {
  const double until = m.until > 0 ? m.until : WallNow();
  std::set<std::string> inference;
  for (const auto& [id, n] : nodes)
    if (n.pool == p::Pool::kInference) inference.insert(id);
  const bool by_queue = m.by == "queue";
  Status lookup;
  auto key_of = [&](std::uint64_t job) -> std::string {
    auto live = jobs.find(job);
    std::optional<p::SubmitJob> stored;
    const p::SubmitJob* spec = nullptr;
    if (live != jobs.end()) {
      spec = &live->second.spec;
    } else if (auto rec = store->GetJob(job); rec.ok()) {
      spec = SpecOf(*rec, nullptr, stored);
    } else if (!rec.status().IsNotFound()) {
      lookup = rec.status();
    }
    if (!spec) return "(unknown)";
    if (!by_queue) return spec->owner.value_or("local");
    return queues ? QueueOf(*spec) : spec->queue.value_or("default");
  };
  UsageLedger ledger(m.since, until, key_of, inference);
  EventFilter filter;
  filter.limit = 5000;
  // From the journal's first row, not `since`: a placement that began
  // before the window counts from the window's start.
  for (;;) {
    auto page = store->Events(filter);
    if (!page.ok()) return Err(page.status());
    for (const auto& e : *page) {
      if (e.time > until) break;
      ledger.Add(e);
    }
    if (static_cast<int>(page->size()) < filter.limit || (!page->empty() && page->back().time > until)) break;
    filter.after = page->back().seq;
  }
  if (!lookup.ok()) return Err(lookup);
  p::UsageReply reply;
  reply.since = m.since;
  reply.until = until;
  reply.by = m.by;
  for (const auto& [key, t] : ledger.Finish())
    reply.rows.push_back({key, t.training_gpu_hours, t.loaned_gpu_hours, t.jobs, t.preemptions});
  return p::Message(reply);
}

}  // namespace aryl::daemon
