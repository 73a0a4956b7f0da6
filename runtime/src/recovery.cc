// Fault recovery (aryl/runtime.h, "Faults"): the survivors of a failed
// generation form its successor, retried while members keep failing, and wait
// (bounded) for a large enough generation when too few survive.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <thread>

#include "aryl/protocol/generation.h"
#include "runtime_impl.h"

namespace aryl {

// Waits (bounded) for a generation newer than gen_ that satisfies `wanted`,
// then moves into it as a planned change (or leaves, when not a member).
template <typename Wanted>
Status Runtime::Impl::WaitForGeneration(ElasticState& state, std::chrono::milliseconds timeout,
                                        const std::string& what, Wanted wanted) {
  Go(WorkerEvent::kWait);
  double deadline = RuntimeNow() + std::chrono::duration<double>(timeout).count();
  while (RuntimeNow() < deadline) {
    int64_t latest = 0;
    if (channel_) {
      for (auto& rec : channel_->Poll().generations) gens_[rec.generation] = rec;
      if (!gens_.empty()) latest = gens_.rbegin()->first;
    }
    ARYL_ASSIGN_OR_RETURN(int64_t in_store, store_->Latest());
    latest = std::max(latest, in_store);
    if (latest > gen_) {
      ARYL_ASSIGN_OR_RETURN(auto rec, Record(latest));
      if (wanted(rec)) return PlannedResize(state, latest);
    }
    std::this_thread::sleep_for(opt_.poll_interval);
  }
  Go(WorkerEvent::kTimeOut);  // kFailed: recovery stops retrying
  return Status::Unavailable("no " + what + " after generation " + std::to_string(gen_) +
                             " (world " + std::to_string(world_) + ") within " +
                             std::to_string(timeout.count()) + " ms");
}

// Fault recovery, retried while members keep failing (bounded).
Status Runtime::Impl::RecoverLoop(ElasticState& state, Status cause) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    Status s = Recover(state, cause);
    // A bounded wait that ran out (kFailed) is not retried.
    if (s.ok() || !s.IsRetryable() || phase_ == WorkerPhase::kFailed) return s;
    cause = s;
    fail_time_ = RuntimeNow();
  }
  return cause.WithContext("giving up after 5 recovery attempts");
}

// One attempt (kRecovering): after an abandoned step, a planned resize that
// failed, or a failed attempt.
Status Runtime::Impl::Recover(ElasticState& state, const Status& cause) {
  Go(WorkerEvent::kRecover);
  ResizeReport rep;
  rep.planned = false;
  rep.from_generation = gen_;
  rep.from_world = world_;
  rep.step = state.step();
  double t0 = RuntimeNow();
  rep.detect_s = fail_time_ > 0 ? t0 - fail_time_ : 0.0;
  if (comm_) comm_->Abort();
  comm_.reset();
  if (!store_) return cause.WithContext("no rendezvous store to recover with");
  const std::string base = "g" + std::to_string(gen_) + "/fail/";
  ARYL_RETURN_IF_ERROR(
      store_->Set(base + "member/" + opt_.worker_id, std::to_string(state.step())));
  ARYL_ASSIGN_OR_RETURN(int64_t arrival, store_->Add(base + "count", 1));
  if (arrival == 1) {
    // The first survivor decides who is in: everyone, or whoever arrived
    // before the arrivals settled.
    int64_t last_count = 1;
    double last_change = RuntimeNow();
    double deadline = RuntimeNow() + std::chrono::duration<double>(opt_.rendezvous_timeout).count();
    const double settle = std::chrono::duration<double>(opt_.fault_settle).count();
    while (true) {
      ARYL_ASSIGN_OR_RETURN(int64_t count, store_->Add(base + "count", 0));
      if (count != last_count) {
        last_count = count;
        last_change = RuntimeNow();
      }
      double quiet = RuntimeNow() - last_change;
      if (count >= world_ || (count == world_ - 1 && quiet > std::min(0.1, settle)) ||
          quiet > settle || RuntimeNow() > deadline) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::vector<std::string> survivors;
    for (const auto& id : members_) {
      ARYL_ASSIGN_OR_RETURN(bool in, store_->Check(base + "member/" + id));
      if (in) survivors.push_back(id);
    }
    // The one decider for gen_ numbers its successor (aryl/protocol/generation.h):
    // never from a counter shared with the planner, so a plan made for this
    // fault (a replacement) always outranks it.
    ARYL_ASSIGN_OR_RETURN(int64_t g, protocol::FaultSuccessor(gen_));
    ARYL_RETURN_IF_ERROR(store_->PublishAs(GenerationRecord{g, gen_, survivors}));
    ARYL_RETURN_IF_ERROR(store_->Set(base + "decided", std::to_string(g)));
    spdlog::warn("aryl: gen {} failed ({}); survivors {} form gen {}", gen_, cause.ToString(),
                 survivors.size(), g);
  }
  ARYL_ASSIGN_OR_RETURN(std::string decided,
                        store_->Wait(base + "decided", opt_.rendezvous_timeout));
  int64_t target = 0;
  if (auto [p, ec] = std::from_chars(decided.data(), decided.data() + decided.size(), target);
      ec != std::errc() || p != decided.data() + decided.size()) {
    return Status::Corruption(store_->Key(base + "decided") + ": '" + decided +
                              "' is not a generation number");
  }
  ARYL_ASSIGN_OR_RETURN(auto rec, store_->ReadGeneration(target, opt_.rendezvous_timeout));
  double t_rdv = RuntimeNow();
  rep.rendezvous_s = t_rdv - t0;
  if (std::find(rec.members.begin(), rec.members.end(), opt_.worker_id) == rec.members.end()) {
    // Too late for the survivors' generation (this worker was slow to see
    // the fault). The planner still counts it as alive and includes it in
    // its next plan (a replacement, say): wait for a generation with it.
    spdlog::warn("aryl: {} arrived after generation {} formed without it; waiting for one with it",
                 opt_.worker_id, target);
    return WaitForGeneration(
        state, opt_.rendezvous_timeout, "generation with worker '" + opt_.worker_id + "'",
        [&](const GenerationRecord& r) {
          return std::find(r.members.begin(), r.members.end(), opt_.worker_id) != r.members.end();
        });
  }
  ARYL_RETURN_IF_ERROR(Enter(rec));
  double t_comm = RuntimeNow();
  rep.communicator_s = t_comm - t_rdv;
  ARYL_RETURN_IF_ERROR(SyncState(state));
  rep.transfer_s = RuntimeNow() - t_comm;
  rep.to_generation = gen_;
  rep.to_world = world_;
  rep.total_s = RuntimeNow() - t0 + rep.detect_s;
  rep.step = state.step();
  Report(rep);
  agreed_gen_ = std::max(agreed_gen_, gen_);
  if (world_ < opt_.min_workers) return WaitForWorkers(state);
  Go(WorkerEvent::kJoin);
  return Status::Ok();
}

// Below min_workers: checkpoint, then wait (bounded) for a generation with
// enough members and move into it.
Status Runtime::Impl::WaitForWorkers(ElasticState& state) {
  spdlog::warn("aryl: world {} < min_workers {}: checkpointing and waiting", world_,
               opt_.min_workers);
  if (Status c = CheckpointNow(state); CheckpointManager::IsFenced(c)) return c;
  return WaitForGeneration(
      state, opt_.wait_for_workers,
      "generation of at least " + std::to_string(opt_.min_workers) + " workers",
      [&](const GenerationRecord& r) { return int(r.members.size()) >= opt_.min_workers; });
}

}  // namespace aryl
