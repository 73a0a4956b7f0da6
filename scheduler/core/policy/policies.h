// Internal: factories of the policies, one file each in this folder.
#pragma once

#include <memory>

#include "aryl/sched/config.h"
#include "aryl/sched/policy.h"
#include "aryl/sched/reclaim.h"

namespace aryl::sched::policy {

// aryl_policy.cc: Aryl and its ablations (one mechanism off).
std::unique_ptr<Policy> MakeAryl(const SchedulerConfig& c, ReclaimStrategy r);
std::unique_ptr<Policy> MakeLoanOnly(const SchedulerConfig& c, ReclaimStrategy r);
std::unique_ptr<Policy> MakeElasticOnly(const SchedulerConfig& c, ReclaimStrategy r);
// baseline_policy.cc: training cluster only, every job at its requested size.
std::unique_ptr<Policy> MakeBaseline(const SchedulerConfig& c, ReclaimStrategy r);
// optimus_policy.cc, afs_policy.cc: peer elastic schedulers (training cluster).
std::unique_ptr<Policy> MakeOptimus(const SchedulerConfig& c, ReclaimStrategy r);
std::unique_ptr<Policy> MakeAfs(const SchedulerConfig& c, ReclaimStrategy r);
// tiresias_policy.cc: 2D-LAS, non-elastic, preemptive (training cluster).
std::unique_ptr<Policy> MakeTiresias(const SchedulerConfig& c, ReclaimStrategy r);

}  // namespace aryl::sched::policy
