// The scheduler daemon's fixed timings and sizes (Daemon::Impl, daemon_impl.h):
// the margins its rules keep around the runtime's own timeouts. Each says
// what it is measured against.
#pragma once

#include <cstdint>

namespace aryl::daemon {

inline constexpr const char* kLinearModel = "linear";
inline constexpr double kUnknownWork = 1e6;  // steps assumed for a job that does not say
inline constexpr double kCoreTimeStep = 0.05;  // s; the server's tick (CoreNow)
// How long after its start a job that did not give --elastic may take to show
// that it links the runtime (its first WorkerHello) before it is resized by a restart.
inline constexpr double kKindDetectSeconds = 15;
// A worker "interrupted" (its collective or rendezvous timed out) this soon
// after another worker of its job was lost is that loss's knock-on: the
// runtime's timeouts (30 s by default) with a margin.
inline constexpr double kKnockOnSeconds = 60;
// How long a generation may form before a voluntary change abandons it
// (job_machine.h, WhileForming): the runtime's rendezvous timeout (30 s) and a margin.
inline constexpr double kFormingSeconds = 40;
// A job one of whose workers said "completed" is not done when its peers then
// report more than this many steps past that worker's end: it left early.
inline constexpr std::int64_t kLeftEarlySteps = 1;
// ... within this long: the time for its peers to regroup and step (the
// runtime's fault settle, 2 s by default, and a rendezvous).
inline constexpr double kLeftEarlySeconds = 30;
// A reclaim is enforced (SIGKILL of the workers still on the server) this
// long before its deadline; a stop's grace on that server ends by then.
inline constexpr double kReclaimEnforceSeconds = 1.0;
// A reclaim keeps back warm-up x kServingWarmupFactor + kServingWarmupSlack
// seconds for a server's serving side (serving.cc, ServingBudget).
inline constexpr double kServingWarmupFactor = 1.25;
inline constexpr double kServingWarmupSlack = 2.0;
// An agent's log disk with less free than this is full (Heartbeat::log_free_bytes).
inline constexpr std::int64_t kLogDiskFullBytes = 1 << 20;

}  // namespace aryl::daemon
