// etcd v3 client over etcd's HTTP/JSON gRPC gateway (cpp-httplib, nlohmann_json).
//
// Why the gateway: etcd serves every v3 RPC as JSON over HTTP on its client port
// (grpc-gateway), so the client needs no protobuf/gRPC code generation and no new
// dependency: the project already links cpp-httplib. Watch and lease keep-alive are
// streaming RPCs, and the gateway streams them too. The cost is the encoding: keys
// and values travel base64 in JSON (a third larger, plus parsing), int64s as JSON
// strings, and each watch or keep-alive is its own HTTP request.
//
// Gateway protocol (verified against etcd 3.4.23):
//  1. Every call is POST /v3/<service>/<method> with a JSON body that mirrors the
//     proto message (proto field names: "key", "range_end", "create_revision", "ID",
//     "TTL"); bytes fields are base64, int64 fields are sent as decimal strings.
//     Used: kv/range, kv/put, kv/deleterange, kv/txn, lease/grant, lease/keepalive,
//     lease/revoke, watch, cluster/member/list, maintenance/status; GET /health.
//  2. A unary answer is the response message as JSON; fields equal to their proto
//     default are omitted ("count" 0, "more" false, "kvs" empty, "type" PUT).
//  3. An error answer is an HTTP 4xx/5xx whose body is
//     {"error": msg, "message": msg, "code": <gRPC code>}, followed by an HTTP
//     trailer that cpp-httplib 0.11 cannot parse; the client reads the body through
//     a content receiver so that the etcd message survives.
//  4. A streaming RPC (watch, lease keep-alive) takes newline-separated request
//     messages as the body and answers one line per response message,
//     {"result": {...}} or {"error": {"grpc_code": c, "message": m, ...}}. The
//     keep-alive stream ends when the request body does; a watch stream stays open.
//  5. Every KV, lease and watch request carries "Grpc-Metadata-Hasleader: true", so
//     a member that has lost its leader answers at once "etcdserver: no leader"
//     (and cancels its watches) instead of holding the request; and "Grpc-Timeout",
//     so that etcd gives up a request slightly before the client does and says why.
//
// Failover rule: endpoints are tried starting with the preferred one (the last one
// that answered). A request that cannot connect, times out, or is refused by the
// member as unable to serve (gRPC codes 14 Unavailable or 4 DeadlineExceeded,
// "no leader", "request timed out") is retried once on each other endpoint in
// turn, so one call takes at most about request_timeout x endpoints. The endpoint
// that answers becomes the preferred one. Every other etcd error is returned as is.
// When no endpoint answers the result is Unavailable naming each endpoint's error.
// Like any retry after a timeout, a write that timed out may have been applied by
// the first member: make writes idempotent (a Txn that compares create_revision or
// mod_revision) when that matters.
//
// Error mapping: the etcd message is kept in the Status; gRPC codes map to
// InvalidArgument (3), NotFound (5), AlreadyExists (6), PermissionDenied (7, 16),
// FailedPrecondition (9), OutOfRange (11, "required revision has been compacted"),
// Unavailable (14, 8, and the leader/timeout messages above), Timeout (4),
// Cancelled (1), Internal otherwise. Transport failures are Unavailable.
//
// Thread safety: a Client may be used from many threads at once. Unary requests
// take an idle connection from a small per-endpoint pool (or open one), so they do
// not wait for each other; Watch and Health open their own connections, so a long
// watch never blocks other calls.
//
// Signals: over https:// a member that closes a connection (a refused client
// certificate, a restart) can make OpenSSL's write raise SIGPIPE; a process
// using the Client ignores SIGPIPE (aryl-scheduler does, in main).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "aryl/result.h"
#include "aryl/status.h"

namespace aryl::etcd {

struct KeyValue {
  std::string key, value;
  std::int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

// "etcd://h1:2379,h2:2379/prefix" -> endpoints {"http://h1:2379","http://h2:2379"}
// and prefix "/prefix/" (https:// when `tls` is true). Every host needs an explicit
// port (no silent default of 2379). IPv6 hosts are written "[::1]:2379". Errors
// name the bad part (InvalidArgument). The prefix must be non-empty.
struct EtcdUrl {
  std::vector<std::string> endpoints;
  std::string prefix;
};
Result<EtcdUrl> ParseEtcdUrl(std::string_view url, bool tls = false);

// The etcd range_end for "every key starting with prefix": the prefix with its
// last byte below 0xff incremented and what follows dropped; "\0" (every key from
// `key` on) when there is no such byte.
std::string PrefixEnd(std::string_view prefix);

struct ClientOptions {
  std::vector<std::string> endpoints;  // "http://host:port" or "https://host:port"
  // Seconds. Bounds the connect, and each read and write, of every HTTP request.
  double request_timeout = 2.0;
  // TLS (https endpoints): the CA that signed the members' certificates (empty:
  // the system's CAs) and an optional client certificate and key (both or neither).
  std::string ca_file, cert_file, key_file;
};

struct RangeOptions {
  std::int64_t limit = 0;             // 0: no limit
  std::int64_t revision = 0;          // 0: the newest revision
  std::int64_t min_mod_revision = 0;  // 0: no lower bound
  bool keys_only = false;
  bool count_only = false;
};

struct RangeResult {
  std::vector<KeyValue> kvs;  // ascending by key
  bool more = false;          // the limit cut the answer short
  std::int64_t count = 0;     // keys in the range (not only those returned)
  std::int64_t revision = 0;  // the store revision the answer was read at (header)
};

struct Compare {
  enum class Target { kVersion, kCreate, kMod, kValue, kLease };
  enum class Result { kEqual, kGreater, kLess, kNotEqual };
  std::string key;
  Target target = Target::kCreate;
  Result result = Result::kEqual;
  std::int64_t number = 0;  // version / create_revision / mod_revision / lease
  std::string value;        // Target::kValue
};

struct Op {
  enum class Kind { kPut, kDelete, kRange };
  Kind kind = Kind::kPut;
  std::string key, range_end, value;
  std::int64_t lease = 0;
  static Op Put(std::string k, std::string v, std::int64_t lease = 0);
  static Op Delete(std::string k, std::string range_end = {});
  static Op Get(std::string k, std::string range_end = {});
};

struct TxnRequest {
  std::vector<Compare> compare;
  std::vector<Op> success, failure;
};

struct TxnResult {
  bool succeeded = false;
  std::int64_t revision = 0;
  std::vector<RangeResult> ranges;  // one per kRange op of the branch taken, in order
};

struct WatchEvent {
  enum class Type { kPut, kDelete } type = Type::kPut;
  KeyValue kv;  // for kDelete: key and mod_revision (the deletion's revision)
};

struct Member {
  std::uint64_t id = 0;
  std::string name;  // empty for a member added but not yet started
  std::vector<std::string> client_urls;
};

struct EndpointHealth {
  std::string endpoint;
  bool healthy = false;      // GET /health said true and the member knows a leader
  std::string error;         // why not healthy
  double round_trip_ms = 0;  // of the status request
  std::uint64_t leader = 0;
  std::uint64_t raft_term = 0;
};

class Client {
 public:
  // Validates the options (endpoints' form, timeout, TLS files); does no I/O.
  static Result<std::unique_ptr<Client>> Connect(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Result<RangeResult> Range(const std::string& key, const std::string& range_end = {},
                            const RangeOptions& o = {});
  // The revision of the put (header).
  Result<std::int64_t> Put(const std::string& key, const std::string& value,
                           std::int64_t lease = 0);
  // The number of keys deleted.
  Result<std::int64_t> Delete(const std::string& key, const std::string& range_end = {});
  Result<TxnResult> Txn(const TxnRequest& txn);

  // The new lease's id; ttl_seconds must be positive.
  Result<std::int64_t> LeaseGrant(std::int64_t ttl_seconds);
  // Renews the lease once; the remaining TTL. NotFound when it expired or is unknown.
  Result<std::int64_t> LeaseKeepAlive(std::int64_t lease);
  // NotFound when the lease expired or is unknown.
  Status LeaseRevoke(std::int64_t lease);

  // Watches [key, range_end) from start_revision (0: from the revision current
  // when the first stream opens). Calls on_batch, on the calling thread, for every
  // non-empty batch of events, in revision order, with the batch's header revision.
  // Returns Ok when `stop` becomes true (noticed within ~50 ms), when on_batch
  // returns false, or when max_seconds (> 0) pass; the caller then watches again
  // from the last event's mod_revision + 1. (The header revision can run ahead of
  // the events while a watcher catches up on history; resume from the events.)
  //
  // The stream is re-opened inside Watch, from the revision after the last event
  // delivered, when it ends or stays silent for 2 x request_timeout (an idle watch
  // gets no data, and a silent stream may be a frozen member); an endpoint that
  // cannot open it within request_timeout, or whose member has no leader, is left
  // for the next; when every endpoint in turn failed, it goes round again after
  // 0.2 s (members refuse at once while they elect a new leader). Returns
  // OutOfRange naming the compact revision when the start revision has been
  // compacted, and Unavailable naming each endpoint's error when every endpoint
  // has failed to open or keep the stream for max(2 x request_timeout, 3 s). Uses its own
  // connection (one per Watch call) and one watchdog thread that enforces stop,
  // max_seconds and the timeouts (cpp-httplib's stop() ends a blocked read).
  Status Watch(
      const std::string& key, const std::string& range_end, std::int64_t start_revision,
      const std::function<bool(const std::vector<WatchEvent>&, std::int64_t revision)>& on_batch,
      const std::atomic<bool>& stop, double max_seconds);

  // Members as the answering member knows them (needs no quorum).
  Result<std::vector<Member>> MemberList();
  // One per configured endpoint, in order, queried in parallel: GET /health plus
  // POST /v3/maintenance/status. Takes at most about 2 x request_timeout.
  std::vector<EndpointHealth> Health();

  double last_round_trip_ms() const;  // of the last successful request
  // The preferred endpoint (the last one that answered); the reference stays valid
  // for the Client's lifetime, its value may change after a failover.
  const std::string& current_endpoint() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace aryl::etcd
