// EtcdStateStore: the core snapshot in chunks, written over several
// transactions (etcd_state_store.h, step 5).
#include <nlohmann/json.hpp>

#include "state/etcd/etcd_state_store.h"
#include "state/sqlite/sqlite_state_store.h"

namespace aryl::daemon {

using json = nlohmann::json;

void EtcdStateStore::DropStrayChunks() {
  // Chunk keys are snap/<id>/<k>, ids of 20 digits; "snap/head" sorts after
  // every one of them. Two ranges: the ids below the head's and above it.
  pending_.push_back(etcd::Op::Delete(Key("snap", ""), Key("snap", Pad(snapshot_id_))));
  pending_.push_back(etcd::Op::Delete(Key("snap", Pad(snapshot_id_ + 1)), Key("snap", "head")));
}

bool EtcdStateStore::HasStrayChunks() const {
  const std::string mine = Key("snap", Pad(snapshot_id_) + "/");
  for (const auto& [key, value] : chunks_)
    if (key.compare(0, mine.size(), mine) != 0) return true;
  return false;
}

Result<std::int64_t> EtcdStateStore::BeginCoreSnapshot(std::optional<std::int64_t> upto) {
  const std::int64_t id = std::max(snapshot_id_, writing_id_) + 1;
  std::int64_t index_id = 0;
  ARYL_RETURN_IF_ERROR(Write([&]() -> Status {
    ARYL_ASSIGN_OR_RETURN(index_id, index_->BeginCoreSnapshot(upto));
    DropStrayChunks();  // the one in flight is cancelled
    return Status::Ok();
  }));
  writing_id_ = id;
  writing_index_id_ = index_id;
  writing_upto_ = upto;
  writing_chunks_ = 0;
  writing_bytes_ = 0;
  return id;
}

Status EtcdStateStore::AppendCoreSnapshot(std::int64_t id, std::string_view piece) {
  if (id != writing_id_)
    return Status::Cancelled(opt_.location + ": core snapshot " + std::to_string(id) + " is not being written");
  int chunks = writing_chunks_;
  ARYL_RETURN_IF_ERROR(Write([&]() -> Status {
    ARYL_RETURN_IF_ERROR(index_->AppendCoreSnapshot(writing_index_id_, piece));
    for (std::size_t at = 0; at < piece.size(); at += kSnapshotChunkBytes)
      pending_.push_back(etcd::Op::Put(Key("snap", Pad(id) + "/" + Pad(chunks++)),
                                       std::string(piece.substr(at, kSnapshotChunkBytes))));
    return Status::Ok();
  }));
  writing_chunks_ = chunks;
  writing_bytes_ += piece.size();
  return Status::Ok();
}

Status EtcdStateStore::CommitCoreSnapshot(std::int64_t id) {
  if (id != writing_id_)
    return Status::Cancelled(opt_.location + ": core snapshot " + std::to_string(id) + " is not being written");
  ARYL_RETURN_IF_ERROR(Write([&]() -> Status {
    ARYL_RETURN_IF_ERROR(index_->CommitCoreSnapshot(writing_index_id_));
    // The rows it replaces, and every older snapshot's chunks ("snap/head"
    // sorts after every chunk key, so the range stops short of it).
    const std::string core = Key("core", "");
    pending_.push_back(etcd::Op::Delete(
        core, writing_upto_ ? Key("core", Pad(static_cast<std::uint64_t>(*writing_upto_) + 1)) : etcd::PrefixEnd(core)));
    pending_.push_back(etcd::Op::Delete(Key("snap", ""), Key("snap", Pad(id))));
    json head = {{"id", id}, {"chunks", writing_chunks_}, {"bytes", writing_bytes_}};
    pending_.push_back(etcd::Op::Put(Key("snap", "head"), head.dump()));
    return Status::Ok();
  }));
  snapshot_id_ = id;
  writing_id_ = 0;
  return Status::Ok();
}

// etcd deleted what the commit replaced in its transaction; the index (in
// memory) deletes it now.
Result<bool> EtcdStateStore::CompactCoreJournal(int max_pieces, int max_rows) {
  return index_->CompactCoreJournal(max_pieces, max_rows);
}

Status EtcdStateStore::AbortCoreSnapshot(std::int64_t id) {
  if (id != writing_id_) return Status::Ok();  // cancelled already
  writing_id_ = 0;
  return Write([&]() -> Status {
    ARYL_RETURN_IF_ERROR(index_->AbortCoreSnapshot(writing_index_id_));
    pending_.push_back(etcd::Op::Delete(Key("snap", Pad(id) + "/"), Key("snap", Pad(id + 1))));
    return Status::Ok();
  });
}

}  // namespace aryl::daemon
