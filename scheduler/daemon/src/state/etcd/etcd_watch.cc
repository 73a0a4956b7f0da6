// Client::Watch: one watch stream at a time, moved between endpoints on failure.
#include <algorithm>
#include <chrono>
#include <thread>

#include "state/etcd/client_impl.h"

namespace aryl::etcd {

// --- Watch --------------------------------------------------------------------------

namespace {

// How one watch stream (one HTTP request to one endpoint) ended.
enum class StreamEnd {
  kStop,        // `stop` or max_seconds: Watch returns Ok
  kCallerDone,  // on_batch returned false: Watch returns Ok
  kStatus,      // a final error (compacted, refused): Watch returns it
  kIdle,        // silent for the idle window after it was created: re-open
  kFailed,      // the endpoint could not open or keep the stream: try the next
};

}  // namespace

Status Client::Watch(
    const std::string& key, const std::string& range_end, std::int64_t start_revision,
    const std::function<bool(const std::vector<WatchEvent>&, std::int64_t)>& on_batch,
    const std::atomic<bool>& stop, double max_seconds) {
  if (!(max_seconds > 0))
    return Status::InvalidArgument("etcd watch: max_seconds " + std::to_string(max_seconds) +
                                   " must be positive");
  const auto deadline = SteadyClock::now() + Micros(std::min(max_seconds, 1e9));
  const double open_timeout = impl_->options.request_timeout;
  const double idle_timeout = 2 * impl_->options.request_timeout;
  const std::size_t n = impl_->endpoints.size();
  std::size_t ep = impl_->preferred.load() % n;
  std::size_t failures_in_row = 0;
  std::string errors;
  // Every endpoint failing in turn is given up on only once such failures have
  // lasted ride_out: members that lost their leader refuse at once until they
  // elect a new one (about an election timeout, 1 s by default).
  const auto ride_out = Micros(std::max(2 * impl_->options.request_timeout, 3.0));
  auto failing_since = SteadyClock::now();
  bool riding_out = false;
  std::int64_t next_rev = start_revision;  // 0 until the first stream says where "now" is
  const std::string what = "etcd watch of '" + key + "'";

  for (;;) {
    if (stop.load() || SteadyClock::now() >= deadline) return Status::Ok();
    auto http =
        impl_->NewHttp(ep, idle_timeout + open_timeout);  // backstop; the watchdog is tighter

    json create = {{"key", Base64Encode(key)}, {"progress_notify", true}};
    if (!range_end.empty()) create["range_end"] = Base64Encode(range_end);
    if (next_rev > 0) create["start_revision"] = I64(next_rev);
    const std::string body = json{{"create_request", create}}.dump();

    std::atomic<bool> created{false}, done{false};
    std::atomic<int> watchdog_end{-1};  // a StreamEnd the watchdog forced
    std::atomic<std::int64_t> last_data_us{0};
    const auto t_open = SteadyClock::now();
    auto since_open_us = [&] {
      return std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - t_open)
          .count();
    };

    // The watchdog: the only way to end a blocking read early is httplib's stop()
    // from another thread; it is repeated because a stop() that lands before the
    // socket exists does nothing.
    std::thread watchdog([&] {
      while (!done.load()) {
        int end = -1;
        if (stop.load() || SteadyClock::now() >= deadline)
          end = int(StreamEnd::kStop);
        else if (!created.load() && since_open_us() > open_timeout * 1e6)
          end = int(StreamEnd::kFailed);
        else if (created.load() && since_open_us() - last_data_us.load() > idle_timeout * 1e6)
          end = int(StreamEnd::kIdle);
        if (end >= 0) {
          int expected = -1;
          watchdog_end.compare_exchange_strong(expected, end);
          http->stop();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });

    StreamEnd ended = StreamEnd::kFailed;
    bool decided = false;  // the receiver decided `ended`
    Status final_status;
    std::string fail_reason;
    std::string buffer;
    int http_status = 0;

    // Handles one response line; false ends the stream.
    auto on_line = [&](std::string_view line) -> bool {
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        decided = true;
        ended = StreamEnd::kStatus;
        final_status = Status::Corruption(
            what + ": a stream line that is not JSON: " + std::string(line.substr(0, 200)));
        return false;
      }
      EtcdError e;
      if (http_status != 200 || j.contains("error")) {
        if (!ParseEtcdError(j, &e))
          e.message = "HTTP " + std::to_string(http_status) + ": " + std::string(line);
        decided = true;
        if (MemberCannotServe(e.code, e.message)) {
          ended = StreamEnd::kFailed;
          fail_reason = e.message;
        } else {
          ended = StreamEnd::kStatus;
          final_status = FromGrpc(e.code, e.message, what + " on " + impl_->endpoints[ep]);
        }
        return false;
      }
      const json r = j.value("result", json::object());
      const std::int64_t header_rev = HeaderRevision(r);
      if (BoolField(r, "canceled")) {
        decided = true;
        std::int64_t compact = Int64Field(r, "compact_revision");
        std::string reason = StringField(r, "cancel_reason");
        if (compact > 0) {
          ended = StreamEnd::kStatus;
          final_status = Status::OutOfRange(what + " from revision " + std::to_string(next_rev) +
                                            ": that revision is compacted; compact revision " +
                                            std::to_string(compact) +
                                            " (read the state again and watch from there)");
        } else if (MemberCannotServe(0, reason)) {
          ended = StreamEnd::kFailed;
          fail_reason = "watch canceled: " + reason;
        } else {
          ended = StreamEnd::kStatus;
          final_status = Status::FailedPrecondition(
              what + ": etcd canceled the watch: " + (reason.empty() ? "no reason given" : reason));
        }
        return false;
      }
      if (BoolField(r, "created")) {
        created.store(true);
        if (next_rev == 0) next_rev = header_rev + 1;
        impl_->preferred.store(ep);
      }
      std::vector<WatchEvent> events;
      for (const json& ev : r.value("events", json::array())) {
        WatchEvent we;
        we.type = StringField(ev, "type") == "DELETE" ? WatchEvent::Type::kDelete
                                                      : WatchEvent::Type::kPut;
        Status s = ParseKeyValue(ev.value("kv", json::object()), &we.kv);
        if (!s.ok()) {
          decided = true;
          ended = StreamEnd::kStatus;
          final_status = s;
          return false;
        }
        events.push_back(std::move(we));
      }
      if (!events.empty()) {
        next_rev = events.back().kv.mod_revision + 1;
        if (!on_batch(events, header_rev)) {
          decided = true;
          ended = StreamEnd::kCallerDone;
          return false;
        }
      } else if (!BoolField(r, "created") && created.load() && header_rev + 1 > next_rev) {
        // A progress notification: etcd sends it only to a watcher that has caught
        // up, so every event up to header_rev has been delivered.
        next_rev = header_rev + 1;
      }
      return !stop.load();
    };

    httplib::Request req;
    req.method = "POST";
    req.path = "/v3/watch";
    req.headers.emplace("Grpc-Metadata-Hasleader", "true");
    req.headers.emplace("Content-Type", "application/json");
    req.body = body;
    req.response_handler = [&](const httplib::Response& res) {
      http_status = res.status;
      return true;
    };
    req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
      last_data_us.store(since_open_us());
      buffer.append(data, len);
      std::size_t start = 0;
      for (std::size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1) {
        std::string_view line(buffer.data() + start, nl - start);
        if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
        if (!on_line(line)) return false;
      }
      buffer.erase(0, start);
      // An error answer is one JSON document that may not end in a newline.
      if (http_status != 200 && json::accept(buffer)) {
        std::string doc = std::move(buffer);
        buffer.clear();
        return on_line(doc);
      }
      last_data_us.store(since_open_us());
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    http->send(req, res, err);
    done.store(true);
    watchdog.join();

    if (!decided) {
      int forced = watchdog_end.load();
      if (stop.load() || SteadyClock::now() >= deadline)
        ended = StreamEnd::kStop;
      else if (forced == int(StreamEnd::kIdle))
        ended = StreamEnd::kIdle;
      else {
        ended = StreamEnd::kFailed;
        if (forced == int(StreamEnd::kFailed))
          fail_reason = "the watch was not created within " + FormatSeconds(open_timeout);
        else if (created.load())
          fail_reason =
              "the watch stream ended (" + TransportError(err, since_open_us() / 1e6) + ")";
        else
          fail_reason = TransportError(err, since_open_us() / 1e6);
      }
    }
    switch (ended) {
      case StreamEnd::kStop:
      case StreamEnd::kCallerDone:
        return Status::Ok();
      case StreamEnd::kStatus:
        return final_status;
      case StreamEnd::kIdle:
        failures_in_row = 0;
        errors.clear();
        riding_out = false;
        continue;  // the same endpoint, from next_rev
      case StreamEnd::kFailed:
        if (created.load()) {  // it worked for a while: count from here
          failures_in_row = 0;
          errors.clear();
          riding_out = false;
        }
        if (failures_in_row == 0 && !riding_out) failing_since = SteadyClock::now();
        AppendError(&errors, impl_->endpoints[ep], fail_reason);
        ep = (ep + 1) % n;
        if (++failures_in_row >= n) {
          if (SteadyClock::now() - failing_since >= ride_out)
            return Status::Unavailable(what + ": no endpoint can serve the watch (" + errors + ")");
          // Round again after a pause; the error names the last round's.
          riding_out = true;
          failures_in_row = 0;
          errors.clear();
          for (int i = 0; i < 4 && !stop.load(); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        continue;
    }
  }
}

}  // namespace aryl::etcd
