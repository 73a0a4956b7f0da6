// A pending reclaim outlives a restart of the scheduler. The plan that
// returns a loaned server keeps the reclaim's start, deadline and ready_by
// in the state's meta, "reclaim/NODE", in the same transaction
// (SaveReclaim); it is forgotten once met (ForgetReclaim); a starting
// scheduler restores the reclaims of servers that still hold workers
// (LoadReclaim), so their deadline is still enforced. Without it, a
// restart during a reclaim left the loaned server's workers to run past
// the deadline (aryl-simtest --daemon --replay 59).
#pragma once

#include <optional>
#include <string>

#include "aryl/daemon/state_store.h"
#include "live_job.h"

namespace aryl::daemon {

Status SaveReclaim(StateStore& store, const LivePendingReclaim& pr);
// Best effort: a reclaim left behind is restored only while its server
// holds workers, and then its deadline has passed: they are killed at once.
void ForgetReclaim(StateStore& store, const std::string& node);
// The reclaim kept for `node`; nullopt when none (or unreadable: logged).
std::optional<LivePendingReclaim> LoadReclaim(StateStore& store, const std::string& node);

}  // namespace aryl::daemon
