// The runtime's side of the driven cluster's trained jobs (DrivenCluster::
// Train): what workers that link the runtime do with the generations the
// daemon announces. A generation forms once every member it names runs and
// none is stuck in an older generation's rendezvous, kStartup after it was
// announced; rank 0 then reports a step a second (in the fault successor of
// its generation after a member died); a joiner whose generation has not
// formed within the rendezvous timeout gives up (exit 3, "interrupted"), as
// the real one does. With a total, the formed generation's members end at
// that step (exit 0, "completed").
//
// Pure: time is passed in, and the workers (who runs, exits, messages to the
// daemon) are the cluster's, through Workers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "aryl/protocol/messages.h"

namespace aryl::daemon::testing {

namespace p = aryl::protocol;

class RuntimeModel {
 public:
  static constexpr double kRendezvousTimeout = 30;
  static constexpr double kStartup = 2;  // a new worker's start and rendezvous

  struct Workers {
    std::function<bool(p::WorkerId, std::string* agent)> running;  // and on which agent
    std::function<void(const std::string& agent, p::WorkerId, int code, const std::string& outcome,
                       std::optional<std::int64_t> step)>
        exit;
    std::function<void(const std::string& agent, p::Message)> send;  // rank 0's agent relays it
  };

  void Train(p::JobId job, std::int64_t total_steps, double now);
  // A StartWorkers (with `started`) or NewGeneration of `job` the daemon sent.
  void NoteGeneration(p::JobId job, std::int64_t gen, const std::vector<p::WorkerId>& members,
                      const std::vector<p::WorkerPlacement>* started, double now);
  void Tick(double now, const Workers& workers);

  std::int64_t Formed(p::JobId job) const;
  int GenerationsStarted(p::JobId job) const;
  bool Done(p::JobId job) const;
  std::int64_t FreshStart(p::JobId job) const;
  std::int64_t Step(p::JobId job) const;

 private:
  struct Training {
    std::map<std::int64_t, std::vector<p::WorkerId>> members;  // by generation
    std::map<std::int64_t, double> announced;                  // first seen
    std::map<p::WorkerId, std::int64_t> joined_for;            // started for that generation
    bool trained = false;
    std::int64_t total = 0;  // steps; 0: trains until stopped
    bool done = false;
    std::int64_t fresh = 0;
    std::int64_t formed = 0;
    bool fault = false;  // a member of `formed` died: its survivors regrouped
    std::int64_t step = 0;
    double next_step = 0;
  };
  std::map<p::JobId, Training> training_;
};

}  // namespace aryl::daemon::testing
