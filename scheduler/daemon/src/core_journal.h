// The core journal's record format: every input to the scheduling core, as one
// JSON object per row of StateStore's core_events table. The daemon appends
// an event before it acts on the core's plan and replays the rows, in order,
// to rebuild the core after a restart (the core is deterministic).
#pragma once

#include <string>

#include "aryl/result.h"
#include "aryl/sched/scheduler.h"

namespace aryl::daemon {

std::string EventToJson(const sched::EventBody& body);
// Corruption naming the row's problem when `text` is not a journal event.
Result<sched::EventBody> EventFromJson(const std::string& text);

}  // namespace aryl::daemon
