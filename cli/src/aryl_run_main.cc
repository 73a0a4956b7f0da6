// aryl-run: submit a job, stream its state changes (and, on this machine, its
// rank-0 output), and exit with the job's exit code (the table below, also in
// --help and docs/operations.md). Ctrl-C cancels the job and waits --cancel-grace
// seconds for it to stop. When a worker fails the job, its last stderr lines
// are printed, read from its agent through the scheduler (as `aryl logs`).
//
//   aryl-run [--scheduler tcp://head:7117[,tcp://head2:7117]] [--name N] (--workers 4 | --min 2 --max 8)
//            [--gpu-type A100] [--checkpoint-dir D] -- ./train args...
//   aryl-run --standalone --slots 4 [--loan-slots 4 --inference-demand daily:...] -- ./train ...
//
// --standalone embeds a scheduler and agents in this process on loopback (the
// one-machine default, like torchrun --standalone; standalone_cluster.h): a
// training agent with --slots slots and, with --loan-slots, an inference agent
// whose slots are loaned to training when inference demand
// (--inference-demand) is low.
//
// torchrun spellings: --nproc-per-node N [--nnodes M | MIN:MAX] (workers =
// N x M, or --min/--max = N x MIN / N x MAX; standalone slots default to
// N x M or N x MIN, one machine as under torchrun --standalone), --rdzv-id ID (= --name), --max-restarts, --standalone. Workers
// get torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...;
// aryl/torchrun_env.h); `aryl-run --help` prints the whole mapping.
//
// With several schedulers (--scheduler tcp://a:7117,tcp://b:7117, a highly
// available install) every request goes to whichever leads
// (protocol/scheduler_client.h): the submission is resent with the same client
// token, so a change of leader never makes a second job, and the watch, the
// status polls and the cancel follow the leader to wherever it moves.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "aryl/duration.h"
#include "aryl/flags.h"
#include "client_config.h"
#include "client_util.h"
#include "job_flags.h"
#include "run_output.h"
#include "standalone_cluster.h"

namespace p = aryl::protocol;
namespace fs = std::filesystem;
using std::chrono::milliseconds;

namespace {

std::atomic<int> g_interrupts{0};
void OnSignal(int) { g_interrupts++; }

const char* kProg = "aryl-run";

// Exit codes. The job's own code passes through (a worker's exit code, 128+N
// when signal N killed it); aryl-run's own lie where programs and shells put
// none of theirs: not 1-2 (failure, usage), 64-78 (sysexits.h), 124-127
// (timeout(1), command not executable / not found), 128-192 (signals) or 255.
constexpr int kExitCancelled = 130;          // cancelled and stopped (as a shell reports Ctrl-C)
constexpr int kExitUsage = 200;              // bad flag, value or command line: nothing submitted
constexpr int kExitNotSubmitted = 201;       // scheduler unreachable or refused the submission
constexpr int kExitEndUnknown = 202;         // cancelled, but not seen to stop within --cancel-grace
constexpr int kExitFailedWithoutCode = 203;  // failed with no exit code of its own (see its message)

constexpr const char* kExitCodeHelp =
    "Exit codes (the job's own code passes through; aryl-run's own are 200-203):\n"
    "  0        the job completed\n"
    "  1-255    the job failed with this code: its failing worker's exit code, 128+N when\n"
    "           signal N killed it (a job that itself exits 130 or 200-203 reads like the codes below)\n"
    "  130      the job was cancelled (Ctrl-C, SIGTERM, aryl cancel) and stopped\n"
    "  200      bad usage: a flag, a value or the command line; nothing was submitted\n"
    "  201      not submitted: the scheduler was not reachable or refused the job\n"
    "  202      the job's end is unknown: cancelled, but not seen to stop within --cancel-grace\n"
    "           (or a third Ctrl-C); check it with aryl status\n"
    "  203      the job failed without an exit code of its own (its message says why)\n";

const milliseconds kCallTimeout{3000};
// How the scheduler's resizing event of a restart-kind job begins.
constexpr std::string_view kRestartAll = "restarting all workers";

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options o(kProg,
                     "Run a training job on an Aryl cluster (or standalone on this machine).\n"
                     "\n"
                     "From torchrun (the script runs unchanged; workers get RANK, WORLD_SIZE, LOCAL_RANK,\n"
                     "MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, ... as under torchrun):\n"
                     "  torchrun --standalone                -> aryl-run --standalone\n"
                     "  torchrun --nproc-per-node N          -> --nproc-per-node N (= --workers N)\n"
                     "  torchrun --nnodes M                  -> --nnodes M (workers = N x M)\n"
                     "  torchrun --nnodes MIN:MAX            -> --nnodes MIN:MAX (--min/--max = N x MIN / N x MAX)\n"
                     "  torchrun --max-restarts K            -> --max-restarts K\n"
                     "  torchrun --rdzv-id ID                -> --rdzv-id ID (= --name ID)\n"
                     "  torchrun --rdzv-endpoint HOST:PORT   -> --scheduler tcp://HOST:PORT (the scheduler does rendezvous)\n"
                     "  torchrun --master-addr/--master-port -> not needed (set per start by the scheduler)\n"
                     "  torchrun --node-rank                 -> not needed (the scheduler places workers)\n"
                     "  torchrun --log-dir/--tee             -> --work-dir (standalone), --follow\n"
                     "A resize of a torchrun script is a restart (--elastic restart): all workers get SIGTERM,\n"
                     "then start again at the new size and resume from the script's own checkpoint. Programs\n"
                     "that link the Aryl runtime resize in place (--elastic inplace, detected by default).\n"
                     "Like sbatch, the job runs in --cwd (default: this directory) with --env/--env-file.\n"
                     "\n" +
                         std::string(kExitCodeHelp));
  aryl::SetUsageExitCode(kExitUsage);
  // Defaults: ~/.config/aryl/config or /etc/aryl/aryl.toml, then the environment (client_config.h).
  const aryl::cli::ClientSettings& defaults = aryl::cli::ClientDefaultsOrExit(kProg);
  o.add_options()
      ("scheduler", "Scheduler endpoint, or every scheduler as a comma list: tcp://a:7117,tcp://b:7117 "
                    "(config scheduler, $ARYL_SCHEDULER)",
       cxxopts::value<std::string>()->default_value(defaults.scheduler))
      ("quiet", "Do not print state changes")
      ("cancel-grace", "Seconds to wait for the job to stop after Ctrl-C/SIGTERM cancels it (then exit 202)",
       cxxopts::value<double>()->default_value("30"))
      ("follow-logs", "Print rank 0's output from the agents' log dir (same machine or shared file system)",
       cxxopts::value<std::string>()->default_value(""))
      ("follow", "Print rank 0's output read from its agent through the scheduler (as aryl logs --follow), "
                 "wherever rank 0 runs and moves")
      ("curve-key", "Client CURVE secret key file", cxxopts::value<std::string>()->default_value(defaults.curve_key))
      ("curve-server-key", "Scheduler CURVE public key file",
       cxxopts::value<std::string>()->default_value(defaults.curve_server_key));
  o.add_options("standalone")
      ("standalone", "Embed a scheduler and agents in this process (loopback only)")
      ("slots", "Standalone: training slots", cxxopts::value<int>()->default_value("0"))
      ("loan-slots", "Standalone: slots of a loanable inference agent", cxxopts::value<int>()->default_value("0"))
      ("inference-demand", "Standalone: inference demand curve (FILE or daily:...)",
       cxxopts::value<std::string>()->default_value(""))
      ("demand-time-scale", "Standalone: demand-curve seconds per wall second", cxxopts::value<double>()->default_value("1"))
      ("state", "Standalone: state file (default: a fresh one under the work dir)",
       cxxopts::value<std::string>()->default_value(""))
      ("work-dir", "Standalone: logs and state go here", cxxopts::value<std::string>()->default_value("aryl-run"))
      ("http-port", "Standalone: metrics/status port (-1: off)", cxxopts::value<int>()->default_value("-1"));
  aryl::cli::AddJobFlags(o);
  // torchrun's spellings, so a torchrun command line carries over.
  o.add_options("torchrun aliases")
      ("nproc-per-node", "torchrun --nproc-per-node: workers per machine (workers = nproc x nnodes)",
       cxxopts::value<int>())
      ("nnodes", "torchrun --nnodes N or MIN:MAX: machines (elastic: --min/--max = MIN/MAX x nproc)",
       cxxopts::value<std::string>())
      ("rdzv-id", "torchrun --rdzv-id: the job name", cxxopts::value<std::string>());
  aryl::AddCommonFlags(o);
  auto r = aryl::ParseFlagsOrExit(o, argc, argv);

  p::SubmitJob m;
  aryl::cli::ReadJobFlags(kProg, r, m);
  if (r.count("rdzv-id")) m.name = r["rdzv-id"].as<std::string>();
  if (r.count("nproc-per-node") || r.count("nnodes")) {
    int nproc = r.count("nproc-per-node") ? r["nproc-per-node"].as<int>() : 1;
    std::string nodes = r.count("nnodes") ? r["nnodes"].as<std::string>() : "1";
    auto colon = nodes.find(':');
    int lo = 0, hi = 0;
    try {
      lo = std::stoi(nodes.substr(0, colon));
      hi = colon == std::string::npos ? lo : std::stoi(nodes.substr(colon + 1));
    } catch (const std::exception&) {
      aryl::UsageError(kProg, "--nnodes '" + nodes + "': expected N or MIN:MAX");
    }
    if (nproc < 1 || lo < 1 || hi < lo) {
      aryl::UsageError(kProg, "--nproc-per-node " + std::to_string(nproc) + " --nnodes " + nodes +
                                  ": need nproc >= 1 and 1 <= MIN <= MAX");
    }
    if (lo == hi) {
      m.workers = nproc * lo;
    } else {
      m.min_workers = nproc * lo;
      m.max_workers = nproc * hi;
    }
  }
  bool standalone = r.count("standalone") > 0;
  int slots = r["slots"].as<int>();
  if (standalone && slots <= 0 && (r.count("nproc-per-node") || r.count("nnodes"))) {
    // torchrun --standalone is one machine: --nnodes MIN:MAX starts with MIN
    // machines' workers (LOCAL_WORLD_SIZE = nproc when MIN is 1); --loan-slots
    // adds a second "machine" to grow onto.
    slots = int(m.workers ? *m.workers : m.min_workers.value_or(0));
  }
  int loan_slots = r["loan-slots"].as<int>();
  if (!m.workers && !m.min_workers && !m.max_workers) {
    if (standalone && slots > 0) m.workers = slots;
    else aryl::UsageError(kProg, "give --workers N or --min A --max B");
  }
  if (m.argv.empty()) aryl::UsageError(kProg, "missing the command to run (after --)");
  aryl::cli::ValidateJobOrExit(kProg, m,
                               r.count("nproc-per-node") || r.count("nnodes")
                                   ? "--nproc-per-node N [--nnodes M | MIN:MAX] or --workers N or --min A --max B"
                                   : "--workers N or --min A --max B");
  if (standalone && slots <= 0) aryl::UsageError(kProg, "--standalone needs --slots N (N >= 1)");
  if (loan_slots < 0) aryl::UsageError(kProg, "--loan-slots must be >= 0");
  bool quiet = r.count("quiet") > 0;
  const double cancel_grace = r["cancel-grace"].as<double>();
  aryl::RequireAtLeast(kProg, "--cancel-grace", cancel_grace, 0);
  const bool scheduler_given = r.count("scheduler") > 0;
  std::string follow_logs = r["follow-logs"].as<std::string>();
  const bool follow = r.count("follow") > 0;
  if (follow && !follow_logs.empty())
    aryl::UsageError(kProg, "give --follow or --follow-logs DIR, not both");
  if (!follow_logs.empty() && !standalone && !fs::is_directory(follow_logs))
    aryl::FlagError(kProg, "--follow-logs", follow_logs,
                    "no such directory (the agents' --log-dir, on this machine or a shared file system; "
                    "--follow reads rank 0's output through the scheduler instead)");
  std::string endpoint = r["scheduler"].as<std::string>();
  if (auto list = p::ParseSchedulerEndpoints(endpoint); !list.ok())
    aryl::FlagError(kProg, "--scheduler", endpoint, list.status().message());
  std::string curve_key = r["curve-key"].as<std::string>();
  std::string curve_server_key = r["curve-server-key"].as<std::string>();

  // --- standalone: scheduler and agents in this process ---
  std::optional<aryl::cli::StandaloneCluster> cluster;
  if (standalone) {
    aryl::cli::StandaloneOptions so;
    so.work_dir = r["work-dir"].as<std::string>();
    so.state_path = r["state"].as<std::string>();
    so.http_port = r["http-port"].as<int>();
    so.inference_demand = r["inference-demand"].as<std::string>();
    so.demand_time_scale = r["demand-time-scale"].as<double>();
    so.slots = slots;
    so.loan_slots = loan_slots;
    so.gpu_type = m.gpu_type;
    const char* env_level = std::getenv("ARYL_LOG");
    so.log_level_chosen = (r.count("log-level") && !r["log-level"].as<std::string>().empty()) ||
                          (env_level && *env_level);
    so.quiet = quiet;
    cluster.emplace(kProg, std::move(so));
    if (auto st = cluster->Start(); !st.ok()) return aryl::cli::Fail(kProg, st, kExitNotSubmitted);
    endpoint = cluster->endpoint();
    follow_logs = cluster->log_dir();
  }
  auto shutdown = [&](int code) {
    if (cluster) cluster->Stop();
    return code;
  };

  // Each request tries for kCallTimeout at most, moving along the list; the
  // loops below ask again, from wherever the last request moved to.
  auto client = aryl::cli::ConnectScheduler(endpoint, curve_key, curve_server_key, kCallTimeout);
  if (!client.ok()) return shutdown(aryl::cli::Fail(kProg, client.status(), kExitNotSubmitted));
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);

  // Submit; in standalone mode the agents may still be registering. A timed-out
  // submission is resent with the same token, so it never creates a second job;
  // so is one that found only standbys (an election, for up to ~30 s).
  m.client_token = aryl::cli::NewClientToken();
  aryl::Result<p::SubmitReply> submitted = aryl::Status::Unavailable("not submitted");
  int timeouts = 0, elections = 0;
  const auto per_try = aryl::cli::PerTryTimeout(kCallTimeout, (*client)->endpoints().size());
  // Standalone: a job that needs every embedded agent waits for them to
  // connect rather than being refused for a size the cluster is about to have.
  if (cluster) cluster->WaitForAgents(**client, per_try, g_interrupts);
  for (int attempt = 0; attempt < 50 && g_interrupts == 0; ++attempt) {
    submitted = (*client)->Call<p::SubmitReply>(m, per_try);
    if (submitted.ok()) break;
    // Not even sent (no scheduler answers at that address): no job can have
    // been made, and waiting longer rarely helps; say so now, not in 9 s.
    const bool not_sent = submitted.status().message().find("' not sent") != std::string::npos;
    if (submitted.status().IsTimeout() && !(not_sent && !standalone) && ++timeouts < 3) continue;
    if (p::IsStandbyError(submitted.status()) && ++elections < 10) continue;
    if (!(submitted.status().IsUnavailable() && standalone)) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  if (!submitted.ok()) return shutdown(aryl::cli::Fail(kProg, submitted.status(), kExitNotSubmitted));
  p::JobId job = submitted->job;
  if (!quiet) std::cerr << kProg << ": job " << job << " (" << submitted->name << ") submitted\n";
  // A restart-kind elastic job (a torchrun script) resumes after a resize only
  // from a checkpoint the script keeps: say so before the first resize does.
  const bool torchrun_flags = r.count("nproc-per-node") || r.count("nnodes");
  if (!quiet) std::cerr << aryl::cli::NoCheckpointNote(kProg, m, job, torchrun_flags);

  aryl::cli::Tail tail;
  int exit_code = kExitEndUnknown;
  // Set once a signal asked to cancel: from then on the wait is bounded by
  // --cancel-grace (the scheduler may be gone and never answer).
  std::optional<std::chrono::steady_clock::time_point> cancelling_since;
  auto last_watch = std::chrono::steady_clock::now() - std::chrono::seconds(10);
  std::string last_line;
  std::optional<p::JobState> last_state;
  std::int64_t last_workers = -1;
  bool restart_noted = false;  // the step-0 note, once per stop until the job runs again
  std::int64_t rank0_worker = 0;
  // Since when the current rank 0 is known; the --follow offsets per worker;
  // the workers whose missing log was already said.
  std::optional<std::chrono::steady_clock::time_point> rank0_since;
  auto last_log_poll = std::chrono::steady_clock::now();
  std::map<std::int64_t, std::int64_t> log_offsets;
  std::set<std::int64_t> missing_said;
  // --follow: one chunk of rank 0's stdout from its agent, from where the last
  // chunk of that worker ended (a new rank 0, after a restart or a move, is
  // another file); true when it held data. An error is said once per worker.
  auto pump_remote = [&]() -> bool {
    p::JobLogs q;
    q.job = job;
    q.worker = rank0_worker;
    q.offset = log_offsets[rank0_worker];
    q.max_bytes = p::kMaxLogChunk;
    auto chunk = (*client)->Call<p::LogChunk>(q, std::min(per_try, milliseconds(1000)));
    if (!chunk.ok()) {
      if (!missing_said.count(rank0_worker) && !chunk.status().IsNotFound()) {
        missing_said.insert(rank0_worker);
        std::cerr << kProg << ": rank 0's output (worker " << rank0_worker << "): " << chunk.status().ToString()
                  << "\n";
      }
      return false;
    }
    std::cout.write(reinterpret_cast<const char*>(chunk->data.data.data()),
                    static_cast<std::streamsize>(chunk->data.data.size()));
    std::cout.flush();
    log_offsets[rank0_worker] = chunk->offset + static_cast<std::int64_t>(chunk->data.data.size());
    return !chunk->data.data.empty();
  };
  while (true) {
    if (g_interrupts > 0 && !cancelling_since) {
      cancelling_since = std::chrono::steady_clock::now();
      std::cerr << kProg << ": interrupted; cancelling job " << job << " (waiting up to "
                << aryl::FormatDuration(cancel_grace) << " for it to stop)\n";
      p::CancelJob c;
      c.job = job;
      auto rc = (*client)->Call<p::Ok>(c, per_try);
      if (!rc.ok()) std::cerr << kProg << ": cancel: " << rc.status().ToString() << "\n";
    }
    if (g_interrupts > 2) {
      std::cerr << kProg << ": giving up waiting for job " << job << " to stop; its end is unknown\n";
      break;
    }
    if (cancelling_since &&
        std::chrono::steady_clock::now() - *cancelling_since > std::chrono::duration<double>(cancel_grace)) {
      std::cerr << kProg << ": job " << job << " was not seen to stop within " << aryl::FormatDuration(cancel_grace)
                << " of the cancel (is the scheduler at " << (*client)->endpoint()
                << " reachable?); its end is unknown: check it with aryl status " << job << "\n";
      break;
    }
    // (Re)watch every few seconds: survives a scheduler restart and a change
    // of leader (the request moves to the new one; a watch there sends the
    // job's state at once, or its final event when it is over).
    auto now = std::chrono::steady_clock::now();
    if (now - last_watch > std::chrono::seconds(3)) {
      last_watch = now;
      p::WatchJob w;
      w.job = job;
      (void)(*client)->Call<p::Ok>(w, std::min(per_try, milliseconds(1000)));
    }
    if (!follow_logs.empty()) {
      // Rank 0's output, wherever rank 0 is now (it moves when its worker is lost).
      const std::string path =
          follow_logs + "/job-" + std::to_string(job) + "/worker-" + std::to_string(rank0_worker) + ".out";
      tail.Follow(path);
      tail.Pump(std::cout);
      // Rank 0 has run for a while and its log is not here: another machine's
      // agent runs it (a move), or DIR is not its --log-dir. Said once per worker.
      if (rank0_since && now - *rank0_since > std::chrono::seconds(5) && !missing_said.count(rank0_worker) &&
          !fs::exists(path)) {
        missing_said.insert(rank0_worker);
        std::cerr << kProg << ": --follow-logs: " << path << " does not exist: rank 0 (worker " << rank0_worker
                  << ") runs on an agent whose log dir is not " << follow_logs
                  << " here; --follow reads its output through the scheduler\n";
      }
    }
    if (follow && rank0_since && now - last_log_poll > milliseconds(500)) {
      last_log_poll = now;
      if (pump_remote()) last_log_poll = now - milliseconds(500);  // more may be there
    }
    auto msg = (*client)->Receive(milliseconds(100));
    if (!msg.ok()) continue;
    auto* ev = std::get_if<p::JobEvent>(&*msg);
    if (!ev || ev->job != job) continue;
    if (ev->rank0_worker >= 0) {
      if (!rank0_since || ev->rank0_worker != rank0_worker) rank0_since = std::chrono::steady_clock::now();
      rank0_worker = ev->rank0_worker;
    }
    // "running (2 workers): ...", "queued", "completed": the size only where
    // there is one, the reason only where it adds to the state's name.
    const std::string state_name(p::ToString(ev->state));
    std::string line = state_name;
    if (ev->workers > 0) line += " (" + std::to_string(ev->workers) + (ev->workers == 1 ? " worker)" : " workers)");
    // The scheduler's message may open with the state's own name ("preempted:
    // drained (--now): preempt"): said once.
    std::string_view message = ev->message;
    if (message.starts_with(state_name + ": ")) message.remove_prefix(state_name.size() + 2);
    if (!message.empty() && message != state_name) line += ": " + std::string(message);
    // A re-watch answers with the job's state and its bare reason ("admit
    // (sjf)"), which the line of that change already said in full.
    const bool restated = ev->state == last_state && ev->workers == last_workers &&
                          !ev->message.empty() && last_line.ends_with(message);
    last_state = ev->state;
    last_workers = ev->workers;
    if (!quiet && line != last_line && !restated) {
      std::cerr << kProg << ": job " << job << " " << line << "\n";
      // A restart of all workers, or a preemption (a drain --now, a reclaim):
      // without a checkpoint directory the job's progress is lost unless the
      // script keeps its own.
      const bool restarts_all =
          (ev->state == p::JobState::kResizing && ev->message.rfind(kRestartAll, 0) == 0) ||
          ev->state == p::JobState::kPreempted;
      if (restarts_all && m.checkpoint_dir.empty() && !restart_noted)
        std::cerr << kProg << ": note: job " << job << " has no --checkpoint-dir: its workers start again from step 0 "
                  << "unless the script resumes from a checkpoint of its own\n";
      restart_noted = restarts_all || (restart_noted && ev->state != p::JobState::kRunning);
    }
    if (!restated) last_line = line;
    for (const auto& l : ev->output) std::cout << l << "\n";
    if (ev->final) {
      if (ev->state == p::JobState::kCompleted) {
        exit_code = static_cast<int>(ev->exit_code.value_or(0));
      } else if (ev->state == p::JobState::kCancelled) {
        exit_code = kExitCancelled;
      } else {
        if (quiet) std::cerr << kProg << ": job " << job << " failed: " << ev->message << "\n";
        // Without a worker's failure (refused by the scheduler, say) the code is
        // not the job's own; nor is a 0 from a worker that failed it anyway.
        exit_code = ev->failure ? static_cast<int>(ev->exit_code.value_or(0)) : 0;
        if (exit_code == 0) exit_code = kExitFailedWithoutCode;
      }
      // A worker that could not start (a missing program) has no stderr: the
      // job's line above already says why.
      if (ev->state == p::JobState::kFailed && ev->failure && ev->failure->error.empty()) {
        std::string more = standalone ? cluster->log_dir() + "/job-" + std::to_string(job) + "/worker-" +
                                            std::to_string(ev->failure->worker) + ".err"
                                      : "aryl logs " + std::to_string(job) + " --rank " +
                                            std::to_string(ev->failure->rank) + " --stderr" +
                                            (scheduler_given ? " --scheduler " + endpoint : "");
        aryl::cli::ReportFailure(**client, job, *ev->failure, more);
      }
      break;
    }
  }
  if (!follow_logs.empty()) {
    std::this_thread::sleep_for(milliseconds(100));
    tail.Pump(std::cout);
  }
  // The rest of rank 0's output (bounded: a chunk is up to kMaxLogChunk).
  if (follow && rank0_since)
    for (int i = 0; i < 64 && pump_remote(); ++i) {
    }
  return shutdown(exit_code);
}
