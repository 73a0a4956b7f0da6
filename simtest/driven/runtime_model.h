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
// Checkpoints (Train's `every` > 0), as the runtime writes them
// (runtime/include/aryl/checkpoint.h, runtime.h): rank 0 of the formed
// generation writes one after every `every`-th step, and when it is stopped
// (a StopWorkers: its checkpoint before it exits, SIGKILLed at the stop's
// grace). A write takes `seconds` of virtual time, during which its group
// trains no step (the runtime writes at the step boundary); it becomes the
// newest good checkpoint only when it completes with its writer alive, and
// is then reported to the daemon (CheckpointReport through rank 0's agent).
// A writer killed mid-write leaves the previous one. A fresh group (no
// member of an earlier generation) restores the newest good checkpoint when
// it forms and trains on from its step; with checkpoints off, from the step
// the job had reached. CheckpointTruth records all of it.
//
// The files and the fence are the runtime's own (aryl::CheckpointManager,
// the runtime's translation unit, keep 3) in the job's directory on a
// MemoryCheckpointFs: as each worker's manager does, a write is fenced at
// its writer's generation and a restore raises the fence to the fresh
// group's generation (RaiseFence) before LoadLatest. The fence (the newest
// generation that restored or committed) refuses a stale group's commit;
// that worker then fails (exit 1, "failed", no report). A fence that cannot
// be raised (a full disk with nothing older to remove) fails rank 0's start:
// the group does not form. A write the manager
// fails (a full disk after making room, an I/O error) leaves the newest good
// checkpoint; rank 0 logs it, reports it to the daemon as the runtime does
// (a CheckpointReport whose error is the Status, its path the directory)
// and trains on; a stopping writer stops all the same. A restore skips the
// files that fail their checks.
//
// Pure: time is passed in, and the workers (who runs, exits, messages to the
// daemon) are the cluster's, through Workers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aryl/checkpoint.h"
#include "aryl/protocol/messages.h"
#include "checkpoint_truth.h"
#include "memory_checkpoint_fs.h"

namespace aryl::daemon::testing {

namespace p = aryl::protocol;

// How a trained job checkpoints (RuntimeModel::Train).
struct ModelCheckpoints {
  std::int64_t every = 0;  // steps; 0: none
  double seconds = 3;      // one write
  std::uint64_t bytes = 64 << 10;  // the state a checkpoint holds (its payload)
};

class RuntimeModel {
 public:
  static constexpr double kRendezvousTimeout = 30;
  static constexpr double kStartup = 2;  // a new worker's start and rendezvous
  static constexpr std::uint64_t kFileHeader = 40;  // a checkpoint file's bytes before its payload (checkpoint.h)

  struct Workers {
    std::function<bool(p::WorkerId, std::string* agent)> running;  // and on which agent
    std::function<void(const std::string& agent, p::WorkerId, int code, const std::string& outcome,
                       std::optional<std::int64_t> step)>
        exit;
    std::function<void(const std::string& agent, p::Message)> send;  // rank 0's agent relays it
    std::function<void(const std::string& agent, p::WorkerId, int signal)> kill;
  };
  using Checkpoints = ModelCheckpoints;

  void Train(p::JobId job, std::int64_t total_steps, double now, Checkpoints checkpoints = {});
  // A StopWorkers of `worker`: true when the model ends it (rank 0 of a
  // checkpointing job writes first); false: it ends now.
  bool Stop(p::JobId job, p::WorkerId worker, bool checkpoint_first, double grace, double now,
            const Workers& workers);
  // A StartWorkers (with `started`) or NewGeneration of `job` the daemon sent.
  void NoteGeneration(p::JobId job, std::int64_t gen, const std::vector<p::WorkerId>& members,
                      const std::vector<p::WorkerPlacement>* started, double now);
  void Tick(double now, const Workers& workers);

  std::int64_t Formed(p::JobId job) const;
  int GenerationsStarted(p::JobId job) const;
  bool Done(p::JobId job) const;
  std::int64_t FreshStart(p::JobId job) const;
  std::int64_t Step(p::JobId job) const;
  std::int64_t StepsTrained(p::JobId job) const;  // every step trained, twice ones twice
  const CheckpointTruth* Truth(p::JobId job) const;
  CheckpointTruth* Truth(p::JobId job);
  // The job's checkpoint directory's file system (null: no checkpoints).
  MemoryCheckpointFs* Disk(p::JobId job);
  static std::string CheckpointDir(p::JobId job) { return "/ckpt/" + std::to_string(job); }

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
    std::int64_t steps_trained = 0;
    double next_step = 0;
    // Checkpoints.
    Checkpoints ckpt;
    std::unique_ptr<MemoryCheckpointFs> disk;
    std::unique_ptr<CheckpointManager> files;  // the runtime's, on `disk`
    std::int64_t group = 0;       // of the formed generation
    struct Write {
      CheckpointTruth::Write w;
      double kill_at = -1;   // the stop's SIGKILL
      int stop = 0;          // after it: 0 trains on, 1 exits "stopped", 2 ends by SIGTERM
    };
    std::vector<Write> writes;
    CheckpointTruth truth;
  };
  void BeginWrite(Training& t, p::WorkerId writer, double now, int stop, double kill_at);
  void WriteTick(p::JobId job, Training& t, double now, const Workers& ws);
  // A fresh group of `members` forms: false when rank 0 could not raise the fence.
  bool Restore(p::JobId job, Training& t, const std::vector<p::WorkerId>& members, double now, const Workers& ws);
  // The job name in the fence file, as the scheduler's ARYL_FENCE_ID.
  static std::string FenceJob(p::JobId job) { return "job-" + std::to_string(job); }
  // The write `w` completed with its writer alive: the manager writes it.
  void Commit(p::JobId job, Training& t, const Training::Write& w, const std::string& agent, double now,
              const Workers& ws);
  std::map<p::JobId, Training> training_;
};

}  // namespace aryl::daemon::testing
