// Teams: a submission's queue and priority (protocol/queues.h, Q1), the
// queues' listing (Q2) and their Prometheus series. The rules themselves are
// the core's (sched/queues.h); this file only names, checks and reports.
#include <fmt/format.h>

#include "aryl/sched/queue_usage.h"
#include "daemon_impl.h"

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

int Sum(const std::map<std::string, int>& by_type) {
  int n = 0;
  for (const auto& [type, k] : by_type) n += k;
  return n;
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

std::vector<QueueSeries> Daemon::Impl::QueueSeriesNow() const {
  std::vector<QueueSeries> out;
  if (!queues) return out;
  std::vector<s::QueueUsage> usage;
  if (core) usage = s::UsageByQueue(core->state(), *queues, /*elastic=*/true);
  for (std::size_t i = 0; i < queues->queues.size(); ++i) {
    QueueSeries qs;
    qs.queue = queues->queues[i].name;
    qs.quota = Sum(queues->queues[i].quota);
    if (i < usage.size()) {
      const s::QueueUsage& u = usage[i];
      qs.used = Sum(u.used);
      qs.borrowed = Sum(u.borrowed);
      qs.lent = Sum(u.lent);
      qs.loaned = u.loaned;
      qs.running = u.running;
      qs.pending = u.pending;
    }
    out.push_back(std::move(qs));
  }
  return out;
}

std::optional<p::Message> Daemon::Impl::On(const p::ReplyTo&, p::ListQueues&) {
  p::QueuesReply reply;
  reply.queues = QueueRows();
  return p::Message(reply);
}

}  // namespace aryl::daemon
