// Scheduler::Snapshot / Restore: a restored scheduler plans exactly as the
// original from the snapshot on (the daemon's journal keeps a snapshot and the
// events after it instead of the whole history).
#include <random>

#include "aryl/sched/policy.h"
#include "test_util.h"

namespace aryl::sched::testing {
namespace {

// Every field of two images, exactly (doubles compared bit for bit).
void ExpectSameImage(const StateImage& a, const StateImage& b) {
  EXPECT_EQ(a.now, b.now);
  ASSERT_EQ(a.servers.size(), b.servers.size());
  for (size_t i = 0; i < a.servers.size(); ++i) {
    const auto &x = a.servers[i], &y = b.servers[i];
    EXPECT_EQ(x.spec.id, y.spec.id);
    EXPECT_EQ(x.spec.name, y.spec.name);
    EXPECT_EQ(x.state, y.state);
    EXPECT_EQ(x.failed, y.failed);
    EXPECT_EQ(x.cordoned, y.cordoned);
    EXPECT_EQ(x.type, y.type);
    EXPECT_EQ(x.used, y.used);
    EXPECT_EQ(x.jobs, y.jobs);
    EXPECT_EQ(x.busy_gpu_seconds, y.busy_gpu_seconds);
    EXPECT_EQ(x.loaned_seconds, y.loaned_seconds);
  }
  ASSERT_EQ(a.jobs.size(), b.jobs.size());
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    const auto &x = a.jobs[i], &y = b.jobs[i];
    SCOPED_TRACE("job " + std::to_string(x.spec.id));
    EXPECT_EQ(x.spec.id, y.spec.id);
    EXPECT_EQ(x.status, y.status);
    EXPECT_EQ(x.placement, y.placement);
    EXPECT_EQ(x.workers, y.workers);
    EXPECT_EQ(x.base_workers, y.base_workers);
    EXPECT_EQ(x.requested_workers, y.requested_workers);
    EXPECT_EQ(x.remaining_work, y.remaining_work);
    EXPECT_EQ(x.paused_until, y.paused_until);
    EXPECT_EQ(x.checkpoint_time, y.checkpoint_time);
    EXPECT_EQ(x.checkpoint_remaining, y.checkpoint_remaining);
    EXPECT_EQ(x.throughput, y.throughput);
    EXPECT_EQ(x.queued_since, y.queued_since);
    EXPECT_EQ(x.suspended, y.suspended);
    EXPECT_EQ(x.stats.gpu_seconds, y.stats.gpu_seconds);
    EXPECT_EQ(x.stats.run_time, y.stats.run_time);
    EXPECT_EQ(x.stats.preemptions, y.stats.preemptions);
    EXPECT_EQ(x.stats.rescales, y.stats.rescales);
    EXPECT_EQ(x.stats.lost_work, y.stats.lost_work);
    EXPECT_EQ(x.curves, y.curves);
  }
  EXPECT_EQ(a.reclaims.size(), b.reclaims.size());
}

std::string PlanText(const Plan& p) {
  std::string out;
  for (const auto& a : p.actions) {
    out += std::to_string(static_cast<int>(a.type)) + " j" + std::to_string(a.job) + " s" + std::to_string(a.server);
    for (const auto& [sid, n] : a.placement) out += " " + std::to_string(sid) + ":" + std::to_string(n);
    out += (a.suspend ? " suspend " : " ") + a.reason + "\n";
  }
  return out;
}

// A random but valid event for `s`: submissions, finishes, progress, server
// failures and recoveries, cordons, loans and reclaims, ticks.
Event RandomEvent(const Scheduler& s, std::mt19937& rng, double t, JobId* next_job) {
  const ClusterState& st = s.state();
  std::vector<JobId> active(st.running().begin(), st.running().end());
  active.insert(active.end(), st.queued().begin(), st.queued().end());
  int kind = static_cast<int>(rng() % 10);
  if (kind <= 2 || active.empty()) {
    JobId id = (*next_job)++;
    int n = 1 + static_cast<int>(rng() % 8);
    JobSpec spec = rng() % 2 ? Elastic(id, 1, n, 50 + rng() % 500) : Inelastic(id, n, 50 + rng() % 500);
    spec.submit_time = t;
    return {t, JobSubmitted{spec}};
  }
  if (kind <= 4) return {t, JobFinished{active[rng() % active.size()]}};
  if (kind == 5) return {t, JobProgress{active[rng() % active.size()], double(rng() % 300)}};
  const auto& servers = st.servers();
  const ServerInfo& sv = servers[rng() % servers.size()];
  if (kind == 6) return {t, sv.failed ? EventBody(ServerRecovered{sv.spec.id}) : EventBody(ServerFailed{sv.spec.id})};
  if (kind == 7) {
    auto held = st.HeldServers();
    std::erase_if(held, [&](ServerId id) { return st.server(id)->failed; });
    if (!held.empty()) return {t, ServersLoaned{{held[rng() % held.size()]}}};
  }
  if (kind == 8 && !st.LoanedServers().empty()) return {t, Reclaim{1, {}, t + 30}};
  // Cordons lifted more often than placed, so that the cluster keeps room.
  if (kind == 9 && (sv.cordoned || rng() % 3 == 0)) return {t, ServerCordoned{sv.spec.id, !sv.cordoned}};
  return {t, Tick{}};
}

class SnapshotTest : public ::testing::TestWithParam<std::string> {};

// 300 random events; a snapshot after 150; the original and the restored
// scheduler then get the same 150 events: same plans, same state, bit for bit.
TEST_P(SnapshotTest, RestoredSchedulerPlansAsTheOriginal) {
  SchedulerConfig cfg;
  cfg.checkpoint_interval = 20;
  auto made = Scheduler::Create(GetParam(), Servers(6, 3), Catalog(), cfg);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto& a = *made;
  std::mt19937 rng(11);
  JobId next_job = 1;
  double t = 0;
  for (int i = 0; i < 150; ++i) {
    t += (rng() % 100) / 10.0;
    ASSERT_TRUE(a->Handle(RandomEvent(*a, rng, t, &next_job)).ok());
  }
  auto image = a->Snapshot();
  EXPECT_LT(image.state.jobs.size(), next_job - 1) << "ended jobs are not part of the image";
  auto restored = Scheduler::Restore(GetParam(), image, Catalog(), cfg);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  auto& b = *restored;
  ExpectSameImage(a->state().Image(), b->state().Image());
  EXPECT_EQ(a->NextWakeup(), b->NextWakeup());
  int actions = 0;
  for (int i = 0; i < 150; ++i) {
    t += (rng() % 100) / 10.0;
    Event e = RandomEvent(*a, rng, t, &next_job);
    auto pa = a->Handle(e);
    auto pb = b->Handle(e);
    ASSERT_EQ(pa.ok(), pb.ok()) << "event " << i;
    if (!pa.ok()) continue;
    ASSERT_EQ(PlanText(*pa), PlanText(*pb)) << "event " << i;
    actions += static_cast<int>(pa->actions.size());
    ASSERT_EQ(a->NextWakeup(), b->NextWakeup());
  }
  EXPECT_GT(actions, 20) << "the events made the policy act";
  ExpectSameImage(a->state().Image(), b->state().Image());
  EXPECT_TRUE(b->state().CheckInvariants().ok());
}

// As above, three schedulers from the same 150 events: the original, its
// restored copy, and one that forgot its ended jobs in place (ForgetEnded,
// what the daemon does at a snapshot); the last is the restored copy's equal,
// and all three plan alike from then on, through two more ForgetEnded.
TEST_P(SnapshotTest, ForgetEndedIsTheRestoredCopy) {
  SchedulerConfig cfg;
  cfg.checkpoint_interval = 20;
  auto made_a = Scheduler::Create(GetParam(), Servers(6, 3), Catalog(), cfg);
  auto made_c = Scheduler::Create(GetParam(), Servers(6, 3), Catalog(), cfg);
  ASSERT_TRUE(made_a.ok() && made_c.ok());
  auto& a = *made_a;
  auto& c = *made_c;
  std::mt19937 rng(17);
  JobId next_job = 1;
  double t = 0;
  for (int i = 0; i < 150; ++i) {
    t += (rng() % 100) / 10.0;
    Event e = RandomEvent(*a, rng, t, &next_job);
    ASSERT_TRUE(a->Handle(e).ok());
    ASSERT_TRUE(c->Handle(e).ok());
  }
  auto restored = Scheduler::Restore(GetParam(), a->Snapshot(), Catalog(), cfg);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  auto& b = *restored;
  const auto log_id = c->state().queue_log_id();
  ASSERT_TRUE(c->ForgetEnded().ok());
  EXPECT_NE(c->state().queue_log_id(), log_id) << "policies' queue orders start again";
  EXPECT_TRUE(c->state().queue_log().empty());
  EXPECT_EQ(c->state().jobs().size(), b->state().jobs().size()) << "ended jobs forgotten";
  EXPECT_LT(c->state().jobs().size(), a->state().jobs().size());
  ExpectSameImage(b->state().Image(), c->state().Image());
  EXPECT_EQ(b->Snapshot().policy_state, c->Snapshot().policy_state);
  EXPECT_TRUE(c->state().CheckInvariants().ok());
  for (JobId id = 1; id < next_job; ++id) {
    const JobInfo* x = b->state().job(id);
    const JobInfo* y = c->state().job(id);
    ASSERT_EQ(x == nullptr, y == nullptr) << "job " << id;
    if (x) {
      EXPECT_EQ(x->queue, y->queue);
    }
  }
  int actions = 0;
  for (int i = 0; i < 150; ++i) {
    t += (rng() % 100) / 10.0;
    Event e = RandomEvent(*a, rng, t, &next_job);
    auto pa = a->Handle(e);
    auto pb = b->Handle(e);
    auto pc = c->Handle(e);
    ASSERT_EQ(pa.ok(), pb.ok()) << "event " << i;
    ASSERT_EQ(pa.ok(), pc.ok()) << "event " << i;
    if (!pa.ok()) continue;
    ASSERT_EQ(PlanText(*pa), PlanText(*pb)) << "event " << i;
    ASSERT_EQ(PlanText(*pa), PlanText(*pc)) << "event " << i;
    actions += static_cast<int>(pa->actions.size());
    ASSERT_EQ(a->NextWakeup(), c->NextWakeup());
    if (i == 50 || i == 100) {
      ASSERT_TRUE(c->ForgetEnded().ok());
      ExpectSameImage(a->state().Image(), c->state().Image());
    }
  }
  EXPECT_GT(actions, 20) << "the events made the policy act";
  ExpectSameImage(b->state().Image(), c->state().Image());
  EXPECT_TRUE(c->state().CheckInvariants().ok());
}

// A driver keeps its last image and takes the next into it (the daemon's
// snapshots): each take equals a fresh image, whether the kept one held more
// jobs, fewer, or other jobs at the same places (another scheduler's).
TEST_P(SnapshotTest, AnImageTakenIntoAKeptOneIsAFreshImage) {
  SchedulerConfig cfg;
  cfg.checkpoint_interval = 20;
  auto made_a = Scheduler::Create(GetParam(), Servers(6, 3), Catalog(), cfg);
  auto made_o = Scheduler::Create(GetParam(), Servers(6, 3), Catalog(), cfg);
  ASSERT_TRUE(made_a.ok() && made_o.ok());
  auto& a = *made_a;
  auto& other = *made_o;
  std::mt19937 rng(23), rng_other(29);
  JobId next_job = 1, next_other = 1;
  double t = 0;
  Scheduler::Image kept;
  int takes = 0, shrank = 0, grew = 0;
  for (int i = 0; i < 200; ++i) {
    t += (rng() % 100) / 10.0;
    ASSERT_TRUE(a->Handle(RandomEvent(*a, rng, t, &next_job)).ok());
    ASSERT_TRUE(other->Handle(RandomEvent(*other, rng_other, t, &next_other)).ok());
    if (i % 7 != 0) continue;
    // Alternately the other scheduler's image and this one's into the same memory.
    Scheduler& s = (i / 7) % 2 == 0 ? *a : *other;
    const std::size_t before = kept.state.jobs.size();
    s.SnapshotInto(kept);
    const Scheduler::Image fresh = s.Snapshot();
    shrank += kept.state.jobs.size() < before;
    grew += kept.state.jobs.size() > before;
    ++takes;
    SCOPED_TRACE("take at event " + std::to_string(i));
    ExpectSameImage(fresh.state, kept.state);
    EXPECT_EQ(fresh.policy_state, kept.policy_state);
    for (std::size_t j = 0; j < fresh.state.jobs.size() && j < kept.state.jobs.size(); ++j) {
      const JobSpec &x = fresh.state.jobs[j].spec, &y = kept.state.jobs[j].spec;
      EXPECT_EQ(x.name, y.name);
      EXPECT_EQ(x.model, y.model);
      EXPECT_EQ(x.kind, y.kind);
      EXPECT_EQ(x.min_workers, y.min_workers);
      EXPECT_EQ(x.max_workers, y.max_workers);
      EXPECT_EQ(x.total_work, y.total_work);
      EXPECT_EQ(x.gpu_types, y.gpu_types);
      EXPECT_EQ(x.queue, y.queue);
    }
    // The kept image restores the same scheduler as a fresh one.
    auto restored = Scheduler::Restore(GetParam(), kept, Catalog(), cfg);
    ASSERT_TRUE(restored.ok()) << restored.status().ToString();
    ExpectSameImage(fresh.state, (*restored)->state().Image());
  }
  EXPECT_GT(takes, 20);
  EXPECT_GT(shrank, 0) << "some take went into a larger kept image";
  EXPECT_GT(grew, 0) << "some take went into a smaller kept image";
}

INSTANTIATE_TEST_SUITE_P(Policies, SnapshotTest, ::testing::Values("aryl", "baseline", "tiresias", "optimus"));

// An image whose bookkeeping disagrees (a server that does not record the
// workers a job has on it) is refused with the reason, not restored.
TEST(SnapshotBadImage, InconsistentImageIsCorruption) {
  auto made = Scheduler::Create("aryl", Servers(2, 0), Catalog());
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE((*made)->Handle({1, JobSubmitted{Inelastic(1, 4)}}).ok());
  auto image = (*made)->Snapshot();
  ASSERT_EQ(image.state.jobs.size(), 1u);
  ASSERT_EQ(image.state.jobs[0].status, JobStatus::kRunning);
  for (auto& s : image.state.servers) s.jobs.clear(), s.used = 0;
  auto restored = Scheduler::Restore("aryl", image, Catalog());
  ASSERT_FALSE(restored.ok());
  EXPECT_TRUE(restored.status().IsCorruption()) << restored.status().ToString();
  EXPECT_NE(restored.status().message().find("job 1"), std::string::npos) << restored.status().ToString();
}

// A policy without state refuses a state it did not write.
TEST(SnapshotBadImage, StatelessPolicyRefusesPolicyState) {
  auto made = Scheduler::Create("aryl", Servers(1, 0), Catalog());
  ASSERT_TRUE(made.ok());
  auto image = (*made)->Snapshot();
  image.policy_state = "1 inf\n";
  auto restored = Scheduler::Restore("aryl", image, Catalog());
  ASSERT_FALSE(restored.ok());
  EXPECT_TRUE(restored.status().IsCorruption());
}

}  // namespace
}  // namespace aryl::sched::testing
