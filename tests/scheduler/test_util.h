// Helpers for the scheduling core's tests: small inline throughput tables, a
// cluster builder, and a harness that drives a Scheduler and checks the state's
// invariants after every action of every plan.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "aryl/sched/scheduler.h"
#include "aryl/sched/state.h"
#include "aryl/sched/throughput.h"

namespace aryl::sched::testing {

// "linear": thr(w) = w on A100 (sizes 1..64); "sublinear": diminishing returns;
// "holes": 16 workers not allowed (a 0 cell). T4 runs at half the A100 speed.
inline std::shared_ptr<const ThroughputCatalog> Catalog() {
  auto c = std::make_shared<ThroughputCatalog>();
  const std::vector<int> sizes = {1, 2, 4, 8, 16, 32, 64};
  EXPECT_TRUE(c->AddTable("linear", "A100", {sizes, {1, 2, 4, 8, 16, 32, 64}}).ok());
  EXPECT_TRUE(c->AddTable("sublinear", "A100", {sizes, {1, 1.8, 3.2, 5.6, 9, 14, 20}}).ok());
  EXPECT_TRUE(c->AddTable("holes", "A100", {sizes, {1, 2, 4, 8, 0, 30, 60}}).ok());
  EXPECT_TRUE(c->SetRelativeSpeed("T4", "A100", 0.5).ok());
  return c;
}

inline std::vector<ServerSpec> Servers(int training, int inference, int gpus = 8,
                                       const std::string& type = "A100", ServerId first = 0) {
  std::vector<ServerSpec> out;
  for (int i = 0; i < training + inference; ++i) {
    ServerSpec s;
    s.id = first + i;
    s.name = (i < training ? "train-" : "infer-") + std::to_string(first + i);
    s.pool = i < training ? Pool::kTraining : Pool::kInference;
    s.gpu_type = type;
    s.gpus = gpus;
    out.push_back(s);
  }
  return out;
}

inline JobSpec Inelastic(JobId id, int n, double work = 1000, const std::string& model = "linear") {
  JobSpec j;
  j.id = id;
  j.name = "job-" + std::to_string(id);
  j.kind = JobKind::kInelastic;
  j.min_workers = j.max_workers = n;
  j.model = model;
  j.total_work = work;
  return j;
}

inline JobSpec Elastic(JobId id, int min, int max, double work = 1000,
                       const std::string& model = "linear") {
  JobSpec j = Inelastic(id, min, work, model);
  j.kind = JobKind::kElastic;
  j.max_workers = max;
  return j;
}

inline int Workers(const Placement& p) {
  int n = 0;
  for (const auto& [s, c] : p) n += c;
  return n;
}

inline int Count(const Plan& plan, ActionType type) {
  int n = 0;
  for (const auto& a : plan.actions) n += a.type == type ? 1 : 0;
  return n;
}

// Drives a Scheduler; every applied action is followed by CheckInvariants.
class Harness {
 public:
  explicit Harness(std::vector<ServerSpec> servers, const std::string& policy = "aryl",
                   SchedulerConfig config = {}) {
    auto s = Scheduler::Create(policy, std::move(servers), Catalog(), config);
    EXPECT_TRUE(s.ok()) << s.status();
    sched_ = std::move(s).value();
    sched_->set_action_observer([this](const Action& a, const ClusterState& st) {
      ++actions_;
      Status inv = st.CheckInvariants();
      EXPECT_TRUE(inv.ok()) << inv << " after action on job " << a.job << " (" << a.reason << ")";
    });
  }

  Plan Send(EventBody body, Seconds dt = 0) {
    now_ += dt;
    auto plan = sched_->Handle(Event{now_, std::move(body)});
    EXPECT_TRUE(plan.ok()) << plan.status();
    Status inv = sched_->state().CheckInvariants();
    EXPECT_TRUE(inv.ok()) << inv;
    last_plan_ = plan.ok() ? *plan : Plan{};
    return last_plan_;
  }
  Result<Plan> Try(EventBody body, Seconds dt = 0) {
    return sched_->Handle(Event{now_ + dt, std::move(body)});
  }
  Plan Submit(JobSpec spec, Seconds dt = 0) {
    spec.submit_time = now_ + dt;
    return Send(JobSubmitted{spec}, dt);
  }
  Plan Loan(std::vector<ServerId> ids, Seconds dt = 0) { return Send(ServersLoaned{ids}, dt); }
  Plan ReclaimCount(int k, Seconds dt = 0) {
    Reclaim r;
    r.count = k;
    r.deadline = now_ + dt + 60;
    return Send(r, dt);
  }
  Plan ReclaimNamed(std::vector<ServerId> ids, Seconds dt = 0) {
    Reclaim r;
    r.servers = std::move(ids);
    r.deadline = now_ + dt + 60;
    return Send(r, dt);
  }

  const ClusterState& state() const { return sched_->state(); }
  const JobInfo& job(JobId id) const {
    static const JobInfo kMissing;
    const JobInfo* j = sched_->state().job(id);
    if (!j) ADD_FAILURE() << "job " << id << " unknown";
    return j ? *j : kMissing;
  }
  Scheduler& scheduler() { return *sched_; }
  int actions() const { return actions_; }
  const Plan& last_plan() const { return last_plan_; }
  Seconds now() const { return now_; }

 private:
  std::unique_ptr<Scheduler> sched_;
  Seconds now_ = 0;
  int actions_ = 0;
  Plan last_plan_;
};

}  // namespace aryl::sched::testing
