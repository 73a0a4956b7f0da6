// What happened to one job's checkpoints in the driven cluster, recorded as
// the runtime model does it, and the invariants over it (aryl-simtest
// --daemon's D6 and D7). The model (runtime_model.h) writes and restores; this
// record only watches, so a model or a daemon that breaks a rule is caught
// here, at the event that breaks it.
//
// A group is a lineage of generations: it begins when a fresh generation (no
// member of an earlier one) forms and restores, and lives on through in-place
// resizes and fault regroups. Its number is that fresh generation's.
//
//   D6 one writer: never two checkpoint writes of the job in progress at once;
//      a write is begun and committed only by the newest group to restore; and
//      no fresh group restores while an older group's write is in progress
//      (the restore would miss it: two live copies of the job).
//   D7 resume from the newest good checkpoint: a fresh group restores the step
//      of the newest checkpoint whose write completed (0 when none), so no
//      step is lost beyond it and the steps trained twice are only those
//      since it; a committed checkpoint's step is never below the newest good
//      one (checkpoint steps only grow).
//
// Pure: time is passed in.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "aryl/protocol/messages.h"

namespace aryl::daemon::testing {

class CheckpointTruth {
 public:
  struct Write {
    std::int64_t group = 0;
    std::int64_t generation = 0;  // the writer's plan generation
    protocol::WorkerId writer = 0;
    std::int64_t step = 0;
    double begun = 0;
    double ends = 0;  // when the write completes, if its writer lives
  };
  struct Violation {
    std::string invariant;  // "D6", "D7"
    std::string what;
  };

  void Begun(const Write& w);
  // The write of `writer` completed and became the newest good checkpoint.
  void Committed(protocol::WorkerId writer, double now);
  // It did not: its writer died (`why`), or the fence refused it.
  void Torn(protocol::WorkerId writer, const std::string& why, double now);
  // A fresh group formed and restored `step` (0: no checkpoint).
  void Restored(std::int64_t group, std::int64_t step, double now);
  void Trained(std::int64_t step);

  const std::vector<Write>& in_progress() const { return in_progress_; }
  std::int64_t newest_good() const { return newest_good_; }
  bool WasGood(std::int64_t step) const { return committed_.count(step) > 0; }
  std::int64_t good() const { return good_; }
  std::int64_t torn() const { return torn_; }
  // The most steps one fresh start trained again.
  std::int64_t most_retrained() const { return most_retrained_; }
  std::vector<Violation> TakeViolations() { return std::exchange(violations_, {}); }

  // A line per write begun, completed or torn and per restore (a trace).
  std::function<void(const std::string&)> on_event;

 private:
  void Note(const std::string& line);
  void Violate(const char* invariant, const std::string& what);
  std::vector<Write>::iterator Find(protocol::WorkerId writer);

  std::vector<Write> in_progress_;
  std::set<std::int64_t> committed_;  // steps
  std::int64_t newest_group_ = 0;  // the newest group to restore
  std::int64_t newest_good_ = 0;   // step
  std::int64_t trained_ = 0;       // the highest step trained
  std::int64_t good_ = 0, torn_ = 0, most_retrained_ = 0;
  std::vector<Violation> violations_;
};

}  // namespace aryl::daemon::testing
