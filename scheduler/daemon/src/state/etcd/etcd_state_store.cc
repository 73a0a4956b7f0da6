#include "state/etcd/etcd_state_store.h"
#include "state/etcd/txn_writes.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "state/sqlite/sqlite_state_store.h"

namespace aryl::daemon {

using json = nlohmann::json;

namespace {

json JobJson(const JobRecord& j) {
  return {{"id", j.id},           {"name", j.name},           {"client_token", j.client_token},
          {"spec", j.spec_json},  {"state", JobStateName(j.state)}, {"submit_time", j.submit_time},
          {"start_time", j.start_time}, {"end_time", j.end_time}, {"generation", j.generation},
          {"exit_code", j.exit_code}, {"message", j.message},    {"placement", j.placement},
          {"workers", j.workers_json}};
}

Result<JobRecord> JobFromJson(const json& x) {
  JobRecord j;
  j.id = x.at("id").get<std::uint64_t>();
  j.name = x.at("name").get<std::string>();
  j.client_token = x.at("client_token").get<std::string>();
  j.spec_json = x.at("spec").get<std::string>();
  ARYL_ASSIGN_OR_RETURN(j.state, ParseJobState(x.at("state").get<std::string>()));
  j.submit_time = x.at("submit_time").get<double>();
  j.start_time = x.at("start_time").get<double>();
  j.end_time = x.at("end_time").get<double>();
  j.generation = x.at("generation").get<std::uint64_t>();
  j.exit_code = x.at("exit_code").get<int>();
  j.message = x.at("message").get<std::string>();
  j.placement = x.at("placement").get<std::map<std::string, int>>();
  j.workers_json = x.at("workers").get<std::string>();
  return j;
}

}  // namespace

EtcdStateStore::~EtcdStateStore() = default;

std::string EtcdStateStore::Pad(std::uint64_t n) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%020llu", static_cast<unsigned long long>(n));
  return buf;
}

std::string EtcdStateStore::Key(std::string_view table, std::string_view name) const {
  std::string k = opt_.prefix;
  k += "s/";
  k += table;
  k += '/';
  k += name;
  return k;
}

Result<std::unique_ptr<EtcdStateStore>> EtcdStateStore::Open(std::shared_ptr<etcd::Client> client, Options options) {
  if (options.prefix.empty() || options.prefix.back() != '/')
    return Status::InvalidArgument("etcd state prefix '" + options.prefix + "' must end with '/'");
  std::unique_ptr<EtcdStateStore> s(new EtcdStateStore());
  s->client_ = std::move(client);
  s->opt_ = std::move(options);
  ARYL_ASSIGN_OR_RETURN(s->index_, SqliteStateStore::Open(":memory:"));
  ARYL_RETURN_IF_ERROR(s->Load());
  if (s->opt_.term > 0) {
    const bool stray = s->HasStrayChunks();
    s->chunks_.clear();  // a follower (term 0) keeps them for snapshots to come
    ARYL_RETURN_IF_ERROR(s->ReadWriter());
    // A snapshot a leader was writing when it stopped: never in force, dropped.
    if (stray) ARYL_RETURN_IF_ERROR(s->Write([&]() -> Status {
      s->DropStrayChunks();
      return Status::Ok();
    }));
  }
  ARYL_ASSIGN_OR_RETURN(auto version, s->index_->GetMeta("schema_version"));
  // The index's own schema_version row is ours; a newer one read from etcd
  // replaced it and is refused.
  if (version && *version != std::to_string(kSchemaVersion)) {
    int v = std::atoi(version->c_str());
    if (v > kSchemaVersion)
      return Status::FailedPrecondition(s->opt_.location + " has schema version " + *version +
                                        " but this aryl-scheduler supports up to " + std::to_string(kSchemaVersion) +
                                        "; upgrade Aryl");
  }
  return s;
}

Status EtcdStateStore::ApplyWatched(const std::vector<etcd::WatchEvent>& batch) {
  const auto chunks_before = chunks_;
  const std::int64_t snapshot_before = snapshot_id_;
  std::int64_t revision = revision_;
  Status st = index_->Batch([&]() -> Status {
    std::string head;
    std::optional<std::int64_t> core_deleted;  // the newest core row deleted
    for (const auto& e : batch) {
      const etcd::KeyValue& kv = e.kv;
      revision = std::max(revision, kv.mod_revision);
      auto fail = [&](const std::string& why) {
        return Status::Corruption(opt_.location + ": watched key '" + kv.key + "' at revision " +
                                  std::to_string(kv.mod_revision) + ": " + why);
      };
      if (kv.key.size() <= opt_.prefix.size() + 2) return fail("not an Aryl state key");
      std::string_view rest(kv.key);
      rest.remove_prefix(opt_.prefix.size() + 2);  // "s/"
      const auto slash = rest.find('/');
      const std::string_view table = rest.substr(0, slash);
      if (e.type == etcd::WatchEvent::Type::kDelete) {
        if (table == "snap") {
          chunks_.erase(kv.key);
        } else if (table == "core" && slash != std::string_view::npos) {
          const std::string name(rest.substr(slash + 1));
          if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos || name.size() > 20)
            return fail("not a core row's sequence number");
          core_deleted = std::max(core_deleted.value_or(0), static_cast<std::int64_t>(std::stoull(name)));
        } else {
          return fail("deleted, but a leader deletes only core rows and snapshot chunks");
        }
        continue;
      }
      if (table == "snap") {
        if (rest.substr(slash + 1) == "head") head = kv.value;
        else chunks_[kv.key] = kv.value;
        continue;
      }
      if (table == "job") {
        // A job is put again at every change: update it when the index has it.
        try {
          ARYL_ASSIGN_OR_RETURN(JobRecord j, JobFromJson(json::parse(kv.value)));
          if (index_->GetJob(j.id).ok()) {
            ARYL_RETURN_IF_ERROR(index_->UpdateJob(j).WithContext(kv.key));
          } else {
            ARYL_RETURN_IF_ERROR(index_->InsertJob(j).status().WithContext(kv.key));
          }
        } catch (const std::exception& x) {
          return fail(std::string("bad value: ") + x.what());
        }
        continue;
      }
      std::string unused;
      if (Status s = Apply(kv, &unused); !s.ok()) return s.WithContext("watched key '" + kv.key + "'");
    }
    // A snapshot's head lands with the removal of the core rows it covers.
    if (!head.empty()) {
      ARYL_ASSIGN_OR_RETURN(std::string body, SnapshotBody(head));
      return index_->SaveCoreSnapshot(body, core_deleted.value_or(0));
    }
    if (core_deleted) return index_->DeleteCoreEvents(core_deleted);
    return Status::Ok();
  });
  if (!st.ok()) {
    chunks_ = chunks_before;
    snapshot_id_ = snapshot_before;
    return st;
  }
  revision_ = revision;
  watched_events_ += batch.size();
  return Status::Ok();
}

Status EtcdStateStore::Lead(Options options) {
  if (options.prefix != opt_.prefix)
    return Status::InvalidArgument("EtcdStateStore::Lead: prefix '" + options.prefix + "' is not the followed '" +
                                   opt_.prefix + "'");
  opt_ = std::move(options);
  const bool stray = HasStrayChunks();
  chunks_.clear();  // a leader writes its snapshots; it never reads chunks again
  ARYL_RETURN_IF_ERROR(ReadWriter());
  if (!stray) return Status::Ok();
  // The chunks of a snapshot the previous leader did not commit.
  return Write([&]() -> Status {
    DropStrayChunks();
    return Status::Ok();
  });
}

Status EtcdStateStore::ReadWriter() {
  ARYL_ASSIGN_OR_RETURN(auto r, client_->Range(opt_.prefix + "writer"));
  writer_revision_ = r.kvs.empty() ? 0 : r.kvs.front().mod_revision;
  return Status::Ok();
}

Status EtcdStateStore::Apply(const etcd::KeyValue& kv, std::string* head) {
  std::string_view rest(kv.key);
  rest.remove_prefix(opt_.prefix.size() + 2);  // "s/"
  auto slash = rest.find('/');
  if (slash == std::string_view::npos) return Status::Corruption("not an Aryl state key");
  std::string_view table = rest.substr(0, slash), name = rest.substr(slash + 1);
  try {
    if (table == "meta") return index_->SetMeta(std::string(name), kv.value);
    if (table == "snap") {
      if (name == "head") *head = kv.value;
      else chunks_[kv.key] = kv.value;
      return Status::Ok();
    }
    json x = json::parse(kv.value);
    if (table == "job") {
      ARYL_ASSIGN_OR_RETURN(JobRecord j, JobFromJson(x));
      return index_->InsertJob(j).status();
    }
    if (table == "node") {
      NodeRecord n{x.at("name").get<std::string>(),   x.at("pool").get<std::string>(),
                   x.at("gpu_type").get<std::string>(), x.at("gpus").get<int>(),
                   x.at("loan_state").get<std::string>(), x.at("server_id").get<std::uint32_t>()};
      return index_->UpsertNode(n);
    }
    if (table == "event") {
      EventRecord e{x.at("seq").get<std::int64_t>(), x.at("time").get<double>(), x.at("job").get<std::uint64_t>(),
                    x.at("kind").get<std::string>(), x.at("detail").get<std::string>(),
                    x.at("nodes").get<std::vector<std::string>>(), x.at("data").get<std::string>()};
      return index_->AppendEvent(e);
    }
    if (table == "core") {
      std::uint64_t seq = std::stoull(std::string(name));
      return index_->RestoreCoreEvent(static_cast<std::int64_t>(seq), x.at("time").get<double>(),
                                      x.at("body").get<std::string>());
    }
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("bad value: ") + e.what());
  }
  return Status::Corruption("unknown table '" + std::string(table) + "'");
}

Status EtcdStateStore::Batch(const std::function<Status()>& body) {
  if (depth_ > 0) return body();
  if (reload_) {
    // A batch split over several etcd transactions failed half-way, or a
    // transaction of this store landed late: etcd holds what the index does
    // not. Read it again before going on, but not while frozen (a frozen
    // leader's write waits on nothing); a read that fails keeps the index as
    // it was and tries again at the next batch.
    if (opt_.may_write && !opt_.may_write())
      return Status::Unavailable(opt_.location + ": not written: this scheduler cannot decide now");
    ARYL_ASSIGN_OR_RETURN(auto fresh, SqliteStateStore::Open(":memory:"));
    std::unique_ptr<SqliteStateStore> old = std::move(index_);
    index_ = std::move(fresh);
    const std::size_t loaded = loaded_keys_;
    loaded_keys_ = 0;
    Status read = Load();
    if (read.ok() && opt_.term > 0) read = ReadWriter();
    if (!read.ok()) {
      index_ = std::move(old);
      loaded_keys_ = loaded;
      return read;
    }
    chunks_.clear();
    reload_ = false;
  }
  pending_.clear();
  Status st = index_->Batch([&]() -> Status {
    ++depth_;
    Status s = body();
    --depth_;
    if (!s.ok()) return s;
    return Flush();
  });
  pending_.clear();
  return st;
}

Status EtcdStateStore::Write(const std::function<Status()>& apply) { return Batch(apply); }

Status EtcdStateStore::Flush() {
  if (pending_.empty()) return Status::Ok();
  pending_ = etcd::CoalesceWrites(std::move(pending_));
  std::size_t i = 0;
  while (i < pending_.size()) {
    etcd::TxnRequest txn;
    const std::string writer_key = opt_.prefix + "writer", leader_key = opt_.prefix + "leader";
    const std::string writer = std::to_string(opt_.term) + "/" + std::to_string(writes_ + 1);
    if (opt_.term > 0) {
      etcd::Compare c;
      c.key = leader_key;
      c.target = etcd::Compare::Target::kCreate;
      c.result = etcd::Compare::Result::kEqual;
      c.number = opt_.term;
      txn.compare.push_back(c);
      etcd::Compare w;
      w.key = writer_key;
      w.target = etcd::Compare::Target::kMod;
      w.result = etcd::Compare::Result::kEqual;
      w.number = writer_revision_;
      txn.compare.push_back(w);
      txn.success.push_back(etcd::Op::Put(writer_key, writer));
      txn.failure = {etcd::Op::Get(leader_key), etcd::Op::Get(writer_key)};
    }
    const std::size_t base = txn.success.size();  // P/writer's put
    std::size_t bytes = 0;
    while (i < pending_.size() && txn.success.size() < opt_.max_txn_ops) {
      std::size_t b = pending_[i].key.size() + pending_[i].value.size() + pending_[i].range_end.size() + 16;
      if (txn.success.size() > base && bytes + b > opt_.max_txn_bytes) break;
      bytes += b;
      txn.success.push_back(std::move(pending_[i++]));
    }
    const std::size_t sent = txn.success.size() - base;
    ++writes_;
    auto result = Send(txn);
    if (!result.ok()) {
      // An earlier transaction of this batch landed: etcd holds what the
      // index rolls back. (This one may land yet, its answer lost: the next
      // transaction's comparison of P/writer finds it.)
      if (i > sent) reload_ = true;
      if (result.status().IsUnavailable() && opt_.on_unavailable) opt_.on_unavailable(result.status().message());
      return result.status();
    }
    ++transactions_;
    if (!result->succeeded) {
      const auto& leader = result->ranges.at(0).kvs;
      const auto& last = result->ranges.at(1).kvs;
      if (leader.empty() || leader.front().create_revision != opt_.term) {
        std::string why = "the leader key " + leader_key + " is no longer this scheduler's (term " +
                          std::to_string(opt_.term) + "): another scheduler leads";
        if (opt_.on_deposed) opt_.on_deposed(why);
        return Status::FailedPrecondition("not the leader: " + why);
      }
      if (last.empty() || last.front().value != writer) {
        reload_ = true;
        return Status::Unavailable(opt_.location + ": etcd holds a transaction of this scheduler that was " +
                                   "reported failed (" + (last.empty() ? std::string("none") : last.front().value) +
                                   " landed late); the state is read again");
      }
      // This very transaction had landed: a try whose answer was lost.
      writer_revision_ = last.front().mod_revision;
      continue;
    }
    if (opt_.term > 0) writer_revision_ = result->revision;
  }
  return Status::Ok();
}

// etcd electing a new raft leader (a member died) refuses writes, or holds
// them until its request timeout, for about an election timeout: ride that
// out for retry_seconds rather than fail the step. A repeated transaction is
// safe: its puts and deletes are idempotent and its comparison still fences
// it. Each try first asks may_write: once the leader cannot decide (its lease
// runs low, or an earlier write gave up and froze it) nothing waits on etcd,
// so an outage stalls the daemon's thread, which also answers heartbeats, for
// one write, not for every write it had queued.
Result<etcd::TxnResult> EtcdStateStore::Send(const etcd::TxnRequest& txn) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto budget = std::chrono::duration<double>(opt_.retry_seconds);
  for (;;) {
    if (opt_.may_write && !opt_.may_write())
      return Status::Unavailable(opt_.location + ": not written: this scheduler cannot decide now");
    auto result = client_->Txn(txn);
    if (result.ok() || !result.status().IsUnavailable() || Clock::now() - t0 >= budget) return result;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Status EtcdStateStore::PutJob(std::uint64_t id) {
  ARYL_ASSIGN_OR_RETURN(JobRecord rec, index_->GetJob(id));
  pending_.push_back(etcd::Op::Put(Key("job", Pad(id)), JobJson(rec).dump()));
  return Status::Ok();
}

Result<std::uint64_t> EtcdStateStore::InsertJob(const JobRecord& job) {
  std::uint64_t id = 0;
  ARYL_RETURN_IF_ERROR(Write([&]() -> Status {
    ARYL_ASSIGN_OR_RETURN(id, index_->InsertJob(job));
    return PutJob(id);
  }));
  return id;
}

Result<std::optional<std::uint64_t>> EtcdStateStore::FindJobByToken(const std::string& token) {
  return index_->FindJobByToken(token);
}

Status EtcdStateStore::UpdateJob(const JobRecord& job) {
  return Write([&]() -> Status {
    ARYL_RETURN_IF_ERROR(index_->UpdateJob(job));
    return PutJob(job.id);
  });
}

Result<JobRecord> EtcdStateStore::GetJob(std::uint64_t id) { return index_->GetJob(id); }
Result<std::vector<JobRecord>> EtcdStateStore::ListJobs(bool only_live, std::uint64_t after, int limit) {
  return index_->ListJobs(only_live, after, limit);
}
Result<std::uint64_t> EtcdStateStore::MaxJobId() { return index_->MaxJobId(); }

Status EtcdStateStore::UpsertNode(const NodeRecord& n) {
  return Write([&]() -> Status {
    ARYL_RETURN_IF_ERROR(index_->UpsertNode(n));
    json x = {{"name", n.name},   {"pool", n.pool},           {"gpu_type", n.gpu_type},
              {"gpus", n.gpus},   {"loan_state", n.loan_state}, {"server_id", n.server_id}};
    pending_.push_back(etcd::Op::Put(Key("node", n.name), x.dump()));
    return Status::Ok();
  });
}

Result<std::vector<NodeRecord>> EtcdStateStore::ListNodes() { return index_->ListNodes(); }

Status EtcdStateStore::AppendEvent(const EventRecord& e) {
  return Write([&]() -> Status {
    ARYL_RETURN_IF_ERROR(index_->AppendEvent(e));
    std::int64_t seq = e.seq;
    if (seq <= 0) {
      ARYL_ASSIGN_OR_RETURN(seq, index_->LastEventSeq());
    }
    json x = {{"seq", seq},       {"time", e.time},     {"job", e.job},
              {"kind", e.kind},   {"detail", e.detail}, {"nodes", e.nodes},
              {"data", e.data.empty() ? std::string("{}") : e.data}};
    pending_.push_back(etcd::Op::Put(Key("event", Pad(static_cast<std::uint64_t>(seq))), x.dump()));
    return Status::Ok();
  });
}

Result<std::vector<EventRecord>> EtcdStateStore::Events(const EventFilter& f) { return index_->Events(f); }

Status EtcdStateStore::AppendCoreEvent(double time, const std::string& body) {
  return Write([&]() -> Status {
    ARYL_RETURN_IF_ERROR(index_->AppendCoreEvent(time, body));
    ARYL_ASSIGN_OR_RETURN(std::int64_t seq, index_->LastCoreEventSeq());
    json x = {{"time", time}, {"body", body}};
    pending_.push_back(etcd::Op::Put(Key("core", Pad(static_cast<std::uint64_t>(seq))), x.dump()));
    return Status::Ok();
  });
}

Result<std::vector<std::pair<double, std::string>>> EtcdStateStore::CoreEvents() { return index_->CoreEvents(); }

Result<std::int64_t> EtcdStateStore::LastCoreEventSeq() { return index_->LastCoreEventSeq(); }
Result<std::optional<std::string>> EtcdStateStore::CoreSnapshot() { return index_->CoreSnapshot(); }

Status EtcdStateStore::SetMeta(const std::string& key, const std::string& value) {
  return Write([&]() -> Status {
    ARYL_RETURN_IF_ERROR(index_->SetMeta(key, value));
    pending_.push_back(etcd::Op::Put(Key("meta", key), value));
    return Status::Ok();
  });
}

Result<std::optional<std::string>> EtcdStateStore::GetMeta(const std::string& key) { return index_->GetMeta(key); }

}  // namespace aryl::daemon
