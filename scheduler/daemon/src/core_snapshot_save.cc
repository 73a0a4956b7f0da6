// The daemon's core snapshots off the serving thread: the image taken here,
// encoded on a helper thread, saved in slices (core_journal.h for the format,
// state_store.h for the store's side).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "aryl/sched/policy.h"
#include "core_journal.h"
#include "daemon_impl.h"

namespace aryl::daemon {

namespace {
// A compaction transaction deletes at most this many (a piece is 256 KB).
constexpr int kCompactPieces = 4;
constexpr int kCompactRows = 1000;

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
// CPU time of the calling thread: on a shared machine its wall time also
// counts the time others ran.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
}  // namespace

// After every durable step (Transaction): once the journal holds
// journal_snapshot_rows rows it is snapshotted, so it never holds many more.
// The encoding, which grows with the live jobs (about 2 s for 50,000 queued
// jobs, docs/performance.md), runs on a helper thread, and the save (tens of
// megabytes) in slices, so that requests are not held up:
//  1. here, on the serving thread: the core's image (a copy), the live core
//     made in place what its restore would be (Scheduler::ForgetEnded;
//     SnapshotCore restores a copy), the newest journal row the image covers,
//     and a copy of the speed models;
//  2. a helper thread encodes the image and the speed models, one text
//     (core_journal.h: the models follow the core in the same pieces);
//  3. PollSnapshot (every tick and step), once it is encoded, begins the
//     store's snapshot (StateStore::BeginCoreSnapshot, up to that row) and
//     appends its pieces, at most snapshot_slice_ms of them per call, a
//     slice at most every snapshot_gap_ms (DaemonOptions);
//  4. a slice of its own commits it in one short transaction (which empties
//     the copy of the models older snapshots kept in meta): from then on it replaces the rows it covers, and rows
//     appended meanwhile follow it;
//  5. later slices delete the older snapshot's pieces and those rows
//     (StateStore::CompactCoreJournal).
// Until then a restart replays the previous snapshot and every row, which
// builds the same core. No second snapshot starts while one is pending;
// SnapshotCore drops the pending one (its Begin cancels the store's).
void Daemon::Impl::MaybeSnapshot() {
  PollSnapshot();
  if (pending_snapshot || !core || opt.journal_snapshot_rows <= 0 || journal_rows < opt.journal_snapshot_rows) return;
  auto t0 = std::chrono::steady_clock::now();
  auto upto = store->LastCoreEventSeq();
  if (!upto.ok()) {
    spdlog::error("core journal snapshot: {}", upto.status().ToString());
    return;
  }
  // The core's image is copied once, here, for the helper, which encodes
  // it; the image stays whole between snapshots and the next copy is
  // assigned into it job by job (ClusterState::ImageInto), reusing each
  // job's strings, placement and curves instead of allocating them (at
  // 100,000 jobs most of the copy was malloc and free; the price is one
  // image's memory held between snapshots); then the live core becomes in place what a restart
  // from this snapshot builds (Scheduler::ForgetEnded: ended jobs forgotten,
  // the policy reloaded from the state it saved in the image; the helper
  // frees the replaced one). Before, the
  // live core was replaced by the restore of a copy: at 100,000 jobs the
  // restore cost the serving thread about as much as the copy, and the helper
  // copied the image again from the replaced core.
  const auto t_copy = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuMs();
  if (!snapshot_image) snapshot_image = std::make_shared<s::Scheduler::Image>();
  // Room for a quarter more jobs, so that a growing queue does not move it
  // to fresh memory at every snapshot.
  const std::size_t active = core->state().running().size() + core->state().queued().size();
  auto& jobs = snapshot_image->state.jobs;
  if (jobs.capacity() < active) jobs.reserve(active + active / 4);
  core->SnapshotInto(*snapshot_image);
  const double copy_ms = MsSince(t_copy);
  const double copy_cpu_ms = ThreadCpuMs() - cpu0;
  auto replaced_policy = core->ForgetEnded();
  if (!replaced_policy.ok()) {
    spdlog::error("core journal snapshot: {}", replaced_policy.status().ToString());
    return;
  }
  const double forget_ms = MsSince(t_copy) - copy_ms;
  const double forget_cpu_ms = ThreadCpuMs() - cpu0 - copy_cpu_ms;
  PendingSnapshot ps;
  ps.upto = *upto;
  ps.rows = journal_rows;
  ps.taken = t0;
  std::shared_ptr<const s::SpeedModels> models;
  if (speed) models = std::make_shared<const s::SpeedModels>(*speed);  // a copy: encoded meanwhile
  ps.models = models != nullptr;
  ps.text = std::async(std::launch::async, [image = snapshot_image, models, policy = std::move(*replaced_policy),
                                            cancel = ps.cancel]() mutable -> Result<std::string> {
    policy.reset();  // its caches (at 100,000 jobs, milliseconds to free) here
    auto core_json = cancel->load(std::memory_order_relaxed) ? Result<std::string>(Status::Cancelled("core snapshot: dropped"))
                                                             : SnapshotToJson(*image, cancel.get());
    // The image is kept whole: the next snapshot is assigned into it.
    if (!core_json.ok()) return core_json.status();
    if (cancel->load(std::memory_order_relaxed)) return Status::Cancelled("core snapshot: dropped");
    // The models go in the same pieces as the core (core_journal.h).
    return JoinSnapshot(std::move(*core_json), models ? models->ToJson() : std::string());
  });
  ps.image_ms = MsSince(t0);
  journal_rows = 0;
  spdlog::info("core journal: a snapshot of {} rows begun (image {:.1f} ms on the serving thread: copy {:.1f} ms, "
               "CPU {:.1f} ms; ended jobs forgotten {:.1f} ms, CPU {:.1f} ms)",
               ps.rows, ps.image_ms, copy_ms, copy_cpu_ms, forget_ms, forget_cpu_ms);
  pending_snapshot.emplace(std::move(ps));
}

Status Daemon::Impl::SaveSnapshotSlice(PendingSnapshot& ps, bool wait) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!wait && t0 < ps.next_slice) return Status::Ok();
  const std::string& body = *ps.encoded;
  if (ps.committed) {
    // What it replaced goes, a few pieces and rows a transaction.
    for (;;) {
      ARYL_ASSIGN_OR_RETURN(bool done, store->CompactCoreJournal(kCompactPieces, kCompactRows));
      if (done) {
        ps.compacted = true;
        break;
      }
      if (!wait && MsSince(t0) >= opt.snapshot_slice_ms) break;
    }
    ps.compact_ms += MsSince(t0);
  } else if (ps.id != 0 && ps.saved == body.size()) {
    // The commit, a slice of its own: one short transaction.
    ARYL_RETURN_IF_ERROR(store->Batch([&]() -> Status {
      ARYL_RETURN_IF_ERROR(store->CommitCoreSnapshot(ps.id));
      // Its models are in its pieces: the copy an older snapshot left in meta goes.
      if (ps.models) ARYL_RETURN_IF_ERROR(store->SetMeta("speed_models", ""));
      return Status::Ok();
    }));
    ps.commit_ms = MsSince(t0);
    ps.committed = true;
  } else {
    if (ps.id == 0) {
      ARYL_ASSIGN_OR_RETURN(ps.id, store->BeginCoreSnapshot(ps.upto));
    }
    while (ps.saved < body.size()) {
      const std::size_t n = std::min(StateStore::kCoreSnapshotPieceBytes, body.size() - ps.saved);
      ARYL_RETURN_IF_ERROR(store->AppendCoreSnapshot(ps.id, std::string_view(body).substr(ps.saved, n)));
      ps.saved += n;
      if (!wait && MsSince(t0) >= opt.snapshot_slice_ms) break;
    }
  }
  const double ms = MsSince(t0);
  ++ps.slices;
  ps.save_ms += ms;
  ps.longest_ms = std::max(ps.longest_ms, ms);
  ps.next_slice = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double, std::milli>(opt.snapshot_gap_ms));
  if (wait && !ps.compacted) return SaveSnapshotSlice(ps, wait);
  return Status::Ok();
}

void Daemon::Impl::PollSnapshot(bool wait) {
  if (!pending_snapshot) return;
  PendingSnapshot& ps = *pending_snapshot;
  if (!ps.encoded) {
    if (!wait && ps.text.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
    auto text = ps.text.get();
    if (!text.ok()) {
      spdlog::error("core journal snapshot: {}", text.status().ToString());
      journal_rows += ps.rows;  // try again after the next step
      pending_snapshot.reset();
      return;
    }
    ps.encoded = std::move(*text);
  }
  Status st = SaveSnapshotSlice(ps, wait);
  if (!st.ok() && ps.committed) {
    // In force; what it replaced is deleted after the next one.
    spdlog::error("core journal snapshot: compaction: {}", st.ToString());
    pending_snapshot.reset();
    return;
  }
  if (!st.ok()) {
    spdlog::error("core journal snapshot: {}", st.ToString());
    if (ps.id != 0) (void)store->AbortCoreSnapshot(ps.id);  // else the next Begin drops its pieces
    journal_rows += ps.rows;
    pending_snapshot.reset();
    return;
  }
  if (!ps.compacted) return;  // more slices to come
  snapshot_bytes = ps.encoded->size();
  spdlog::info("core journal: {} rows replaced by a snapshot of {} bytes: {:.1f} ms on the serving thread "
               "(image {:.1f} ms; save {:.1f} ms in {} slices, the longest {:.1f} ms, the commit {:.1f} ms, "
               "compaction {:.1f} ms; encoded meanwhile, {:.1f} ms in all)",
               ps.rows, snapshot_bytes, ps.image_ms + ps.save_ms, ps.image_ms, ps.save_ms, ps.slices, ps.longest_ms,
               ps.commit_ms, ps.compact_ms, MsSince(ps.taken));
  pending_snapshot.reset();
}

}  // namespace aryl::daemon
