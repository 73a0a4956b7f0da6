// aryl describe job N | describe node NAME (protocol/inspect.h, steps 1-2).
#include <cstdio>
#include <iostream>
#include <sstream>

#include "aryl/duration.h"
#include "aryl/flags.h"
#include "commands.h"

namespace p = aryl::protocol;

namespace aryl::cli {
namespace {

std::string Placement(const std::vector<p::PlacementRow>& rows) {
  std::string s;
  for (const auto& pr : rows) s += (s.empty() ? "" : ",") + pr.agent_id + ":" + std::to_string(pr.workers);
  return s.empty() ? "-" : s;
}

std::string Bytes(std::int64_t b) {
  if (b < 1024) return std::to_string(b) + " B";
  if (b < 1024 * 1024) return Fixed(b / 1024.0, 1) + " KiB";
  if (b < 1024LL * 1024 * 1024) return Fixed(b / (1024.0 * 1024), 1) + " MiB";
  return Fixed(b / (1024.0 * 1024 * 1024), 2) + " GiB";
}

// A section title and its table; nothing when the table is empty.
void Section(std::ostream& os, const std::string& title, const Table& t, bool empty, const OutputOptions& out) {
  os << "\n" << title << ":" << (empty ? " none\n" : "\n");
  if (!empty) os << t.Render(out);
}

void Field(std::ostream& os, const std::string& name, const std::string& value) {
  os << name << ":" << std::string(name.size() < 16 ? 16 - name.size() : 1, ' ') << Printable(value) << "\n";
}

// The scheduler's model of the job's speed (docs/scheduler.md, "Measured speed").
void DescribeSpeed(std::ostringstream& os, const p::JobSpeed& sp, const OutputOptions& out) {
  os << "\n";
  std::string what = sp.samples.empty() ? "not measured yet: the prior decides" : std::to_string(sp.fits) + " fits";
  Field(os, "Speed model", what + " (prior: " + sp.prior + ")");
  Field(os, "Speed fit", "compute " + Fixed(sp.alpha_c, 4) + " s + " + Fixed(sp.beta_c, 4) +
                             " s x local batch; sync intra " + Fixed(sp.alpha_r, 4) + " s + " + Fixed(sp.beta_r, 4) +
                             " s/worker, inter " + Fixed(sp.alpha_n, 4) + " s + " + Fixed(sp.beta_n, 4) +
                             " s/worker; overlap " + Fixed(sp.gamma, 2));
  for (const auto& [type, ratio] : sp.type_speed) Field(os, "Speed of " + Printable(type), ratio + " x reference");
  Table samples({{"GPU-TYPE"}, {"WORKERS"}, {"NODES"}, {"STEPS"}, {"STEP-S"}, {"SPREAD-S"}, {"FIT-S"}});
  for (const auto& x : sp.samples)
    samples.Add({Printable(x.gpu_type), std::to_string(x.workers), std::to_string(x.nodes), std::to_string(x.count),
                 Fixed(x.step_time, 4), Fixed(x.spread, 4), Fixed(x.predicted_step_time, 4)});
  Section(os, "Measured speed", samples, sp.samples.empty(), out);
  Table predicted({{"WORKERS"}, {"STEPS/S"}});
  for (const auto& x : sp.predicted) predicted.Add({std::to_string(x.workers), Fixed(x.steps_per_second, 3)});
  Section(os, "Predicted speed (" + Printable(sp.gpu_type) + ")", predicted, sp.predicted.empty(), out);
}

int DescribeJob(const cxxopts::ParseResult& r, const Client& c) {
  if (!r.count("args") || r["args"].as<std::vector<std::string>>().size() != 1) UsageError(c.program, "expected one JOB");
  p::DescribeJob m;
  m.job = ParseJobIdOrExit(c.program, r["args"].as<std::vector<std::string>>()[0]);
  auto d = c.Call<p::JobDescription>(m);
  if (!d.ok()) return Fail(c.program, d.status());
  if (IsDocument(c.out.format)) {
    PrintDocument(p::ToJson(*d), c.out.format, 2);
    return 0;
  }
  const auto& row = d->row;
  const bool utc = c.out.utc;
  std::ostringstream os;
  Field(os, "Job", std::to_string(row.job) + " (" + row.name + ")");
  Field(os, "Owner", row.owner);
  Field(os, "State", std::string(p::ToString(row.state)));
  if (!row.pending_reason.empty()) Field(os, "Pending", row.pending_reason);  // why a queued job waits
  std::string range = row.min_workers == row.max_workers
                          ? std::to_string(row.min_workers)
                          : std::to_string(row.min_workers) + "-" + std::to_string(row.max_workers);
  Field(os, "Workers", std::to_string(row.workers) + " of " + range + (row.gpu_type.empty() ? "" : " on " + row.gpu_type));
  Field(os, "Generation", std::to_string(row.generation) + ", " + std::to_string(row.rescales) + " rescales");
  Field(os, "Progress", "step " + std::to_string(row.step) + ", " + Fixed(row.steps_per_second) + " steps/s");
  Field(os, "Submitted", FormatTime(row.submit_time, utc) + " (" + Age(row.submit_time) + " ago)");
  Field(os, "Started", FormatTime(d->start_time, utc));
  Field(os, "Ended", FormatTime(d->end_time, utc));
  std::string cmd;
  for (const auto& a : d->argv) cmd += (cmd.empty() ? "" : " ") + a;
  Field(os, "Command", cmd);
  std::string env;
  for (const auto& n : d->env_names) env += (env.empty() ? "" : ", ") + n;
  Field(os, "Env", env.empty() ? "-" : env + " (values not shown)");
  if (!d->cwd.empty()) Field(os, "Working dir", d->cwd);
  Field(os, "Checkpoint dir", d->checkpoint_dir.empty() ? "-" : d->checkpoint_dir);
  if (!d->model.empty()) Field(os, "Model", d->model);
  if (d->stop_grace) Field(os, "Stop grace", FormatDuration(*d->stop_grace) + " from SIGTERM and $ARYL_STOP_NOTICE to SIGKILL");
  Field(os, "Placement", Placement(d->placement) +
                             (d->rank0_worker >= 0 ? " (rank 0: worker " + std::to_string(d->rank0_worker) + ")" : ""));
  if (d->last_checkpoint) {
    const auto& ck = *d->last_checkpoint;
    Field(os, "Last checkpoint", "step " + std::to_string(ck.step) + " at " + FormatTime(ck.time, utc) + ", " +
                                     (ck.path.empty() ? "" : ck.path + ", ") + Bytes(ck.bytes) + " in " +
                                     FormatDuration(ck.seconds) + (ck.node.empty() ? "" : " on " + ck.node));
  } else {
    Field(os, "Last checkpoint", "-");
  }
  // A restart of every worker (a program without the runtime: torchrun's way)
  // keeps only what the script checkpoints itself; none is known here.
  int restarts = 0;
  for (const auto& x : d->rescales) restarts += x.kind == "restart";
  if (restarts > 0 && d->checkpoint_dir.empty() && !d->last_checkpoint)
    Field(os, "Warning", std::to_string(restarts) + (restarts == 1 ? " restart" : " restarts") +
                             " of all workers and no checkpoint (no --checkpoint-dir, none reported): unless the "
                             "script resumes from a checkpoint of its own, each restart began again at step 0");
  if (d->exit_code) Field(os, "Exit code", std::to_string(*d->exit_code));
  if (!d->message.empty()) Field(os, "Message", d->message);

  Table history({{"TIME"}, {"KIND"}, {"GEN"}, {"WORKERS"}, {"PLACEMENT"}, {"REASON"}});
  for (const auto& h : d->history) {
    std::int64_t n = 0;
    for (const auto& pr : h.placement) n += pr.workers;
    history.Add({FormatTime(h.time, utc), h.kind, std::to_string(h.generation), std::to_string(n), Placement(h.placement),
                 Printable(h.reason)});
  }
  Section(os, std::string("Placement history") + (d->history_truncated ? " (newest only)" : ""), history,
          d->history.empty(), c.out);
  Table rescales({{"TIME"}, {"KIND"}, {"GEN"}, {"FROM"}, {"TO"}, {"PLANNED"}, {"PAUSE-S"}, {"DETECT-S", true},
                  {"AGREE-S", true}, {"RENDEZVOUS-S", true}, {"COMMUNICATOR-S", true}, {"TRANSFER-S", true}});
  for (const auto& x : d->rescales) {
    // A restart has one number: stop to the new group's first step.
    const bool restart = x.kind == "restart";
    auto phase = [&](double v) { return restart ? std::string("-") : Fixed(v, 3); };
    rescales.Add({FormatTime(x.time, utc), restart ? "restart" : "in-place", std::to_string(x.generation),
                  std::to_string(x.from_workers), x.to_workers > 0 ? std::to_string(x.to_workers) : "-",
                  x.planned ? "yes" : "no (fault)", x.pause_known ? Fixed(x.phases.total, 3) : "unknown",
                  phase(x.phases.detect), phase(x.phases.agree), phase(x.phases.rendezvous),
                  phase(x.phases.communicator), phase(x.phases.state_transfer)});
  }
  Section(os, "Rescales", rescales, d->rescales.empty(), c.out);
  Table preempt({{"TIME"}, {"REASON"}});
  for (const auto& x : d->preemptions) preempt.Add({FormatTime(x.time, utc), Printable(x.message)});
  Section(os, "Preemptions", preempt, d->preemptions.empty(), c.out);
  Table errors({{"TIME"}, {"NODE"}, {"WORKER"}, {"ERROR"}});
  for (const auto& x : d->exec_errors)
    errors.Add({FormatTime(x.time, utc), x.node.empty() ? "-" : x.node, x.worker < 0 ? "-" : std::to_string(x.worker),
                Printable(x.message)});
  Section(os, "Exec errors", errors, d->exec_errors.empty(), c.out);
  if (d->speed) DescribeSpeed(os, *d->speed, c.out);
  std::cout << os.str();
  return 0;
}

int DescribeNode(const cxxopts::ParseResult& r, const Client& c) {
  if (!r.count("args") || r["args"].as<std::vector<std::string>>().size() != 1) UsageError(c.program, "expected one NAME");
  p::DescribeNode m;
  m.node = r["args"].as<std::vector<std::string>>()[0];
  if (m.node.empty()) FlagError(c.program, "NAME", m.node, "a node name is not empty");
  auto d = c.Call<p::NodeDescription>(m);
  if (!d.ok()) return Fail(c.program, d.status());
  if (IsDocument(c.out.format)) {
    PrintDocument(p::ToJson(*d), c.out.format, 2);
    return 0;
  }
  const auto& n = d->row;
  const bool utc = c.out.utc;
  std::ostringstream os;
  Field(os, "Node", n.agent_id + (n.host.empty() ? "" : " (" + n.host + ")"));
  Field(os, "Pool", std::string(p::ToString(n.pool)));
  Field(os, "State", d->liveness);
  Field(os, "Loan", d->loan_state + (d->reclaim_deadline > 0 ? " (deadline " + FormatTime(d->reclaim_deadline, utc) + ")" : ""));
  if (d->serving) {
    const auto& s = *d->serving;
    std::string what = s.state + (s.lent ? " (lent)" : "");
    if (s.state == "failed") what += " at " + s.step + ": " + s.error;
    if (s.warmup_seconds >= 0) what += ", last warm-up " + FormatDuration(s.warmup_seconds);
    Field(os, "Serving side", what);
  }
  Field(os, "GPU type", n.gpu_type);
  Field(os, "Slots", std::to_string(n.used_slots) + " of " + std::to_string(n.slots) + " used");
  Field(os, "Heartbeat", n.connected ? Fixed(n.last_heartbeat_age, 1) + "s ago"
                                     : "none (disconnected" +
                                           (n.last_heartbeat_age > 0 ? ", last " + Fixed(n.last_heartbeat_age, 0) + "s ago" : "") +
                                           ")");
  Field(os, "Store", d->store_endpoint.empty() ? "-" : d->store_endpoint);
  Table workers({{"JOB"}, {"NAME"}, {"OWNER"}, {"RANK"}, {"WORKER"}, {"SLOT"}, {"GEN", true}, {"LEAVING"}});
  for (const auto& w : d->workers)
    workers.Add({std::to_string(w.job), w.job_name, w.owner, std::to_string(w.rank), std::to_string(w.worker),
                 std::to_string(w.local_slot), std::to_string(w.generation), w.leaving ? "yes" : "no"});
  Section(os, "Workers", workers, d->workers.empty(), c.out);
  Section(os, "Recent events", EventsTable(d->recent_events, c.out), d->recent_events.empty(), c.out);
  std::cout << os.str();
  return 0;
}

void OneArg(cxxopts::Options& o, const std::string& help) {
  o.add_options()("args", help, cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"args"});
  o.positional_help(help);
}

}  // namespace

std::string Printable(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  char buf[12];
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto ch = static_cast<unsigned char>(s[i]);
    auto at = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
    if (ch < 0x20 || ch == 0x7f) {  // C0 (ESC starts a terminal sequence), DEL
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else if (ch == 0xc2 && at(1) >= 0x80 && at(1) <= 0x9f) {  // C1 (CSI is U+009B)
      std::snprintf(buf, sizeof buf, "\\u%04x", at(1));
      out += buf;
      i += 1;
    } else if (ch == 0xe2 && ((at(1) == 0x80 && (at(2) == 0x8e || at(2) == 0x8f || (at(2) >= 0xaa && at(2) <= 0xae))) ||
                              (at(1) == 0x81 && at(2) >= 0xa6 && at(2) <= 0xa9))) {
      // Bidirectional controls (U+200E/F, U+202A-E, U+2066-9) reorder what follows.
      unsigned cp = 0x2000 + ((at(1) & 0x3f) << 6) + (at(2) & 0x3f);
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
      i += 2;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out;
}

std::vector<Command> DescribeCommands() {
  return {
      {"describe job", "JOB",
       "one job in full: spec, owner, placement history, rescales and pauses, preemptions, exec errors, last checkpoint",
       true, [](cxxopts::Options& o) { OneArg(o, "JOB"); }, DescribeJob},
      {"describe node", "NAME", "one node: pool, state, loan, slots, its workers by job and rank, heartbeat, events",
       true, [](cxxopts::Options& o) { OneArg(o, "NAME"); }, DescribeNode},
  };
}

}  // namespace aryl::cli
