// Encoding and strict decoding of the messages in messages.h.
//
// Each message lists its fields once (Visit); an encoding visitor and a decoding
// visitor walk that list, so the two directions cannot drift apart. The decoding
// visitor checks presence, JSON type and range of every field, then rejects any
// field it did not visit, then runs the message's own Validate() when it has one.
#include "aryl/protocol/messages.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstdio>
#include <set>
#include <type_traits>

#include "aryl/base64.h"

namespace aryl::protocol {
namespace {

using nlohmann::json;

// --- enumerations -------------------------------------------------------------------

template <typename E, std::size_t N>
using NameTable = std::array<std::pair<E, std::string_view>, N>;

constexpr NameTable<Pool, 2> kPoolNames{
    {{Pool::kTraining, "training"}, {Pool::kInference, "inference"}}};
constexpr NameTable<JobState, 9> kJobStateNames{{{JobState::kQueued, "queued"},
                                                 {JobState::kStarting, "starting"},
                                                 {JobState::kRunning, "running"},
                                                 {JobState::kResizing, "resizing"},
                                                 {JobState::kCheckpointing, "checkpointing"},
                                                 {JobState::kPreempted, "preempted"},
                                                 {JobState::kCompleted, "completed"},
                                                 {JobState::kFailed, "failed"},
                                                 {JobState::kCancelled, "cancelled"}}};
constexpr NameTable<NodeState, 8> kNodeStateNames{{{NodeState::kAvailable, "available"},
                                                   {NodeState::kHeld, "held"},
                                                   {NodeState::kLoaned, "loaned"},
                                                   {NodeState::kReclaiming, "reclaiming"},
                                                   {NodeState::kFailed, "failed"},
                                                   {NodeState::kDisconnected, "disconnected"},
                                                   {NodeState::kDraining, "draining"},
                                                   {NodeState::kDrained, "drained"}}};
constexpr std::array<Status::Code, 13> kAllCodes{Status::Code::kOk,
                                                 Status::Code::kInvalidArgument,
                                                 Status::Code::kNotFound,
                                                 Status::Code::kAlreadyExists,
                                                 Status::Code::kFailedPrecondition,
                                                 Status::Code::kOutOfRange,
                                                 Status::Code::kCorruption,
                                                 Status::Code::kTimeout,
                                                 Status::Code::kUnavailable,
                                                 Status::Code::kIoError,
                                                 Status::Code::kPermissionDenied,
                                                 Status::Code::kCancelled,
                                                 Status::Code::kInternal};

template <typename E, std::size_t N>
std::string_view NameOf(const NameTable<E, N>& table, E v) {
  for (const auto& [e, name] : table)
    if (e == v) return name;
  return "?";
}

template <typename E, std::size_t N>
bool ValueOf(const NameTable<E, N>& table, std::string_view s, E* out) {
  for (const auto& [e, name] : table) {
    if (name == s) {
      *out = e;
      return true;
    }
  }
  return false;
}

template <typename E, std::size_t N>
std::string Choices(const NameTable<E, N>& table) {
  std::string s;
  for (const auto& [e, name] : table) {
    if (!s.empty()) s += '|';
    s += name;
  }
  return s;
}

std::string EnumChoices(Pool) { return Choices(kPoolNames); }
std::string EnumChoices(JobState) { return Choices(kJobStateNames); }
std::string EnumChoices(NodeState) { return Choices(kNodeStateNames); }
std::string EnumChoices(Status::Code) {
  std::string s;
  for (auto c : kAllCodes) {
    if (c == Status::Code::kOk) continue;
    if (!s.empty()) s += '|';
    s += Status::CodeName(c);
  }
  return s;
}

// --- helpers --------------------------------------------------------------------------

template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

template <typename T>
concept HasValidate = requires(const T& t) {
  { t.Validate() } -> std::same_as<Status>;
};

std::string Preview(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 48) s = s.substr(0, 45) + "...";
  return s;
}

std::string FormatNumber(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", x);
  return buf;
}

// "integer >= 1", "number in [0, 86400]", "integer".
std::string Expected(std::string_view what, const Rule& r) {
  std::string s(what);
  bool lo = std::isfinite(r.min), hi = std::isfinite(r.max);
  if (lo && hi) {
    s += " in [" + FormatNumber(r.min) + ", " + FormatNumber(r.max) + "]";
  } else if (lo) {
    s += " >= " + FormatNumber(r.min);
  } else if (hi) {
    s += " <= " + FormatNumber(r.max);
  }
  return s;
}

Status FieldError(const std::string& path, const std::string& what) {
  return Status::InvalidArgument("field '" + path + "': " + what);
}

Status TypeError(const std::string& path, const std::string& expected, const json& got) {
  return FieldError(path, "expected " + expected + ", got " + Preview(got));
}

// --- encoding ---------------------------------------------------------------------------

struct EncodeVisitor {
  json* out;

  template <typename T>
  void operator()(std::string_view name, const T& field, Rule = {}) {
    (*out)[std::string(name)] = ToValue(field);
  }

  template <typename T>
  static json ToValue(const T& v) {
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string> ||
                  std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint64_t>) {
      return json(v);
    } else if constexpr (std::is_same_v<T, double>) {
      return std::isfinite(v) ? json(v) : json(nullptr);
    } else if constexpr (std::is_same_v<T, Bytes>) {
      return json(Base64Encode(v.data));
    } else if constexpr (std::is_same_v<T, json>) {
      return v;
    } else if constexpr (std::is_enum_v<T>) {
      return json(std::string(ToString(v)));
    } else if constexpr (IsOptional<T>::value) {
      return v ? ToValue(*v) : json(nullptr);
    } else if constexpr (IsVector<T>::value) {
      json a = json::array();
      for (const auto& e : v) a.push_back(ToValue(e));
      return a;
    } else if constexpr (std::is_same_v<T, std::map<std::string, std::string>>) {
      json o = json::object();
      for (const auto& [k, val] : v) o[k] = val;
      return o;
    } else {
      json o = json::object();
      EncodeVisitor sub{&o};
      const_cast<T&>(v).Visit(sub);  // Visit only reads through this visitor
      return o;
    }
  }
};

// --- decoding ---------------------------------------------------------------------------

// Where a value sits in the frame ("workers[2].rank"); rendered only for errors, so
// decoding a valid frame allocates no path strings.
struct Path {
  const Path* parent = nullptr;
  std::string_view name;  // a field name; empty for an array element
  std::size_t index = 0;  // the element index when name is empty
  std::string str() const {
    std::string s = parent ? parent->str() : std::string();
    if (name.empty()) {
      s += "[" + std::to_string(index) + "]";
    } else {
      if (!s.empty()) s += '.';
      s += name;
    }
    return s;
  }
};

Status TypeError(const Path& path, const std::string& expected, const json& got) {
  return TypeError(path.str(), expected, got);
}

// Collects a message's field names (to name an unknown field).
struct NameCollector {
  std::vector<std::string_view> names;
  template <typename T>
  void operator()(std::string_view name, T&, Rule = {}) {
    names.push_back(name);
  }
};

struct DecodeVisitor {
  const json* in;           // the object whose fields are visited
  const Path* parent;       // null at top level
  Status status;            // first error
  std::size_t present = 0;  // visited fields found in the object

  template <typename T>
  void operator()(std::string_view name, T& field, Rule rule = {}) {
    if (!status.ok()) return;
    Path path{parent, name, 0};
    auto it = in->find(name);
    if (it == in->end()) {
      if constexpr (IsOptional<T>::value) {
        field.reset();
        return;
      } else {
        status = Status::InvalidArgument("missing field '" + path.str() + "'");
        return;
      }
    }
    ++present;
    status = FromValue(*it, &field, rule, path);
  }

  // Rejects keys that are not fields of M (nor reserved, like "v" and "type").
  template <typename M>
  Status CheckUnknown(std::initializer_list<std::string_view> reserved = {}) const {
    std::size_t expected = present;
    for (auto r : reserved) expected += in->count(r);
    if (in->size() == expected) return Status::Ok();
    NameCollector c;
    M{}.Visit(c);
    for (auto r : reserved) c.names.push_back(r);
    for (auto it = in->begin(); it != in->end(); ++it) {
      if (std::find(c.names.begin(), c.names.end(), std::string_view(it.key())) == c.names.end()) {
        std::string prefix = parent ? parent->str() + "." : std::string();
        return Status::InvalidArgument("unknown field '" + prefix + it.key() + "'");
      }
    }
    return Status::Ok();
  }

  static Status CheckRange(double x, const Rule& r, const Path& path, std::string_view what,
                           const json& j) {
    if (x < r.min || x > r.max) return TypeError(path, Expected(what, r), j);
    return Status::Ok();
  }

  template <typename T>
  static Status FromValue(const json& j, T* out, const Rule& r, const Path& path) {
    if constexpr (std::is_same_v<T, bool>) {
      if (!j.is_boolean()) return TypeError(path, "boolean", j);
      *out = j.get<bool>();
      return Status::Ok();
    } else if constexpr (std::is_same_v<T, std::int64_t>) {
      if (!j.is_number_integer()) return TypeError(path, Expected("integer", r), j);
      if (j.is_number_unsigned() &&
          j.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
        return TypeError(path, Expected("64-bit integer", r), j);
      std::int64_t v = j.get<std::int64_t>();
      ARYL_RETURN_IF_ERROR(CheckRange(double(v), r, path, "integer", j));
      *out = v;
      return Status::Ok();
    } else if constexpr (std::is_same_v<T, std::uint64_t>) {
      if (!j.is_number_unsigned()) return TypeError(path, Expected("integer >= 0", r), j);
      std::uint64_t v = j.get<std::uint64_t>();
      ARYL_RETURN_IF_ERROR(CheckRange(double(v), r, path, "integer", j));
      *out = v;
      return Status::Ok();
    } else if constexpr (std::is_same_v<T, double>) {
      if (j.is_null() && r.nan_allowed) {
        *out = std::numeric_limits<double>::quiet_NaN();
        return Status::Ok();
      }
      if (!j.is_number()) return TypeError(path, Expected("number", r), j);
      double v = j.get<double>();
      if (!std::isfinite(v)) return TypeError(path, Expected("finite number", r), j);
      ARYL_RETURN_IF_ERROR(CheckRange(v, r, path, "number", j));
      *out = v;
      return Status::Ok();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!j.is_string()) return TypeError(path, r.non_empty ? "non-empty string" : "string", j);
      const auto& s = j.get_ref<const std::string&>();
      if (r.non_empty && s.empty()) return TypeError(path, "non-empty string", j);
      *out = s;
      return Status::Ok();
    } else if constexpr (std::is_same_v<T, Bytes>) {
      if (!j.is_string()) return TypeError(path, "base64 string", j);
      if (!Base64Decode(j.get_ref<const std::string&>(), &out->data))
        return TypeError(path, "base64 string", j);
      return Status::Ok();
    } else if constexpr (std::is_same_v<T, json>) {
      *out = j;
      return Status::Ok();
    } else if constexpr (std::is_enum_v<T>) {
      if (!j.is_string() || !FromString(j.get_ref<const std::string&>(), out) ||
          (std::is_same_v<T, Status::Code> && *out == T{}))
        return TypeError(path, "one of " + EnumChoices(T{}), j);
      return Status::Ok();
    } else if constexpr (IsOptional<T>::value) {
      if (j.is_null()) {
        out->reset();
        return Status::Ok();
      }
      typename T::value_type v{};
      ARYL_RETURN_IF_ERROR(FromValue(j, &v, r, path));
      *out = std::move(v);
      return Status::Ok();
    } else if constexpr (IsVector<T>::value) {
      if (!j.is_array()) return TypeError(path, r.non_empty ? "non-empty array" : "array", j);
      if (r.non_empty && j.empty()) return TypeError(path, "non-empty array", j);
      Rule elem = r;
      elem.non_empty = r.elem_non_empty;
      out->clear();
      out->reserve(j.size());
      for (std::size_t i = 0; i < j.size(); ++i) {
        typename T::value_type v{};
        ARYL_RETURN_IF_ERROR(FromValue(j[i], &v, elem, Path{&path, {}, i}));
        out->push_back(std::move(v));
      }
      return Status::Ok();
    } else if constexpr (std::is_same_v<T, std::map<std::string, std::string>>) {
      if (!j.is_object()) return TypeError(path, "object of strings", j);
      out->clear();
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!it.value().is_string())
          return TypeError(path.str() + "." + it.key(), "string", it.value());
        (*out)[it.key()] = it.value().template get<std::string>();
      }
      return Status::Ok();
    } else {
      if (!j.is_object()) return TypeError(path, "object", j);
      *out = T{};
      DecodeVisitor sub{&j, &path, Status::Ok()};
      out->Visit(sub);
      ARYL_RETURN_IF_ERROR(sub.status);
      return sub.template CheckUnknown<T>();
    }
  }
};

// Deeper JSON than any message needs is refused before parsing, so a frame of a
// million '[' costs a scan, not a million nested values.
constexpr int kMaxDepth = 32;

bool TooDeep(std::string_view frame) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : frame) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

template <typename T>
Result<Message> DecodeBody(const json& obj) {
  T msg{};
  DecodeVisitor v{&obj, nullptr, Status::Ok()};
  msg.Visit(v);
  Status s = v.status;
  if (s.ok()) s = v.CheckUnknown<T>({"v", "type"});
  if constexpr (HasValidate<T>) {
    if (s.ok()) s = msg.Validate();
  }
  if (!s.ok()) return s.WithContext(T::kType);
  return Message(std::move(msg));
}

using DecodeFn = Result<Message> (*)(const json&);
struct TypeEntry {
  std::string_view name;
  DecodeFn decode;
};

#define ARYL_PROTOCOL_ENTRY_(T) TypeEntry{T::kType, &DecodeBody<T>},
constexpr TypeEntry kTypes[] = {ARYL_PROTOCOL_MESSAGES(ARYL_PROTOCOL_ENTRY_)};
#undef ARYL_PROTOCOL_ENTRY_

template <typename T>
json ToJsonImpl(const T& msg) {
  json o = json::object();
  o["v"] = kProtocolVersion;
  o["type"] = std::string(T::kType);
  EncodeVisitor v{&o};
  const_cast<T&>(msg).Visit(v);
  return o;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

Status CheckEnv(const std::map<std::string, std::string>& env) {
  for (const auto& [k, v] : env) {
    if (k.empty() || k.find('=') != std::string::npos)
      return FieldError("env", "variable name '" + k + "' is empty or contains '='");
  }
  return Status::Ok();
}

Status CheckUnique(const std::vector<WorkerId>& ids, const char* field) {
  std::set<WorkerId> seen;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!seen.insert(ids[i]).second)
      return FieldError(std::string(field) + "[" + std::to_string(i) + "]",
                        "duplicate worker " + std::to_string(ids[i]));
  }
  return Status::Ok();
}

}  // namespace

// --- enums ----------------------------------------------------------------------------

std::string_view ToString(Pool v) { return NameOf(kPoolNames, v); }
std::string_view ToString(JobState v) { return NameOf(kJobStateNames, v); }
std::string_view ToString(NodeState v) { return NameOf(kNodeStateNames, v); }
std::string_view ToString(Status::Code v) { return Status::CodeName(v); }
bool FromString(std::string_view s, Pool* out) { return ValueOf(kPoolNames, s, out); }
bool FromString(std::string_view s, JobState* out) { return ValueOf(kJobStateNames, s, out); }
bool FromString(std::string_view s, NodeState* out) { return ValueOf(kNodeStateNames, s, out); }
bool FromString(std::string_view s, Status::Code* out) {
  for (auto c : kAllCodes) {
    if (Status::CodeName(c) == s) {
      *out = c;
      return true;
    }
  }
  return false;
}
bool IsTerminal(JobState s) {
  return s == JobState::kCompleted || s == JobState::kFailed || s == JobState::kCancelled;
}

// --- message-level checks ------------------------------------------------------------------

Status StartWorkers::Validate() const {
  if (argv[0].empty()) return FieldError("argv[0]", "expected non-empty string, got \"\"");
  ARYL_RETURN_IF_ERROR(CheckEnv(env));
  ARYL_RETURN_IF_ERROR(CheckUnique(members, "members"));
  std::set<std::int64_t> slots;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const auto& w = workers[i];
    std::string path = "workers[" + std::to_string(i) + "]";
    if (w.rank >= std::int64_t(members.size()) || members[w.rank] != w.worker)
      return FieldError(path + ".rank", "worker " + std::to_string(w.worker) + " is not member " +
                                            std::to_string(w.rank) + " of 'members'");
    if (!slots.insert(w.local_slot).second)
      return FieldError(path + ".local_slot",
                        "slot " + std::to_string(w.local_slot) + " used twice");
  }
  return Status::Ok();
}

Status NewGeneration::Validate() const {
  ARYL_RETURN_IF_ERROR(CheckUnique(members, "members"));
  ARYL_RETURN_IF_ERROR(CheckUnique(leaving, "leaving"));
  for (std::size_t i = 0; i < leaving.size(); ++i) {
    for (WorkerId m : members) {
      if (m == leaving[i])
        return FieldError("leaving[" + std::to_string(i) + "]",
                          "worker " + std::to_string(m) + " leaves but is in 'members'");
    }
  }
  return Status::Ok();
}

bool IsWorkerOutcome(std::string_view s) {
  return s == "completed" || s == "stopped" || s == "left" || s == "interrupted" || s == "failed";
}

Status WorkerExited::Validate() const {
  if (exit_code.has_value() == signal.has_value())
    return FieldError("exit_code", "exactly one of 'exit_code' and 'signal' must be set");
  if (!outcome.empty() && !IsWorkerOutcome(outcome))
    return FieldError("outcome", "expected completed, stopped, left, interrupted or failed, got \"" + outcome + "\"");
  return Status::Ok();
}

std::string WorkerEnd::Who() const {
  return "worker " + std::to_string(worker) + " (rank " + std::to_string(rank) + ")" +
         (node.empty() ? "" : " on " + node);
}

std::string WorkerEnd::How() const {
  if (!error.empty()) return "could not start: " + error;
  if (signal) return "was killed by signal " + std::to_string(*signal);
  return "exited with " + std::to_string(exit_code.value_or(0));
}

Status NodeCommand::Validate() const {
  if (action != "drain" && action != "drain-now" && action != "resume" && action != "remove")
    return FieldError("action", "expected drain, drain-now, resume or remove, got \"" + action + "\"");
  return Status::Ok();
}

Status WorkerDone::Validate() const {
  if (!IsWorkerOutcome(outcome))
    return FieldError("outcome", "expected completed, stopped, left, interrupted or failed, got \"" + outcome + "\"");
  return Status::Ok();
}

// Printable text for names shown in terminals: no C0/C1 control characters
// (ANSI escape sequences start with one), no DEL, no bidirectional controls.
Status CheckPrintable(const std::string& field, const std::string& s, std::size_t max) {
  if (s.size() > max)
    return FieldError(field, "at most " + std::to_string(max) + " bytes, got " + std::to_string(s.size()));
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    bool c1 = c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
              static_cast<unsigned char>(s[i + 1]) <= 0x9f;
    auto at = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
    // Bidirectional controls (U+200E/F, U+202A-E, U+2066-9): a name could
    // reorder what a terminal or an editor shows after it.
    bool bidi = c == 0xe2 && ((at(1) == 0x80 && (at(2) == 0x8e || at(2) == 0x8f || (at(2) >= 0xaa && at(2) <= 0xae))) ||
                              (at(1) == 0x81 && at(2) >= 0xa6 && at(2) <= 0xa9));
    if (bidi) {
      char cp[12];
      std::snprintf(cp, sizeof cp, "U+%04X", 0x2000 + ((at(1) & 0x3f) << 6) + (at(2) & 0x3f));
      return FieldError(field, "no bidirectional control characters, got " + std::string(cp) + " at byte " +
                                   std::to_string(i));
    }
    if (c < 0x20 || c == 0x7f || c1) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c1 ? static_cast<unsigned char>(s[i + 1]) : c);
      return FieldError(field, "printable characters only, got control character " + std::string(hex) +
                                   " at byte " + std::to_string(i));
    }
  }
  return Status::Ok();
}

Status SubmitJob::Validate() const {
  if (argv[0].empty()) return FieldError("argv[0]", "expected non-empty string, got \"\"");
  ARYL_RETURN_IF_ERROR(CheckPrintable("name", name, kMaxJobName));
  ARYL_RETURN_IF_ERROR(CheckEnv(env));
  if (workers.has_value()) {
    if (min_workers || max_workers)
      return FieldError("workers",
                        "give either 'workers' or 'min_workers'/'max_workers', not both");
  } else {
    if (!min_workers || !max_workers)
      return FieldError("workers",
                        "missing: give 'workers', or both 'min_workers' and 'max_workers'");
    if (*min_workers > *max_workers)
      return FieldError("min_workers", "min_workers " + std::to_string(*min_workers) +
                                           " > max_workers " + std::to_string(*max_workers));
  }
  if (client_token && (client_token->empty() || client_token->size() > 128))
    return FieldError("client_token", "expected 1 to 128 characters, got " +
                                          std::to_string(client_token->size()));
  if (elastic && *elastic != "inplace" && *elastic != "restart")
    return FieldError("elastic", "expected \"inplace\" or \"restart\", got \"" + *elastic + "\"");
  if (queue) ARYL_RETURN_IF_ERROR(CheckPrintable("queue", *queue, kMaxJobName));
  if (priority && *priority != "low" && *priority != "normal" && *priority != "high")
    return FieldError("priority", "expected \"low\", \"normal\" or \"high\", got \"" + *priority + "\"");
  return Status::Ok();
}

Status PoolReclaim::Validate() const {
  if ((count > 0) == !servers.empty())
    return FieldError("count", "give exactly one of 'count' >= 1 and a non-empty 'servers'");
  return Status::Ok();
}

Status Error::Validate() const {
  if (code == Status::Code::kOk) return FieldError("code", "an error cannot have code OK");
  return Status::Ok();
}

Error Error::FromStatus(const Status& s) {
  Error e;
  e.code = s.ok() ? Status::Code::kInternal : s.code();
  e.message = s.ok() ? "error made from an OK status" : s.message();
  return e;
}

Status Error::ToStatus() const {
  switch (code) {
    case Status::Code::kInvalidArgument:
      return Status::InvalidArgument(message);
    case Status::Code::kNotFound:
      return Status::NotFound(message);
    case Status::Code::kAlreadyExists:
      return Status::AlreadyExists(message);
    case Status::Code::kFailedPrecondition:
      return Status::FailedPrecondition(message);
    case Status::Code::kOutOfRange:
      return Status::OutOfRange(message);
    case Status::Code::kCorruption:
      return Status::Corruption(message);
    case Status::Code::kTimeout:
      return Status::Timeout(message);
    case Status::Code::kUnavailable:
      return Status::Unavailable(message);
    case Status::Code::kIoError:
      return Status::IoError(message);
    case Status::Code::kPermissionDenied:
      return Status::PermissionDenied(message);
    case Status::Code::kCancelled:
      return Status::Cancelled(message);
    case Status::Code::kOk:
    case Status::Code::kInternal:
      break;
  }
  return Status::Internal(message);
}

Status GenerationAnnounce::Validate() const { return CheckUnique(members, "members"); }

// --- Encode / Decode -------------------------------------------------------------------------

#define ARYL_PROTOCOL_DEFINE_ENCODE_(T) \
  std::string Encode(const T& msg) { return Dump(ToJsonImpl(msg)); }
ARYL_PROTOCOL_MESSAGES(ARYL_PROTOCOL_DEFINE_ENCODE_)
#undef ARYL_PROTOCOL_DEFINE_ENCODE_

std::string Encode(const Message& msg) {
  return std::visit([](const auto& m) { return Encode(m); }, msg);
}

nlohmann::json ToJson(const Message& msg) {
  return std::visit([](const auto& m) { return ToJsonImpl(m); }, msg);
}

std::string_view TypeName(const Message& msg) {
  return std::visit([](const auto& m) -> std::string_view { return m.kType; }, msg);
}

std::vector<std::string_view> AllTypeNames() {
  std::vector<std::string_view> names;
  for (const auto& e : kTypes) names.push_back(e.name);
  return names;
}

Result<Message> Decode(std::string_view frame) {
  if (frame.empty()) return Status::InvalidArgument("empty frame");
  if (frame.size() > kMaxFrameBytes)
    return Status::InvalidArgument("frame of " + std::to_string(frame.size()) +
                                   " bytes exceeds the limit of " + std::to_string(kMaxFrameBytes) +
                                   " bytes");
  if (TooDeep(frame))
    return Status::InvalidArgument("invalid JSON: nested deeper than " + std::to_string(kMaxDepth) +
                                   " levels");
  json obj;
  try {
    obj = json::parse(frame.begin(), frame.end());
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("invalid JSON: ") + e.what());
  }
  if (!obj.is_object())
    return Status::InvalidArgument("frame is not a JSON object: " + Preview(obj));

  auto v = obj.find("v");
  if (v == obj.end()) return Status::InvalidArgument("missing field 'v' (protocol version)");
  if (!v->is_number_integer()) return TypeError("v", "integer protocol version", *v);
  if (!v->is_number_unsigned() || v->get<std::uint64_t>() != kProtocolVersion)
    return FieldError("v", "unsupported protocol version " + Preview(*v) + " (this build speaks " +
                               std::to_string(kProtocolVersion) + ")");

  auto t = obj.find("type");
  if (t == obj.end()) return Status::InvalidArgument("missing field 'type'");
  if (!t->is_string()) return TypeError("type", "string", *t);
  const auto& type = t->get_ref<const std::string&>();
  for (const auto& entry : kTypes) {
    if (entry.name == type) {
      try {
        return entry.decode(obj);
      } catch (const std::exception& e) {  // not expected: every access is checked first
        return Status::InvalidArgument(type + ": " + e.what());
      }
    }
  }
  return FieldError("type", "unknown message type " + Preview(*t));
}

}  // namespace aryl::protocol
