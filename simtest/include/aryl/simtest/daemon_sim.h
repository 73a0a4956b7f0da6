// The daemon's own handlers under seeded faults (aryl-simtest --daemon).
//
// Where live_sim.h models the scheduler around its pure parts, this runs the
// whole daemon: Daemon::StartDriven, the binary's message handlers, tick,
// journal and SQLite state, on virtual time behind an in-memory network
// (simtest/driven/driven_cluster.h), with agents that answer as aryl-agent
// does (its AgentCore: ExitBook, lease check and generation fence; its
// SessionCore: registration until answered, the lease's renewal, term
// fencing) and workers that follow the runtime's
// rendezvous. One seed draws the cluster (a training server, a second one of
// 1-2 slots, an inference server), an elastic 1..4 job of 150-400 steps and
// the faults:
//   kill       1-3 SIGKILLs of a random worker of the job
//   loan       the inference server offered, reclaimed (1 s or 30 s
//              deadline), up to two cycles
//   pause      the scheduler stopped for 1-15 s
//   restart    the scheduler process replaced on its state file
//   partition  a training agent cut off for 2-40 s
//   disk       the state disk full for 1-20 s
//   loss       for 5-60 s, each message between agents and scheduler lost
//              with probability 5-50%
//   dup        for 5-60 s, each arrives twice with probability 10-50%
//   delay      for 5-60 s, each is late by up to 0.2-3 s (so messages
//              overtake each other)
//   oneway     a training agent hears nothing (deaf) or is not heard (mute) for
//              2-40 s
//   lag        for 5-60 s, each message is late by up to 4-12 s (a stalled
//              link, TCP's retransmission backoff): an acknowledgement may
//              arrive after the scheduler's margin beyond the lease
//   agent      an agent's process crashes, its workers with it; a new one
//              registers 0.5-12 s later
//   ckpt       1-2 kills timed to land inside a checkpoint write: its writer
//              SIGKILLed, another member SIGKILLed, or the writer's agent
//              crashed (back 0.5-12 s later)
//   cdisk      the job's checkpoint disk (the runtime's CheckpointManager on
//              it) has room for 1-4 checkpoints; 1-2 windows of 5-60 s in
//              which other files fill 30-100% of it; 0-2 writes that fail
//              with an I/O error; 0-2 checkpoint files corrupted or torn;
//              1-2 SIGKILLs of every worker of the job, so that a fresh
//              group restores from that disk
//              (simtest/src/checkpoint_disk_faults.h)
// The job checkpoints every 10-40 steps, each write taking 1-6 s
// (runtime_model.h), and rank 0 checkpoints when stopped.
// Invariants, after every 50 ms tick:
//   D1 every reclaim is met: no worker of the job on the inference server
//      after its deadline (until it is offered again), or after the
//      server's registration with a restarted scheduler when that is later
//      (no scheduler can reach a server before), plus the wire's delay
//   D2 one copy: no fresh start of the job while a worker of an earlier
//      generation still runs anywhere (a partitioned agent's included)
//   D3 progress: at most 12 generations started without a trained step
//   D4 the job completes by 1,800 virtual s, and its end is acknowledged to
//      every agent that reported it
//   D5 a pause loses no agent: on the tick after it, every agent that was
//      connected and whose messages reached the scheduler's socket is still
//      connected
//   D6 one checkpoint writer: never two writes in progress at once, a write
//      begun or committed only by the newest group, and no fresh group
//      restoring while an older group's write is in progress
//      (checkpoint_truth.h)
//   D7 a fresh group resumes from the newest good checkpoint (no step lost
//      beyond it; only the steps since it are trained twice), and a committed
//      checkpoint's step is never below the newest good one
//   D8 every failed checkpoint write is reported and counted by the
//      scheduler (checkpoint_disk_faults.h says what is exact)
//   D9 checkpointing resumes: a write fails for lack of room only when it
//      cannot fit with every checkpoint older than the newest good one removed
//   D10 the newest good checkpoint is never removed to make room
//   D11 a restore skips corrupt files and takes the newest good checkpoint
//   H  the harness saw no impossible command (a stop of a worker that does
//      not exist, a refused registration)
// A run is a pure function of (seed, faults).
#pragma once

#include <string>

#include "aryl/result.h"
#include "aryl/simtest/live_sim.h"

namespace aryl::simtest {

enum DaemonFault : unsigned {
  kDaemonKill = 1u << 0,
  kDaemonLoan = 1u << 1,
  kDaemonPause = 1u << 2,
  kDaemonRestart = 1u << 3,
  kDaemonPartition = 1u << 4,
  kDaemonDisk = 1u << 5,
  kDaemonLoss = 1u << 6,
  kDaemonDup = 1u << 7,
  kDaemonDelay = 1u << 8,
  kDaemonOneWay = 1u << 9,
  kDaemonAgentCrash = 1u << 10,
  kDaemonCheckpoint = 1u << 11,
  kDaemonCheckpointDisk = 1u << 12,
  kDaemonLag = 1u << 13,
  kDaemonAll = (1u << 14) - 1,
  // The groups CI runs apart: faults of processes and disks, and of the wire.
  kDaemonProcess = kDaemonKill | kDaemonLoan | kDaemonPause | kDaemonRestart | kDaemonPartition | kDaemonDisk |
                   kDaemonAgentCrash | kDaemonCheckpoint | kDaemonCheckpointDisk,
  kDaemonNetwork = kDaemonLoss | kDaemonDup | kDaemonDelay | kDaemonOneWay | kDaemonLag,
};

// "kill,loan,pause,restart,partition,disk,agent,ckpt,cdisk,loss,dup,delay,oneway,lag",
// the groups "process" (kill..cdisk) and "network" (the last five), "all" or
// "none".
Result<unsigned> ParseDaemonFaults(const std::string& list);
std::string DaemonFaultsString(unsigned faults);

// Options.faults is a DaemonFault set here.
Outcome RunDaemonSeed(const Options& options);

}  // namespace aryl::simtest
