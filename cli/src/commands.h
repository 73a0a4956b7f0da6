// The `aryl` command table: one entry per command, read by the dispatcher in
// aryl_main.cc, by `aryl --help` and by the bash/zsh completion generators
// (completion.cc), so a new command or flag shows up in all three.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "aryl/protocol/messages.h"
#include "aryl/result.h"
#include "client_util.h"
#include "output.h"

namespace aryl::cli {

// Settings every client command shares, after config file < env < flags.
struct Client {
  std::string program;  // "aryl jobs", for messages
  std::string scheduler;
  double timeout = 3;
  std::string curve_key, curve_server_key;
  OutputOptions out;

  std::chrono::milliseconds total() const { return std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000)); }
  // One try's share of --timeout over the --scheduler list (PerTryTimeout).
  std::chrono::milliseconds per_try() const {
    auto list = protocol::ParseSchedulerEndpoints(scheduler);
    return PerTryTimeout(total(), list.ok() ? list->size() : 1);
  }
  // A connection to the scheduler (the leader of the --scheduler list); a
  // request through it tries for at most --timeout.
  Result<std::unique_ptr<protocol::SchedulerClient>> Connect() const {
    return ConnectScheduler(scheduler, curve_key, curve_server_key, total());
  }

  // One request/reply with the scheduler.
  template <typename T>
  Result<T> Call(const protocol::Message& req) const {
    auto client = Connect();
    if (!client.ok()) return client.status();
    return (*client)->Call<T>(req, per_try());
  }
};

struct Command {
  std::string name;      // "jobs" or "pool reclaim"
  std::string synopsis;  // "[--all]"
  std::string summary;   // one line for `aryl --help` and zsh completion
  bool client = true;    // takes the scheduler, output and CURVE flags
  // Declares the command's own flags (and its positional arguments).
  std::function<void(cxxopts::Options&)> flags;
  std::function<int(const cxxopts::ParseResult&, const Client&)> run;
};

const std::vector<Command>& Commands();

// The command's full option set: its own flags, the client flags when it is a
// client command, and --help/--version/--log-level.
cxxopts::Options CommandOptions(const Command& c);

// Reads the shared client flags; a bad value is a usage error (exit 2).
Client ReadClient(const std::string& program, const cxxopts::ParseResult& r);

std::string UsageText();
std::string BashCompletion();
std::string ZshCompletion();

// Command groups, one file each.
std::vector<Command> JobCommands();      // submit, jobs, status, cancel (cmd_jobs.cc)
std::vector<Command> ClusterCommands();  // nodes, pool offer/reclaim, keygen (cmd_cluster.cc)
std::vector<Command> QueueCommands();    // queues (cmd_queues.cc)
std::vector<Command> TopCommands();      // top (cmd_top.cc)
std::vector<Command> DescribeCommands();  // describe job, describe node (cmd_describe.cc)
std::vector<Command> LogCommands();       // logs, events (cmd_logs.cc)

// The jobs and nodes tables (aryl jobs, aryl nodes, aryl top).
std::string JobsTable(const std::vector<protocol::JobRow>& rows, const OutputOptions& out);
std::string NodesTable(const std::vector<protocol::NodeRow>& nodes, const OutputOptions& out);
std::string QueuesTable(const std::vector<protocol::QueueRow>& rows, const OutputOptions& out);
// Journal rows (aryl events, aryl describe node).
Table EventsTable(const std::vector<protocol::EventRow>& rows, const OutputOptions& out);
// `s` with control characters shown as '?' (text from the journal in tables).
std::string Printable(const std::string& s);

// "0.5", "120s", "2m", "1h" as seconds; nullopt unless finite and >= 0.
std::optional<double> ParseDuration(const std::string& s);
// A job id: a whole number >= 1; anything else is a usage error naming it.
std::uint64_t ParseJobIdOrExit(const std::string& program, const std::string& text);

}  // namespace aryl::cli
