// aryl submit | jobs | status | cancel.
#include <algorithm>
#include <iostream>
#include <optional>

#include "aryl/flags.h"
#include "commands.h"
#include "job_flags.h"

namespace p = aryl::protocol;

namespace aryl::cli {
namespace {

// A job that never reported progress (a torchrun script without step= lines,
// a job not started yet) has no step and no rate: "unknown", not 0.
bool ProgressUnknown(const p::JobRow& r) { return r.step == 0 && r.steps_per_second == 0; }


std::string Size(const p::JobRow& r) {
  std::string range = r.min_workers == r.max_workers ? std::to_string(r.min_workers)
                                                     : std::to_string(r.min_workers) + "-" + std::to_string(r.max_workers);
  return std::to_string(r.workers) + "/" + range;
}

int Submit(const cxxopts::ParseResult& r, const Client& c) {
  const std::string& prog = c.program;
  p::SubmitJob m;
  ReadJobFlags(prog, r, m);
  if (m.argv.empty()) UsageError(prog, "missing the command to run (after --)");
  ValidateJobOrExit(prog, m);
  // Resent with the same token after a timeout: at most one job is created.
  m.client_token = NewClientToken();
  auto reply = c.Call<p::SubmitReply>(m);
  for (int retry = 0; retry < 2 && !reply.ok() && reply.status().IsTimeout(); ++retry) reply = c.Call<p::SubmitReply>(m);
  if (!reply.ok()) return Fail(prog, reply.status());
  if (IsDocument(c.out.format)) PrintDocument(p::ToJson(*reply), c.out.format, -1);
  else std::cout << reply->job << "\n";
  std::cerr << NoCheckpointNote(prog, m, reply->job, /*torchrun_flags=*/false);
  return 0;
}

// The job state named `text` ("running", "completed", ...), or a usage error
// that lists the states.
p::JobState StateOrExit(const std::string& program, const std::string& text) {
  std::string known;
  for (int st = 0; st <= static_cast<int>(p::JobState::kCancelled); ++st) {
    auto state = static_cast<p::JobState>(st);
    if (p::ToString(state) == text) return state;
    known += (known.empty() ? "" : ", ") + std::string(p::ToString(state));
  }
  FlagError(program, "--state", text, "unknown state (known: " + known + ")");
}

int Jobs(const cxxopts::ParseResult& r, const Client& c) {
  p::ListJobs m;
  m.include_finished = r.count("all") > 0;
  // Filters as squeue's --state/--user/--name: on the rows the scheduler lets
  // this caller see. An ended state lists ended jobs without --all.
  std::optional<p::JobState> state;
  if (r.count("state")) {
    state = StateOrExit(c.program, r["state"].as<std::string>());
    m.include_finished |= *state == p::JobState::kCompleted || *state == p::JobState::kFailed ||
                          *state == p::JobState::kCancelled;
  }
  const std::string owner = r.count("owner") ? r["owner"].as<std::string>() : "";
  const std::string name = r.count("name") ? r["name"].as<std::string>() : "";
  // Page by page (each reply well under the frame limit), into one listing.
  p::JobsReply all;
  while (true) {
    auto reply = c.Call<p::JobsReply>(m);
    if (!reply.ok()) return Fail(c.program, reply.status());
    for (const auto& row : reply->jobs)
      if ((!state || row.state == *state) && (owner.empty() || row.owner == owner) && (name.empty() || row.name == name))
        all.jobs.push_back(row);
    if (!reply->more || reply->jobs.empty()) break;
    m.after = reply->jobs.back().job;
  }
  if (IsDocument(c.out.format)) PrintDocument(p::ToJson(all), c.out.format, 2);
  else std::cout << JobsTable(all.jobs, c.out);
  return 0;
}

void JobArg(cxxopts::Options& o) {
  o.add_options()("job", "Job id", cxxopts::value<std::string>());
  o.parse_positional({"job"});
  o.positional_help("JOB");
}

std::uint64_t JobOf(const cxxopts::ParseResult& r, const Client& c) {
  if (!r.count("job")) UsageError(c.program, "missing JOB");
  return ParseJobIdOrExit(c.program, r["job"].as<std::string>());
}

// `aryl status` without a job: every scheduler of the --scheduler list asked
// on its own (leader, standby, or not answering), the term, and the etcd
// members' health as the leader sees them.
int ControlPlaneStatus(const Client& c) {
  auto list = p::ParseSchedulerEndpoints(c.scheduler);
  if (!list.ok()) return Fail(c.program, list.status(), 2);
  nlohmann::json out = nlohmann::json::array();
  nlohmann::json leader_ha;
  Table t({{"SCHEDULER"}, {"ROLE"}, {"TERM"}, {"DETAIL"}});
  for (const auto& endpoint : *list) {
    auto one = ConnectScheduler(endpoint, c.curve_key, c.curve_server_key, c.per_try());
    nlohmann::json row = {{"endpoint", endpoint}};
    if (!one.ok()) return Fail(c.program, one.status());
    auto reply = (*one)->Call<p::StatusReply>(p::StatusRequest{}, c.per_try());
    if (reply.ok()) {
      nlohmann::json ha = reply->summary.value("ha", nlohmann::json::object());
      row["role"] = ha.empty() ? "leader (single, " + reply->summary.value("state", std::string("?")) + ")"
                               : ha.value("mode", std::string("leading"));
      row["term"] = ha.value("term", std::uint64_t{0});
      row["detail"] = ha.value("why", std::string());
      if (!ha.empty()) leader_ha = ha;
    } else if (p::IsStandbyError(reply.status())) {
      row["role"] = "standby";
      auto hint = p::LeaderHint(reply.status());
      row["detail"] = hint ? "leader: " + *hint : "no leader known";
    } else if (p::IsFrozenError(reply.status())) {
      row["role"] = "frozen";
      row["detail"] = reply.status().message();
    } else {
      row["role"] = "unreachable";
      row["detail"] = reply.status().ToString();
    }
    out.push_back(row);
    t.Add({endpoint, row["role"].get<std::string>(),
           row.contains("term") ? std::to_string(row["term"].get<std::uint64_t>()) : "-",
           Printable(row["detail"].get<std::string>())});
  }
  if (IsDocument(c.out.format)) {
    PrintDocument(nlohmann::json{{"schedulers", out}, {"ha", leader_ha}}, c.out.format, 2);
    return 0;
  }
  std::cout << t.Render(c.out);
  if (!leader_ha.empty()) {
    Table e({{"ETCD MEMBER"}, {"HEALTHY"}, {"ROUND TRIP"}, {"ERROR"}});
    for (const auto& m : leader_ha.value("etcd", nlohmann::json::array()))
      e.Add({m.value("endpoint", std::string()), m.value("healthy", false) ? "yes" : "no",
             Fixed(m.value("round_trip_ms", 0.0), 1) + " ms", Printable(m.value("error", std::string()))});
    std::cout << "\n" << e.Render(c.out) << "\nlease " << leader_ha.value("lease_ttl_seconds", 0) << " s, valid for "
              << Fixed(leader_ha.value("lease_valid_for_seconds", 0.0), 1) << " s more\n";
  }
  return 0;
}

int StatusCmd(const cxxopts::ParseResult& r, const Client& c) {
  if (!r.count("job")) return ControlPlaneStatus(c);
  p::JobStatus m;
  m.job = JobOf(r, c);
  auto reply = c.Call<p::JobStatusReply>(m);
  if (!reply.ok()) return Fail(c.program, reply.status());
  if (IsDocument(c.out.format)) {
    PrintDocument(p::ToJson(*reply), c.out.format, 2);
    return 0;
  }
  const auto& row = reply->row;
  // Every string here came from a submitter: escaped before a terminal sees it.
  std::cout << "job        " << row.job << " (" << Printable(row.name) << ")\n"
            << "state      " << p::ToString(row.state) << "\n"
            << "submitted  " << FormatTime(row.submit_time, c.out.utc) << " (" << Age(row.submit_time) << " ago)\n"
            << "size       " << Size(row) << (row.gpu_type.empty() ? "" : " on " + Printable(row.gpu_type)) << "\n"
            << "generation " << row.generation << ", " << row.rescales << " rescales\n"
            << "progress   "
            << (ProgressUnknown(row) ? std::string("unknown (no step reported)")
                                     : "step " + std::to_string(row.step) + ", " + Fixed(row.steps_per_second) + " steps/s")
            << "\n";
  std::string placement;
  for (const auto& pr : reply->placement) placement += (placement.empty() ? "" : ", ") + Printable(pr.agent_id) + ":" + std::to_string(pr.workers);
  std::cout << "placement  " << (placement.empty() ? "-" : placement) << "\n";
  std::string cmd;
  for (const auto& a : reply->argv) cmd += (cmd.empty() ? "" : " ") + Printable(a);
  std::cout << "command    " << cmd << "\n";
  std::string env;  // names only: the values may be secrets
  for (const auto& n : reply->env_names) env += (env.empty() ? "" : ", ") + Printable(n);
  std::cout << "owner      " << Printable(row.owner) << "\n"
            << "env        " << (env.empty() ? "-" : env) << "\n";
  if (reply->exit_code) std::cout << "exit code  " << *reply->exit_code << "\n";
  if (!reply->message.empty()) std::cout << "message    " << Printable(reply->message) << "\n";
  const std::string& pending = row.pending_reason.empty() ? reply->pending_reason : row.pending_reason;
  if (!pending.empty()) std::cout << "pending    " << Printable(pending) << "\n";
  return 0;
}

// cancel JOB [JOB...]: each in turn, every answer printed; exit 1 if any failed.
int Cancel(const cxxopts::ParseResult& r, const Client& c) {
  if (!r.count("jobs")) UsageError(c.program, "missing JOB");
  std::vector<std::uint64_t> ids;
  for (const auto& text : r["jobs"].as<std::vector<std::string>>()) ids.push_back(ParseJobIdOrExit(c.program, text));
  int code = 0;
  for (auto id : ids) {
    p::CancelJob m;
    m.job = id;
    auto reply = c.Call<p::Ok>(m);
    if (!reply.ok()) {
      code = Fail(c.program, reply.status());
      continue;
    }
    if (IsDocument(c.out.format)) PrintDocument(p::ToJson(*reply), c.out.format, -1);
    else std::cout << reply->message << "\n";
  }
  return code;
  return 0;
}

}  // namespace

std::string JobsTable(const std::vector<p::JobRow>& rows, const OutputOptions& out) {
  // A scheduler with --queues names each job's queue; without, no column for it.
  const bool queues = std::any_of(rows.begin(), rows.end(), [](const p::JobRow& r) { return !r.queue.empty(); });
  std::vector<Table::Column> columns = {{"JOB"}, {"NAME"}, {"OWNER"}};
  if (queues) columns.push_back({"QUEUE"});
  for (const char* name : {"STATE", "SIZE"}) columns.push_back({name});
  columns.push_back({"GPU-TYPE", true});
  for (const char* name : {"GEN", "STEP", "STEPS/S", "RESCALES"}) columns.push_back({name});
  columns.push_back({"SUBMITTED", true});
  for (const char* name : {"AGE", "REASON"}) columns.push_back({name});
  Table t(std::move(columns));
  for (const auto& r : rows) {
    std::vector<std::string> cells = {std::to_string(r.job), Printable(r.name), Printable(r.owner)};
    if (queues) cells.push_back(Printable(r.queue));
    for (std::string cell :
         {std::string(p::ToString(r.state)), Size(r), r.gpu_type.empty() ? "any" : r.gpu_type,
          std::to_string(r.generation), ProgressUnknown(r) ? "unknown" : std::to_string(r.step),
          ProgressUnknown(r) ? "unknown" : Fixed(r.steps_per_second), std::to_string(r.rescales),
          FormatTime(r.submit_time, out.utc), Age(r.submit_time), Printable(r.pending_reason)})
      cells.push_back(std::move(cell));
    t.Add(std::move(cells));
  }
  return t.Render(out);
}

std::vector<Command> JobCommands() {
  return {
      {"submit", "[--name N] (--workers N | --min A --max B) [--gpu-type T] -- CMD ARGS...",
       "submit a job and print its id", true, AddJobFlags, Submit},
      {"jobs", "[--all] [--state S] [--owner O] [--name N]", "list jobs (--all: finished ones too)", true,
       [](cxxopts::Options& o) {
         o.add_options()("all", "Include finished, failed and cancelled jobs")(
             "state", "Only jobs in this state (queued, running, ..., completed, failed, cancelled)",
             cxxopts::value<std::string>())("owner", "Only this owner's jobs", cxxopts::value<std::string>())(
             "name", "Only jobs of this name", cxxopts::value<std::string>());
       },
       Jobs},
      {"status", "[JOB]", "one job: state, size, placement, exit code; without JOB the schedulers (leader, standbys, term) and etcd's health", true, JobArg, StatusCmd},
      {"cancel", "JOB [JOB...]", "cancel jobs", true,
       [](cxxopts::Options& o) {
         o.add_options()("jobs", "Job ids", cxxopts::value<std::vector<std::string>>());
         o.parse_positional({"jobs"});
         o.positional_help("JOB [JOB...]");
       },
       Cancel},
  };
}

}  // namespace aryl::cli
