// aryl logs N [--rank R] [--follow] | aryl events [filters] (protocol/inspect.h,
// steps 3-7). Logs come from the agent that ran the worker, through the
// scheduler, in chunks of at most kMaxLogChunk bytes; --follow asks again from
// where the last chunk ended.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "aryl/flags.h"
#include "commands.h"

namespace p = aryl::protocol;

namespace aryl::cli {
namespace {

std::atomic<bool> g_stop{false};

std::vector<std::string> Args(const cxxopts::ParseResult& r) {
  return r.count("args") ? r["args"].as<std::vector<std::string>>() : std::vector<std::string>{};
}

int Logs(const cxxopts::ParseResult& r, const Client& c) {
  auto args = Args(r);
  if (args.size() != 1) UsageError(c.program, "expected one JOB");
  p::JobLogs m;
  m.job = ParseJobIdOrExit(c.program, args[0]);
  m.rank = ParseIntegerOrExit(c.program, "--rank", r["rank"].as<std::string>(), 0, 1 << 20);
  if (r.count("worker"))
    m.worker = ParseIntegerOrExit(c.program, "--worker", r["worker"].as<std::string>(), 0,
                                  std::numeric_limits<std::int64_t>::max());
  m.stream = r.count("stderr") ? "stderr" : "stdout";
  m.max_bytes = p::kMaxLogChunk;
  const bool follow = r.count("follow") > 0;
  double interval = r["interval"].as<double>();
  RequireAtLeast(c.program, "--interval", interval, 0.05);
  auto client = c.Connect();
  if (!client.ok()) return Fail(c.program, client.status());
  auto timeout = c.per_try();
  std::signal(SIGINT, [](int) { g_stop = true; });
  std::optional<p::WorkerId> worker;
  while (!g_stop) {
    auto chunk = (*client)->Call<p::LogChunk>(m, timeout);
    if (!chunk.ok()) return Fail(c.program, chunk.status());
    if (worker && chunk->worker != *worker) {
      // Rank R moved to another worker (a resize): that is another file.
      std::cerr << c.program << ": rank " << chunk->rank << " is now worker " << chunk->worker << " on "
                << chunk->agent_id << "; its log follows from the start\n";
      m.offset = 0;
      worker = chunk->worker;
      continue;
    }
    worker = chunk->worker;
    if (IsDocument(c.out.format)) {
      // One document a chunk: JSON lines, or YAML documents after "---".
      if (!chunk->data.data.empty()) {
        if (c.out.format == Format::kYaml) std::cout << "---\n";
        PrintDocument(p::ToJson(*chunk), c.out.format, -1);
        std::cout << std::flush;
      }
    } else {
      std::fwrite(chunk->data.data.data(), 1, chunk->data.data.size(), stdout);
      std::fflush(stdout);
    }
    m.offset = chunk->offset + static_cast<std::int64_t>(chunk->data.data.size());
    if (!chunk->data.data.empty()) continue;  // more may be there already
    if (!follow || !chunk->running) break;    // the whole log, or the worker is over
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
  }
  return 0;
}

// --since: a duration back from now (10m, 2h, 30s) or a date and time
// ("2026-12-01T09:30:00", "2026-12-01 09:30", a trailing Z for UTC; local
// time otherwise, or UTC with --utc).
double ParseSinceOrExit(const std::string& prog, const std::string& text, bool utc) {
  if (auto d = ParseDuration(text)) return std::max(0.0, static_cast<double>(std::time(nullptr)) - *d);
  std::string t = text;
  bool z = !t.empty() && (t.back() == 'Z' || t.back() == 'z');
  if (z) t.pop_back();
  for (auto& ch : t)
    if (ch == 'T') ch = ' ';
  for (const char* fmt : {"%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"}) {
    std::tm tm{};
    std::istringstream in(t);
    in >> std::get_time(&tm, fmt);
    if (in.fail() || in.peek() != EOF) continue;
    tm.tm_isdst = -1;
    std::time_t when = z || utc ? timegm(&tm) : mktime(&tm);
    if (when < 0) break;
    return static_cast<double>(when);
  }
  FlagError(prog, "--since", text, "expected a duration (30s, 10m, 2h) or a time (2026-12-01T09:30:00[Z])");
  return 0;
}

int Events(const cxxopts::ParseResult& r, const Client& c) {
  if (!Args(r).empty()) UsageError(c.program, "unexpected argument '" + Args(r).front() + "' (filters are flags)");
  p::ListEvents m;
  if (r.count("job")) m.job = ParseJobIdOrExit(c.program, r["job"].as<std::string>());
  if (r.count("node")) m.node = r["node"].as<std::string>();
  if (r.count("kind")) m.kind = r["kind"].as<std::string>();
  if (r.count("since")) m.since = ParseSinceOrExit(c.program, r["since"].as<std::string>(), c.out.utc);
  long long limit = r.count("limit") ? ParseIntegerOrExit(c.program, "--limit", r["limit"].as<std::string>(), 1,
                                                          std::numeric_limits<std::int32_t>::max())
                                     : 0;
  if (Status v = m.Validate(); !v.ok()) FlagError(c.program, "--kind", m.kind, v.message());
  // Page by page (like aryl jobs), up to --limit rows in all.
  p::EventsReply all;
  while (true) {
    if (limit > 0) m.limit = std::min<long long>(p::kMaxEventsPage, limit - static_cast<long long>(all.events.size()));
    auto reply = c.Call<p::EventsReply>(m);
    if (!reply.ok()) return Fail(c.program, reply.status());
    all.events.insert(all.events.end(), reply->events.begin(), reply->events.end());
    all.next_after = reply->next_after;
    all.more = reply->more;
    if (!reply->more || reply->next_after <= m.after) break;
    if (limit > 0 && static_cast<long long>(all.events.size()) >= limit) break;
    m.after = reply->next_after;
  }
  if (IsDocument(c.out.format)) PrintDocument(p::ToJson(all), c.out.format, 2);
  else std::cout << EventsTable(all.events, c.out).Render(c.out);
  return 0;
}

}  // namespace

Table EventsTable(const std::vector<p::EventRow>& rows, const OutputOptions& out) {
  Table t({{"SEQ", true}, {"TIME"}, {"KIND"}, {"JOB"}, {"NODES"}, {"DETAIL"}});
  for (const auto& e : rows) {
    std::string nodes;
    for (const auto& n : e.nodes) nodes += (nodes.empty() ? "" : ",") + n;
    t.Add({std::to_string(e.seq), FormatTime(e.time, out.utc), e.kind, e.job == 0 ? "-" : std::to_string(e.job),
           nodes.empty() ? "-" : nodes, Printable(e.detail)});
  }
  return t;
}

std::vector<Command> LogCommands() {
  return {
      {"logs", "JOB [--rank R | --worker W] [--stderr] [--follow]",
       "a worker's output, read from its agent (default rank 0; --follow: until the worker ends)", true,
       [](cxxopts::Options& o) {
         o.add_options()("args", "JOB", cxxopts::value<std::vector<std::string>>())
             ("rank", "The worker of this rank (now, or in the job's newest generation)",
              cxxopts::value<std::string>()->default_value("0"))
             ("worker", "This worker id instead of a rank (any generation)", cxxopts::value<std::string>())
             ("stderr", "The worker's stderr instead of its stdout")
             ("f,follow", "Keep printing as the log grows, until the worker ends (Ctrl-C stops)")
             ("interval", "Seconds between polls with --follow", cxxopts::value<double>()->default_value("0.5"));
         o.parse_positional({"args"});
         o.positional_help("JOB");
       },
       Logs},
      {"events", "[--job N] [--node NAME] [--kind K] [--since T] [--limit L]",
       "the scheduler's event journal, oldest first, filtered", true,
       [](cxxopts::Options& o) {
         o.add_options()("args", "", cxxopts::value<std::vector<std::string>>())
             ("job", "Only this job's events", cxxopts::value<std::string>())
             ("node", "Only events about this node", cxxopts::value<std::string>())
             ("kind", "Only this kind (submit, start, resize, preempt, worker_exit, ...)", cxxopts::value<std::string>())
             ("since", "Only events since: 10m, 2h, or 2026-12-01T09:30:00[Z]", cxxopts::value<std::string>())
             ("limit", "At most L events (default: all)", cxxopts::value<std::string>());
         o.parse_positional({"args"});
       },
       Events},
  };
}

}  // namespace aryl::cli
