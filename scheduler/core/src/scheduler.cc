#include "aryl/sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "aryl/sched/policy.h"
#include "aryl/sched/reclaim.h"
#include "aryl/sched/state.h"
#include "aryl/sched/throughput.h"

namespace aryl::sched {

struct Scheduler::Impl {
  std::string name;
  SchedulerConfig config;
  std::unique_ptr<Policy> policy;
  std::optional<ClusterState> state;
  ActionObserver observer;

  // The one way a Scheduler is put together (Create, Restore).
  static std::unique_ptr<Scheduler> Assemble(const std::string& name, const SchedulerConfig& config,
                                             std::unique_ptr<Policy> policy, ClusterState state) {
    std::unique_ptr<Scheduler> s(new Scheduler());
    s->impl_->name = name;
    s->impl_->config = config;
    s->impl_->policy = std::move(policy);
    s->impl_->state.emplace(std::move(state));
    return s;
  }

  Status Validate(const Event& e) const;
  Status ApplyOne(const Action& a, Plan* plan);
  // Returns draining servers that are empty; makes jobs that will not finish
  // in time leave the others (see SchedulerConfig::reclaim_lets_jobs_finish).
  Status SettleDraining(Plan* plan);
  Status OrderAndApply(std::vector<Action> actions, Plan* plan);
};

Scheduler::Scheduler() : impl_(std::make_unique<Impl>()) {}
Scheduler::~Scheduler() = default;

Result<std::unique_ptr<Scheduler>> Scheduler::Create(const std::string& policy,
                                                     std::vector<ServerSpec> servers,
                                                     std::shared_ptr<const ThroughputCatalog> thr,
                                                     SchedulerConfig config) {
  ARYL_ASSIGN_OR_RETURN(auto p, MakePolicy(policy, config));
  ARYL_ASSIGN_OR_RETURN(auto state, ClusterState::Create(std::move(servers), std::move(thr), config));
  return Impl::Assemble(policy, config, std::move(p), std::move(state));
}

Scheduler::Image Scheduler::Snapshot() const { return {impl_->state->Image(), impl_->policy->SaveState()}; }
void Scheduler::SnapshotInto(Image& image) const {
  impl_->state->ImageInto(image.state);
  image.policy_state = impl_->policy->SaveState();
}

Result<std::unique_ptr<Scheduler>> Scheduler::Restore(const std::string& policy, Image image,
                                                      std::shared_ptr<const ThroughputCatalog> thr,
                                                      SchedulerConfig config) {
  ARYL_ASSIGN_OR_RETURN(auto p, MakePolicy(policy, config));
  ARYL_RETURN_IF_ERROR(p->LoadState(image.policy_state));
  ARYL_ASSIGN_OR_RETURN(auto state, ClusterState::FromImage(std::move(image.state), std::move(thr), config));
  return Impl::Assemble(policy, config, std::move(p), std::move(state));
}

Result<std::unique_ptr<Policy>> Scheduler::ForgetEnded() {
  ARYL_ASSIGN_OR_RETURN(std::unique_ptr<Policy> p, MakePolicy(impl_->name, impl_->config));
  ARYL_RETURN_IF_ERROR(p->LoadState(impl_->policy->SaveState()));
  impl_->state->ForgetEnded();
  std::swap(impl_->policy, p);
  return std::move(p);
}

const ClusterState& Scheduler::state() const { return *impl_->state; }
Status Scheduler::AddServer(const ServerSpec& spec) { return impl_->state->AddServer(spec); }
Status Scheduler::RefreshSpeed(Seconds time, JobId job) {
  ClusterState& st = *impl_->state;
  if (!std::isfinite(time) || time < st.now()) {
    return Status::InvalidArgument("speed refresh at " + std::to_string(time) + ", before now (" +
                                   std::to_string(st.now()) + ")");
  }
  ARYL_RETURN_IF_ERROR(st.AdvanceTo(time));
  return st.RefreshCurves(job);
}
const std::string& Scheduler::policy_name() const { return impl_->name; }
const SchedulerConfig& Scheduler::config() const { return impl_->config; }
bool Scheduler::elastic() const { return impl_->policy->elastic(); }
Seconds Scheduler::NextWakeup() const {
  Seconds t = impl_->policy->next_wakeup();
  // A job left to finish on a reclaimed server leaves (checkpointed) at the
  // deadline minus its checkpoint time should it not be done by then.
  const ClusterState& st = *impl_->state;
  for (ServerId sid : st.draining()) {
    const ServerInfo& s = *st.server(sid);
    for (const auto& [jid, n] : s.jobs) {
      t = std::min(t, s.return_by - impl_->config.CheckpointSeconds(st.job(jid)->spec.state_bytes));
    }
  }
  return t;
}
std::vector<PendingReason> Scheduler::WhyPending(const std::vector<JobId>& jobs) const {
  return sched::WhyPending(*impl_->state, *impl_->policy, jobs);
}
void Scheduler::set_action_observer(ActionObserver observer) {
  impl_->observer = std::move(observer);
}

namespace {

Status ActiveJob(const ClusterState& state, JobId id) {
  const JobInfo* j = state.job(id);
  if (!j) return Status::NotFound("job " + std::to_string(id) + ": unknown job id");
  if (j->status == JobStatus::kFinished || j->status == JobStatus::kCancelled) {
    return Status::FailedPrecondition("job " + std::to_string(id) +
                                      ": already finished or cancelled");
  }
  return Status::Ok();
}

int Total(const Placement& p) {
  int n = 0;
  for (const auto& [s, c] : p) n += c;
  return n;
}

}  // namespace

Status Scheduler::Impl::Validate(const Event& e) const {
  const ClusterState& st = *state;
  if (!std::isfinite(e.time) || e.time < st.now()) {
    return Status::InvalidArgument("event time " + std::to_string(e.time) + " is before now (" +
                                   std::to_string(st.now()) + ")");
  }
  return std::visit(
      [&](const auto& body) -> Status {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, JobSubmitted>) {
          return st.ValidateJob(body.spec);
        } else if constexpr (std::is_same_v<T, JobFinished> || std::is_same_v<T, JobCancelled> ||
                             std::is_same_v<T, JobRescaleKnown>) {
          return ActiveJob(st, body.job);
        } else if constexpr (std::is_same_v<T, JobProgress>) {
          ARYL_RETURN_IF_ERROR(ActiveJob(st, body.job));
          if (!(body.remaining_work >= 0) || std::isinf(body.remaining_work)) {
            return Status::InvalidArgument("job " + std::to_string(body.job) +
                                           ": remaining_work must be >= 0, got " +
                                           std::to_string(body.remaining_work));
          }
          return Status::Ok();
        } else if constexpr (std::is_same_v<T, JobResizeMeasured>) {
          ARYL_RETURN_IF_ERROR(ActiveJob(st, body.job));
          if (!(body.pause >= 0) || std::isinf(body.pause)) {
            return Status::InvalidArgument("job " + std::to_string(body.job) +
                                           ": measured resize pause must be finite and >= 0, got " +
                                           std::to_string(body.pause));
          }
          return Status::Ok();
        } else if constexpr (std::is_same_v<T, ServersLoaned>) {
          if (body.servers.empty()) return Status::InvalidArgument("loan of no servers");
          std::set<ServerId> seen;
          for (ServerId id : body.servers) {
            const ServerInfo* s = st.server(id);
            if (!s) return Status::NotFound("loan of unknown server " + std::to_string(id));
            if (s->spec.pool != Pool::kInference) {
              return Status::InvalidArgument("loan of server " + std::to_string(id) +
                                             ", a training server");
            }
            if (s->state != ServerState::kHeld) {
              return Status::FailedPrecondition("loan of server " + std::to_string(id) +
                                                ", already loaned");
            }
            if (s->failed) {
              return Status::FailedPrecondition("loan of server " + std::to_string(id) +
                                                ", which failed");
            }
            if (!seen.insert(id).second) {
              return Status::InvalidArgument("loan names server " + std::to_string(id) + " twice");
            }
          }
          return Status::Ok();
        } else if constexpr (std::is_same_v<T, Reclaim>) {
          return ValidateReclaim(st, body);
        } else if constexpr (std::is_same_v<T, ServerFailed>) {
          const ServerInfo* s = st.server(body.server);
          if (!s) return Status::NotFound("failure of unknown server " + std::to_string(body.server));
          if (s->failed) {
            return Status::FailedPrecondition("server " + std::to_string(body.server) +
                                              " already failed");
          }
          return Status::Ok();
        } else if constexpr (std::is_same_v<T, ServerRecovered>) {
          const ServerInfo* s = st.server(body.server);
          if (!s) {
            return Status::NotFound("recovery of unknown server " + std::to_string(body.server));
          }
          if (!s->failed) {
            return Status::FailedPrecondition("server " + std::to_string(body.server) +
                                              " has not failed");
          }
          return Status::Ok();
        } else if constexpr (std::is_same_v<T, ServerCordoned>) {
          if (!st.server(body.server))
            return Status::NotFound("cordon of unknown server " + std::to_string(body.server));
          return Status::Ok();
        } else {
          return Status::Ok();
        }
      },
      e.body);
}

Status Scheduler::Impl::ApplyOne(const Action& a, Plan* plan) {
  ARYL_RETURN_IF_ERROR(state->Apply(a));
  plan->actions.push_back(a);
  if (observer) observer(plan->actions.back(), *state);
  return Status::Ok();
}

Status Scheduler::Impl::SettleDraining(Plan* plan) {
  ClusterState& st = *state;
  if (st.draining().empty()) return Status::Ok();
  const std::vector<ServerId> draining = st.draining();
  for (ServerId sid : draining) {
    const ServerInfo& s = *st.server(sid);
    if (s.used > 0) {
      // Jobs no longer due to finish in time (a slipped estimate, or the
      // deadline minus their checkpoint time reached) leave now, checkpointed
      // when that still fits; the others stay.
      const Seconds notice = std::max(0.0, s.return_by - st.now());
      std::vector<Action> actions;
      int shrinks = 0;
      const ReclaimCost cost =
          CostOfReturning(st, {sid}, &actions, &shrinks, policy->elastic(), notice);
      ReclaimRecord& r = st.mutable_reclaim(s.reclaim_record);
      r.preemptions += cost.preemptions;
      r.shrinks += shrinks;
      for (auto& a : actions) {
        a.reason += " (not done by the deadline)";
        ARYL_RETURN_IF_ERROR(ApplyOne(a, plan));
      }
    }
    if (st.server(sid)->used == 0) {
      Action a;
      a.type = ActionType::kReturnServer;
      a.server = sid;
      a.reason = "reclaim: return (jobs left to finish are done)";
      ARYL_RETURN_IF_ERROR(ApplyOne(a, plan));
    }
  }
  return Status::Ok();
}

// Applies a policy's actions in an order the driver can execute: frees first,
// then whatever fits, repeatedly. A resize stuck in a cycle (it needs GPUs that
// another stuck action frees) is split into its shrink part first when that is
// an allowed size; what still cannot be applied is dropped (the state stays
// consistent; the next event's round tries again).
Status Scheduler::Impl::OrderAndApply(std::vector<Action> actions, Plan* plan) {
  auto rank = [&](const Action& a) {
    switch (a.type) {
      case ActionType::kPreempt: return 0;
      case ActionType::kResize: {
        const JobInfo* j = state->job(a.job);
        return j && Total(a.placement) < j->workers ? 1 : 2;
      }
      case ActionType::kReturnServer: return 1;
      case ActionType::kStart: return 3;
    }
    return 4;
  };
  std::stable_sort(actions.begin(), actions.end(),
                   [&](const Action& a, const Action& b) { return rank(a) < rank(b); });
  std::vector<Action> pending = std::move(actions);
  while (!pending.empty()) {
    bool progress = false;
    std::vector<Action> next;
    for (auto& a : pending) {
      if (state->CanApply(a).ok()) {
        ARYL_RETURN_IF_ERROR(ApplyOne(a, plan));
        progress = true;
      } else {
        next.push_back(std::move(a));
      }
    }
    pending = std::move(next);
    if (progress || pending.empty()) continue;
    // Stuck: split one resize into its shrink part.
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if (it->type != ActionType::kResize) continue;
      const JobInfo* j = state->job(it->job);
      if (!j) continue;
      Action shrink = *it;
      shrink.placement.clear();
      for (const auto& [sid, n] : j->placement) {
        auto f = it->placement.find(sid);
        if (f != it->placement.end()) shrink.placement[sid] = std::min(n, f->second);
      }
      shrink.reason += " (shrink part)";
      if (!shrink.placement.empty() && shrink.placement != j->placement &&
          state->CanApply(shrink).ok()) {
        ARYL_RETURN_IF_ERROR(ApplyOne(shrink, plan));
        progress = true;
        break;
      }
    }
    if (!progress) break;  // drop the rest
  }
  return Status::Ok();
}

Result<Plan> Scheduler::Handle(const Event& event) {
  ARYL_ASSIGN_OR_RETURN(Plan plan, Apply(event));
  ARYL_RETURN_IF_ERROR(impl_->OrderAndApply(impl_->policy->Schedule(*impl_->state), &plan));
  ARYL_RETURN_IF_ERROR(impl_->SettleDraining(&plan));
  return plan;
}

Result<Plan> Scheduler::Apply(const Event& event) {
  Impl& m = *impl_;
  ClusterState& st = *m.state;
  ARYL_RETURN_IF_ERROR(m.Validate(event));
  ARYL_RETURN_IF_ERROR(st.AdvanceTo(event.time));
  Plan plan;
  Status status = std::visit(
      [&](const auto& body) -> Status {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, JobSubmitted>) {
          return st.AddJob(body.spec);
        } else if constexpr (std::is_same_v<T, JobFinished>) {
          return st.FinishJob(body.job);
        } else if constexpr (std::is_same_v<T, JobCancelled>) {
          return st.CancelJob(body.job);
        } else if constexpr (std::is_same_v<T, JobProgress>) {
          return st.SetRemainingWork(body.job, body.remaining_work);
        } else if constexpr (std::is_same_v<T, JobRescaleKnown>) {
          return st.SetRescale(body.job, body.rescale);
        } else if constexpr (std::is_same_v<T, JobResizeMeasured>) {
          return st.SetMeasuredPause(body.job, body.pause);
        } else if constexpr (std::is_same_v<T, ServersLoaned>) {
          for (ServerId id : body.servers) ARYL_RETURN_IF_ERROR(st.LoanServer(id));
          return Status::Ok();
        } else if constexpr (std::is_same_v<T, Reclaim>) {
          ARYL_ASSIGN_OR_RETURN(ReclaimDecision d,
                                DecideReclaim(st, body, m.policy->reclaim_strategy(),
                                              m.config.seed, m.policy->elastic()));
          ReclaimRecord r;
          r.time = event.time;
          r.deadline = std::max(body.deadline, event.time);
          r.requested = static_cast<int>(d.servers.size());
          r.preemptions = d.cost.preemptions;
          r.shrinks = d.shrinks;
          r.left_to_finish = static_cast<int>(d.left.size());
          st.RecordReclaim(std::move(r));
          // Every chosen server drains until returned: the returns in the
          // plan complete the record, the waiting ones later (SettleDraining).
          const int record = static_cast<int>(st.reclaims().size()) - 1;
          for (ServerId sid : d.servers) {
            ARYL_RETURN_IF_ERROR(st.MarkDraining(sid, st.reclaims().back().deadline, record));
          }
          for (const auto& a : d.actions) ARYL_RETURN_IF_ERROR(m.ApplyOne(a, &plan));
          return Status::Ok();
        } else if constexpr (std::is_same_v<T, ServerFailed>) {
          std::vector<Action> actions;
          CostOfReturning(st, {body.server}, &actions, nullptr, m.policy->elastic());
          for (auto& a : actions) {
            a.reason = body.cause + (a.type == ActionType::kPreempt ? ": preempt" : ": shrink");
            ARYL_RETURN_IF_ERROR(m.ApplyOne(a, &plan));
          }
          return st.MarkFailed(body.server);
        } else if constexpr (std::is_same_v<T, ServerRecovered>) {
          return st.MarkRecovered(body.server);
        } else if constexpr (std::is_same_v<T, ServerCordoned>) {
          return st.SetCordoned(body.server, body.cordoned);
        } else {
          return Status::Ok();  // Tick
        }
      },
      event.body);
  if (!status.ok()) return Status::Internal("applying a validated event failed: " + status.ToString());
  ARYL_RETURN_IF_ERROR(m.SettleDraining(&plan));
  return plan;
}

}  // namespace aryl::sched
