// What the daemon does to keep secrets out of reach (docs/security.md):
// the state file (and its -wal/-shm companions) is readable by its owner only,
// and job environments (which hold tokens and passwords) never reach the
// append-only event journal, from which nothing can be removed.
#pragma once

#include <string>

#include "aryl/protocol/messages.h"
#include "aryl/status.h"

namespace aryl::daemon {

// Creates `path` with mode 0600 when missing, so SQLite (which gives its -wal
// and -shm files the database file's mode) never makes a world-readable file.
// ":memory:" and "" are left alone.
Status PrepareStateFile(const std::string& path);
// Sets mode 0600 on `path` and its -wal/-shm files that exist (older files).
Status RestrictStateFiles(const std::string& path);
// The submission as the event journal records it, for people: size, GPU type,
// model and steps, argv (at most 512 bytes), env names (never values), working
// and checkpoint directories, restarts, owner. Not the client's idempotency
// token or the message's framing.
std::string SubmitSummary(const protocol::SubmitJob& m);

}  // namespace aryl::daemon
