#include "aryl/protocol/scheduler_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace aryl::protocol {
namespace {

using SteadyClock = std::chrono::steady_clock;
// How long an endpoint that gave no reply is passed over (step 4).
constexpr std::chrono::seconds kSilentMemory{10};
using std::chrono::milliseconds;

constexpr std::string_view kStandbyPrefix = "standby: not the leader";
constexpr std::string_view kLeaderIs = "; the leader is ";

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Why `item` is not an endpoint a client can connect to; empty when it is.
std::string EndpointProblem(std::string_view item) {
  for (std::string_view scheme : {"ipc://", "inproc://"}) {
    if (item.substr(0, scheme.size()) == scheme)
      return item.size() > scheme.size() ? "" : "no address after " + std::string(scheme);
  }
  constexpr std::string_view kTcp = "tcp://";
  if (item.substr(0, kTcp.size()) != kTcp) return "expected tcp://HOST:PORT, ipc://PATH or inproc://NAME";
  std::string_view hostport = item.substr(kTcp.size());
  auto colon = hostport.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return "expected tcp://HOST:PORT";
  std::string_view port = hostport.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
    return "port '" + std::string(port) + "' is not a number in [1, 65535]";
  return "";
}

std::string Join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// The standby message within `text` (a Status may carry context before it).
std::optional<std::string_view> StandbyText(std::string_view text) {
  auto at = text.find(kStandbyPrefix);
  if (at == std::string_view::npos) return std::nullopt;
  return text.substr(at);
}

std::optional<std::string> HintIn(std::string_view text) {
  auto standby = StandbyText(text);
  if (!standby) return std::nullopt;
  auto at = standby->find(kLeaderIs);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view endpoint = Trim(standby->substr(at + kLeaderIs.size()));
  auto parsed = ParseSchedulerEndpoints(endpoint);
  if (!parsed.ok() || parsed->size() != 1) return std::nullopt;
  return parsed->front();
}

}  // namespace

Result<std::vector<std::string>> ParseSchedulerEndpoints(std::string_view list) {
  if (Trim(list).empty()) return Status::InvalidArgument("scheduler endpoint list is empty");
  std::vector<std::string> out;
  std::size_t start = 0, n = 0;
  while (true) {
    std::size_t comma = list.find(',', start);
    std::string_view item = Trim(list.substr(start, comma == std::string_view::npos ? list.npos : comma - start));
    ++n;
    std::string where = "scheduler endpoint list '" + std::string(list) + "': item " + std::to_string(n);
    if (item.empty()) return Status::InvalidArgument(where + " is empty");
    if (std::string problem = EndpointProblem(item); !problem.empty())
      return Status::InvalidArgument(where + " '" + std::string(item) + "': " + problem);
    if (std::find(out.begin(), out.end(), item) != out.end())
      return Status::InvalidArgument(where + " '" + std::string(item) + "' is listed twice");
    out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Error StandbyError(std::string_view leader_endpoint, std::uint64_t term) {
  Error e;
  e.code = Status::Code::kUnavailable;
  e.message = leader_endpoint.empty()
                  ? std::string(kStandbyPrefix) + "; no leader is known yet (election in progress)"
                  : std::string(kStandbyPrefix) + " (term " + std::to_string(term) + ")" + std::string(kLeaderIs) +
                        std::string(leader_endpoint);
  return e;
}

Error FrozenError(std::string_view why) {
  Error e;
  e.code = Status::Code::kUnavailable;
  e.message = std::string(kFrozenPrefix) + std::string(why) + "); retry in a few seconds";
  return e;
}
bool IsFrozenError(const Error& e) {
  return e.code == Status::Code::kUnavailable && e.message.rfind(kFrozenPrefix, 0) == 0;
}

bool IsFrozenError(const Status& s) {
  return s.IsUnavailable() && s.message().find(kFrozenPrefix) != std::string::npos;
}

bool IsStandbyError(const Status& s) { return s.IsUnavailable() && StandbyText(s.message()).has_value(); }
bool IsStandbyError(const Error& e) {
  return e.code == Status::Code::kUnavailable && StandbyText(e.message).has_value();
}
std::optional<std::string> LeaderHint(const Error& e) {
  return IsStandbyError(e) ? HintIn(e.message) : std::nullopt;
}
std::optional<std::string> LeaderHint(const Status& s) {
  return IsStandbyError(s) ? HintIn(s.message()) : std::nullopt;
}

// --- SchedulerClient ---------------------------------------------------------------------

class SchedulerClient::Impl {
 public:
  Options options;

  mutable std::mutex mu;  // guards everything below
  std::vector<std::string> endpoints;
  std::size_t index = 0;            // endpoints[index] is current
  std::shared_ptr<Client> current;  // shared: a call on it outlives a move
  std::uint64_t moves = 0;          // bumped by every move
  bool closed = false;
  std::mt19937_64 rng{std::random_device{}()};

  struct Snapshot {
    std::shared_ptr<Client> client;
    std::uint64_t moves = 0;
    std::string endpoint;
  };

  Result<std::shared_ptr<Client>> ConnectTo(const std::string& endpoint) const {
    Client::Options co;
    co.endpoint = endpoint;
    co.identity = options.identity;
    co.curve = options.curve;
    co.socket = options.socket;
    co.max_queued_pushes = options.max_queued_pushes;
    co.context = options.context;
    ARYL_ASSIGN_OR_RETURN(auto c, Client::Connect(std::move(co)));
    return std::shared_ptr<Client>(std::move(c));
  }

  Result<Snapshot> Current() const {
    std::lock_guard<std::mutex> lock(mu);
    if (closed || !current) return Status::Cancelled("scheduler client is closed");
    return Snapshot{current, moves, endpoints[index]};
  }

  // Moves to endpoints[target] unless another thread moved since `seen`
  // (its move answers the same failure). Staying on the current endpoint
  // keeps the socket unless `reconnect_same`.
  Status MoveLocked(std::size_t target, std::uint64_t seen, const std::string& reason, bool reconnect_same) {
    if (closed) return Status::Cancelled("scheduler client is closed");
    if (seen != moves) return Status::Ok();
    const std::string from = endpoints[index];
    if (target == index && !reconnect_same) return Status::Ok();
    ARYL_ASSIGN_OR_RETURN(auto next, ConnectTo(endpoints[target]));
    current = std::move(next);  // the old Client closes once no call uses it
    index = target;
    ++moves;
    spdlog::info("scheduler {} -> {} ({})", from, endpoints[index], reason);
    return Status::Ok();
  }

  // Endpoints that gave no reply (a try's timeout, or Failover), and when.
  std::map<std::string, SteadyClock::time_point> silent_at;

  bool RecentlySilentLocked(const std::string& endpoint) const {
    auto it = silent_at.find(endpoint);
    return it != silent_at.end() && SteadyClock::now() - it->second < kSilentMemory;
  }

  // Step 4: where to go after a failed try at endpoints[index]; `election`:
  // it was a standby that knows no leader yet.
  std::size_t TargetLocked(const std::optional<std::string>& hint, bool election = false) {
    if (hint) {
      auto it = std::find(endpoints.begin(), endpoints.end(), *hint);
      if (it != endpoints.end()) return static_cast<std::size_t>(it - endpoints.begin());
      endpoints.push_back(*hint);  // a leader outside the list joins it
      return endpoints.size() - 1;
    }
    const std::size_t n = endpoints.size();
    for (std::size_t k = 1; k < n; ++k) {
      const std::size_t i = (index + k) % n;
      if (!RecentlySilentLocked(endpoints[i])) return i;
    }
    // Every other endpoint was silent lately: a standby in an election is
    // asked again (it may be about to lead); otherwise keep going round.
    return election ? index : (index + 1) % n;
  }

  milliseconds Jitter(milliseconds d) {
    std::uniform_real_distribution<double> f(0.75, 1.25);
    std::lock_guard<std::mutex> lock(mu);
    return milliseconds(static_cast<std::int64_t>(double(d.count()) * f(rng)));
  }

  Result<Message> Request(const Message& msg, milliseconds per_try) {
    const auto start = SteadyClock::now();
    const auto deadline = start + options.total_timeout;
    std::vector<std::string> tried;
    Status last = Status::Timeout("no try made");
    milliseconds backoff = options.backoff_initial;
    bool last_followed_hint = false;
    int tries = 0;
    while (true) {
      ARYL_ASSIGN_OR_RETURN(Snapshot at, Current());
      if (std::find(tried.begin(), tried.end(), at.endpoint) == tried.end()) tried.push_back(at.endpoint);
      auto left = std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now());
      milliseconds timeout = std::max(milliseconds(1), std::min(per_try, left));
      ++tries;
      auto reply = at.client->Request(msg, timeout);
      std::optional<std::string> hint;
      std::string reason;
      if (reply.ok()) {
        {
          std::lock_guard<std::mutex> lock(mu);
          silent_at.erase(at.endpoint);  // it answers
        }
        const auto* e = std::get_if<Error>(&*reply);
        if (e && IsFrozenError(*e)) {
          // The leader, frozen: ask it again after a backoff, where we are.
          last = e->ToStatus();
          milliseconds d = Jitter(backoff);
          backoff = std::min(backoff * 2, options.backoff_max);
          if (SteadyClock::now() + d >= deadline) break;
          std::this_thread::sleep_for(d);
          continue;
        }
        if (!e || !IsStandbyError(*e)) return reply;
        last = e->ToStatus();
        hint = LeaderHint(*e);
        if (hint && *hint == at.endpoint) hint.reset();
        reason = hint ? "a standby; it names the leader" : "a standby; no leader is known yet";
      } else if (reply.status().IsTimeout()) {
        last = reply.status();
        if (timeout >= milliseconds(100)) {  // a last sliver of the budget says nothing
          std::lock_guard<std::mutex> lock(mu);
          silent_at[at.endpoint] = SteadyClock::now();
        }
        bool connected = reply.status().message().rfind("not connected", 0) != 0;
        reason = (connected ? "no reply within " : "not connected within ") + std::to_string(timeout.count()) + " ms";
      } else {
        return reply.status();  // not a leader question: the caller's to handle
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        const bool election = reply.ok() && !hint;  // a standby that knows no leader yet
        ARYL_RETURN_IF_ERROR(MoveLocked(TargetLocked(hint, election), at.moves, reason, false));
      }
      // Step 5: a fresh hint is followed at once, anything else after a backoff.
      bool sleep = !(hint && !last_followed_hint);
      last_followed_hint = hint.has_value();
      if (sleep) {
        milliseconds d = Jitter(backoff);
        backoff = std::min(backoff * 2, options.backoff_max);
        if (SteadyClock::now() + d >= deadline) break;
        std::this_thread::sleep_for(d);
      }
      if (SteadyClock::now() >= deadline) break;
    }
    if (tries == 1) return last;  // one endpoint, one try: its own words suffice
    double spent = std::chrono::duration<double>(SteadyClock::now() - start).count();
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", spent);
    return last.WithContext("no leader answered: tried " + Join(tried) + " (" + std::to_string(tries) +
                            " tries in " + secs + " s)");
  }

  Result<Message> Receive(milliseconds timeout) {
    const auto deadline = SteadyClock::now() + timeout;
    while (true) {
      // Short slices, so that a move (another thread's Request) is followed.
      ARYL_ASSIGN_OR_RETURN(Snapshot at, Current());
      auto left = std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now());
      auto r = at.client->Receive(std::max(milliseconds(0), std::min(left, milliseconds(50))));
      if (r.ok() || !r.status().IsTimeout()) return r;
      if (SteadyClock::now() >= deadline)
        return Status::Timeout("no message from '" + at.endpoint + "' within " + std::to_string(timeout.count()) +
                               " ms");
    }
  }
};

Result<std::unique_ptr<SchedulerClient>> SchedulerClient::Connect(Options options) {
  if (options.endpoints.empty()) return Status::InvalidArgument("SchedulerClient: no scheduler endpoint");
  for (const auto& e : options.endpoints) {
    auto parsed = ParseSchedulerEndpoints(e);
    if (!parsed.ok()) return parsed.status();
    if (parsed->size() != 1) return Status::InvalidArgument("SchedulerClient: '" + e + "' is a list, not one endpoint");
  }
  if (options.total_timeout.count() < 0 || options.backoff_initial.count() <= 0 ||
      options.backoff_max < options.backoff_initial)
    return Status::InvalidArgument("SchedulerClient: need total_timeout >= 0 and 0 < backoff_initial <= backoff_max");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->endpoints = impl->options.endpoints;
  ARYL_ASSIGN_OR_RETURN(impl->current, impl->ConnectTo(impl->endpoints.front()));
  return std::unique_ptr<SchedulerClient>(new SchedulerClient(std::move(impl)));
}

SchedulerClient::SchedulerClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SchedulerClient::~SchedulerClient() { Close(); }

Result<Message> SchedulerClient::Request(const Message& msg, milliseconds per_try_timeout) {
  return impl_->Request(msg, per_try_timeout);
}

Status SchedulerClient::Send(const Message& msg, milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(Impl::Snapshot at, impl_->Current());
  return at.client->Send(msg, timeout);
}

Result<Message> SchedulerClient::Receive(milliseconds timeout) { return impl_->Receive(timeout); }

Status SchedulerClient::Failover(std::string reason) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->silent_at[impl_->endpoints[impl_->index]] = SteadyClock::now();
  return impl_->MoveLocked(impl_->TargetLocked(std::nullopt), impl_->moves, reason, true);
}

std::string SchedulerClient::endpoint() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->endpoints[impl_->index];
}

std::vector<std::string> SchedulerClient::endpoints() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->endpoints;
}

void SchedulerClient::Close() {
  std::shared_ptr<Client> c;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->closed = true;
    c = std::move(impl_->current);
  }
  if (c) c->Close();
}

}  // namespace aryl::protocol
