// The checkpoint side of aryl-simtest --daemon (daemon_sim.h): the `ckpt`
// fault, kills timed to land inside a checkpoint write, and D6 and D7 as the
// job's CheckpointTruth found them (simtest/driven/checkpoint_truth.h), plus
// the daemon's own record of the job's newest checkpoint (describe job),
// which must name a checkpoint that became good and, within one scheduler
// process, never go back.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "driven_cluster.h"

namespace aryl::simtest {

class CheckpointFaults {
 public:
  // A kill armed at `at` (virtual s) for the first write begun since,
  // landing `frac` of the way through it.
  struct Armed {
    double at = 0, frac = 0;
    int kind = 0;     // 0: SIGKILL the writer, 1: another worker, 2: crash the writer's agent
    double down = 0;  // kind 2: s until a new agent process starts
  };
  static constexpr const char* kKinds[] = {"SIGKILL its writer", "SIGKILL another worker",
                                           "crash its writer's agent"};
  // `later` puts a step on the run's plan (virtual s since the start).
  using Later = std::function<void(double at, std::string what, std::function<void()> fn)>;

  CheckpointFaults(daemon::testing::DrivenCluster& c, protocol::JobId job, Later later,
                   std::function<void(const std::string&)> trace);

  void Arm(const Armed& a) { armed_.push_back(a); }
  // Each tick: aims the armed kills at the writes begun.
  void Aim();
  // After each tick: D6 and D7 (each second also the daemon's record).
  std::vector<daemon::testing::CheckpointTruth::Violation> Check();
  // A new scheduler process knows only what it journaled.
  void SchedulerRestarted() { daemon_seen_ = 0; }
  std::int64_t kills() const { return kills_; }

 private:
  double Now() const { return c_.now() - daemon::testing::DrivenCluster::kT0; }
  void Tear(const Armed& a, protocol::WorkerId writer, double begun);

  daemon::testing::DrivenCluster& c_;
  protocol::JobId job_;
  Later later_;
  std::function<void(const std::string&)> trace_;
  std::vector<Armed> armed_;
  std::int64_t kills_ = 0;
  std::int64_t ticks_ = 0;
  std::int64_t daemon_seen_ = 0;  // the newest step the running scheduler showed
  bool back_said_ = false, never_said_ = false;  // each said once a run
};

}  // namespace aryl::simtest
