// The core journal's record format: every input to the scheduling core, as one
// JSON object per row of StateStore's core_events table. The daemon appends
// an event before it acts on the core's plan and replays the rows, in order,
// to rebuild the core after a restart (the core is deterministic). Every
// DaemonOptions::journal_snapshot_rows rows the core is snapshotted and the rows
// before it deleted, in one transaction.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "aryl/result.h"
#include "aryl/sched/scheduler.h"
#include "aryl/sched/speed_model.h"
#include "aryl/sched/speed_models.h"

namespace aryl::daemon {

std::string EventToJson(const sched::EventBody& body);
// Corruption naming the row's problem when `text` is not a journal event.
Result<sched::EventBody> EventFromJson(const std::string& text);

// A server joined the core (Scheduler::AddServer) at the row's time: a new
// agent costs one row, not a rebuild. Servers without such a row (state files
// of older versions, a server of a GPU type new to the cluster) are in the core
// from time 0, failed until their journaled recovery.
struct ServerAdded {
  sched::ServerSpec spec;
};
std::string ServerAddedToJson(const sched::ServerSpec& spec);
// An event applied without the policy's round (Scheduler::Apply): the row has
// "round": false. A later tick row runs the round.
struct Applied {
  sched::EventBody body;
};
std::string AppliedToJson(const sched::EventBody& body);
// A step-time summary of a job added to its speed model (no round): the row
// has "type": "speed". Deferred (the daemon's rows since fits run on a worker
// thread, "deferred": true): SpeedModels::RecordSample only, the fit it may
// have started is a SpeedFitRow of its own. Not deferred (older journals):
// SpeedModels::AddSample, fitting inline, then Scheduler::RefreshSpeed when
// the fit changed.
struct SpeedSampleRow {
  sched::JobId job = 0;
  sched::StepSample sample;
  bool deferred = false;
};
std::string SpeedSampleToJson(const SpeedSampleRow& row);
// A finished fit installed in a job's model (SpeedModels::ApplyFit, then
// Scheduler::RefreshSpeed; no round): the row has "type": "speed_fit", the
// parameters and the step counts it covered, so that replay installs exactly
// the fit the scheduler decided on, without fitting again.
struct SpeedFitRow {
  sched::JobId job = 0;
  sched::FitResult fit;
};
std::string SpeedFitToJson(const SpeedFitRow& row);
using JournalRow = std::variant<sched::EventBody, ServerAdded, Applied, SpeedSampleRow, SpeedFitRow>;
Result<JournalRow> RowFromJson(const std::string& text);

// The snapshot that replaces the journal's older rows (core_snapshot.cc): the
// core's Scheduler::Image. A restart restores it and replays only the rows
// after it, so replay and journal size do not grow with history.
// With `cancel`, gives up (Status::Cancelled) once it is set, checked at every
// server and job: the helper thread that encodes a snapshot stops when the
// snapshot is dropped (pending_snapshot.h).
Result<std::string> SnapshotToJson(const sched::Scheduler::Image& image,
                                   const std::atomic<bool>* cancel = nullptr);
Result<sched::Scheduler::Image> SnapshotFromJson(std::string_view text);

// The text a snapshot is saved as (StateStore's core snapshot pieces): the
// core's JSON, then, when the daemon keeps speed models, a newline and their
// JSON (SpeedModels::ToJson), so that the models go in the same pieces as
// the core instead of one write in the commit's transaction (about 40 MB at
// 100,000 jobs with step samples). Neither JSON holds a raw newline (a dump
// escapes it in strings). Snapshots saved before hold the core alone; their
// models are the meta key "speed_models", which a snapshot with models
// empties in its commit.
std::string JoinSnapshot(std::string core, std::string_view models);
struct SnapshotParts {
  std::string_view core;
  std::optional<std::string_view> models;  // nullopt: the core alone (models in meta, if any)
};
SnapshotParts SplitSnapshot(std::string_view text);

}  // namespace aryl::daemon
